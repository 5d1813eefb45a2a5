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
_HOOKS: list[Callable[[str], Any]] = []  # the stand-ins' own __getattr__ functions


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

    _install(pkg, attribute)
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
    _install(mod, _completer(mod, spec.loader, preset))
    sys.modules[name] = mod


def _completer(mod: Any, loader: Any, keep: dict[str, Any]) -> Callable[[str], Any]:
    """The stand-in's ``__getattr__``: the real code run into it once (again after a
    failure, as a failed import is tried again); a name the module then lacks, or asked
    by the real code while it runs, is an AttributeError, as a partly made module gives."""
    def complete(attr: str) -> Any:
        with _completing:
            if not state:  # neither done nor running (in this thread: the lock is ours)
                state.append("running")
                try:
                    loader.exec_module(mod)
                except BaseException:
                    state.clear()
                    raise
                mod.__dict__.update(keep)
                state[0] = "done"
                if _ours(mod.__dict__.get("__getattr__")):  # the real code has none
                    del mod.__dict__["__getattr__"]
        if attr in mod.__dict__:
            return mod.__dict__[attr]
        real = mod.__dict__.get("__getattr__")
        if real is not None and not _ours(real):
            return real(attr)
        raise AttributeError(f"module {mod.__name__!r} has no attribute {attr!r}")

    state: list[str] = []
    return complete


def _install(mod: Any, hook: Callable[[str], Any]) -> None:
    _HOOKS.append(hook)
    mod.__dict__["__getattr__"] = hook


def _ours(hook: object) -> bool:
    return any(hook is h for h in _HOOKS)
