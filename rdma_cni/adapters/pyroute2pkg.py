"""pyroute2 without its package ``__init__``: import this before any pyroute2 module.

The package ``__init__`` imports every netlink family pyroute2 has (NDB, IPDB,
conntrack, nftables, wireless, ...: about half the in-process plugin's start-up).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any


def _light_package() -> None:
    """Import pyroute2's modules without its package ``__init__``, which imports every
    netlink family it has (NDB, IPDB, conntrack, nftables, wireless, ...: about half
    the in-process plugin's start-up). The package module stands in with its real
    ``__path__``; the first attribute asked of it that is not a submodule runs the real
    ``__init__`` into it, so any other user of ``pyroute2`` still sees all of it."""
    if "pyroute2" in sys.modules:
        return
    spec = importlib.util.find_spec("pyroute2")
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return
    pkg = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def complete(name: str) -> Any:
        if not name.startswith("__") and importlib.util.find_spec(f"pyroute2.{name}"):
            return importlib.import_module(f"pyroute2.{name}")  # `from pyroute2 import config`
        del pkg.__dict__["__getattr__"]
        loader.exec_module(pkg)
        return getattr(pkg, name)

    pkg.__dict__["__getattr__"] = complete
    sys.modules["pyroute2"] = pkg


_light_package()
