"""The node agent (``rdma-cni agent``)."""
