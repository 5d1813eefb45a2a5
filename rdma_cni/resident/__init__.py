"""The resident path: a node process (``rdma-cni serve``, run by the DaemonSet)
keeps the plugin's modules loaded; the exec'd binary forwards each request to it
over a unix socket and falls back to running in-process when it is absent,
refuses, or does not answer in time. Both paths share one store and its locks."""
