"""The node's run files: what the DaemonSet's long-running containers write for their
probes, ``ls``, ``doctor`` and the exporter to read. Heartbeats (:mod:`.heartbeat`), the
record of the configuration a pod started with (:mod:`.configrecord`), the agent's
status file (:mod:`.agentstatus`) and the device plugin's registration
(:mod:`.pluginstatus`). Below tools/ and kube/, which both write and read them; the
host's CNI-only bundle leaves them out (build.spec ``HOST_ONLY_NOT``)."""
