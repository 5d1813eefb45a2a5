"""``python -m rdma_cni.kube.deviceplugin --config FILE``."""

import sys

from rdma_cni.kube.deviceplugin.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
