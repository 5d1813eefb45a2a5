import sys

from rdma_cni.cli import main

sys.exit(main())
