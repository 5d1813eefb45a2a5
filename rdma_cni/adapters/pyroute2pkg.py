"""pyroute2 without its package ``__init__`` and its ``config``'s imports: import this
before any pyroute2 module.

The package ``__init__`` imports every netlink family pyroute2 has (NDB, IPDB,
conntrack, nftables, wireless, ...: about half the in-process plugin's start-up).
``pyroute2.config``, which ``ifinfmsg`` reads three names of, imports ``multiprocessing``
(with ``pickle``) and ``platform`` for pyroute2's other users (bench/README.md, figure
6): it stands in with those three until something asks it for more.
"""

from __future__ import annotations

import socket

from rdma_cni.lightpkg import light_module, light_package

light_package("pyroute2")
light_module("pyroute2.config", {"AF_BRIDGE": socket.AF_BRIDGE, "data_plugins_pkgs": [],
                                 "data_plugins_path": []})
