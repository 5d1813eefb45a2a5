"""A third-party package or module imported without running all of its code, for the
ones whose top level imports far more than the plugin uses (each exec'd in-process ADD
pays every import: bench/README.md, figure 6).

The stand-in completes itself (runs the real code into itself) the first time anything
asks it for an attribute it lacks, so any other user still sees all of it; completion
runs once, under a lock (``serve``'s request threads may ask at once)."""

from __future__ import annotations

import _thread
import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

_completing = _thread.RLock()  # reentrant: the real code may ask its own stand-in


def light_package(name: str) -> None:
    """Stand a module with the package's real ``__path__`` in for package ``name``, so
    that its submodules import without its ``__init__``. The first attribute asked of it
    that is not a submodule runs the real ``__init__`` into it. Nothing happens once the
    package is imported."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return
    pkg = importlib.util.module_from_spec(spec)
    complete = _completer(pkg, spec.loader, {})

    def attribute(attr: str) -> Any:
        if not attr.startswith("__") and importlib.util.find_spec(f"{name}.{attr}"):
            return importlib.import_module(f"{name}.{attr}")  # `from <name> import <module>`
        return complete(attr)

    pkg.__dict__["__getattr__"] = attribute
    sys.modules[name] = pkg


def light_module(name: str, preset: dict[str, Any]) -> None:
    """Stand a module holding only ``preset`` in for module ``name`` (its package
    imported first); the first other attribute asked of it runs the real module into it,
    the preset objects kept (a user may hold them already). Nothing happens once the
    module is imported."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    mod.__dict__.update(preset)
    mod.__dict__["__getattr__"] = _completer(mod, spec.loader, preset)
    sys.modules[name] = mod


def _completer(mod: Any, loader: Any, keep: dict[str, Any]) -> Callable[[str], Any]:
    def complete(attr: str) -> Any:
        with _completing:
            if mod.__dict__.get("__getattr__") is not None and not done:
                done.append(True)
                ours = mod.__dict__["__getattr__"]
                loader.exec_module(mod)
                mod.__dict__.update(keep)
                if mod.__dict__.get("__getattr__") is ours:  # the real code has none
                    del mod.__dict__["__getattr__"]
        return getattr(mod, attr)  # AttributeError as the real module gives it

    done: list[bool] = []
    return complete
