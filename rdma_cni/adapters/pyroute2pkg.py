"""pyroute2 without its package ``__init__``: import this before any pyroute2 module.

The package ``__init__`` imports every netlink family pyroute2 has (NDB, IPDB,
conntrack, nftables, wireless, ...: about half the in-process plugin's start-up).
"""

from __future__ import annotations

from rdma_cni.adapters.lightpkg import light_package

light_package("pyroute2")
