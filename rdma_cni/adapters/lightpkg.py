"""A third-party package imported without running its package ``__init__``, for the
packages whose ``__init__`` imports far more than the plugin uses (each exec'd
in-process ADD pays every import: bench/README.md, figure 6)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any


def light_package(name: str) -> None:
    """Stand a module with the package's real ``__path__`` in for package ``name``, so
    that its submodules import without its ``__init__``. The first attribute asked of it
    that is not a submodule runs the real ``__init__`` into it, so any other user of the
    package still sees all of it. Nothing happens once the package is imported."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return
    pkg = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def complete(attr: str) -> Any:
        if not attr.startswith("__") and importlib.util.find_spec(f"{name}.{attr}"):
            return importlib.import_module(f"{name}.{attr}")  # `from <name> import <module>`
        del pkg.__dict__["__getattr__"]
        loader.exec_module(pkg)
        return getattr(pkg, attr)

    pkg.__dict__["__getattr__"] = complete
    sys.modules[name] = pkg
