"""``python -m rdma_cni.deviceplugin --config FILE``."""

import sys

from rdma_cni.deviceplugin.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
