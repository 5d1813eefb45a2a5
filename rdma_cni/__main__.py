from rdma_cni.cli import entry

entry()
