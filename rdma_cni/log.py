"""Logging for the plugin, set up on first use.

The exec'd plugin records its config with :func:`configure` (cheap); the
``logging`` package and the handlers are only loaded when something is actually
logged, so a pass-through ADD never pays for them. Modules on that path log
through a :class:`LazyLogger`.
"""

from __future__ import annotations

from typing import Any

_state: dict[str, Any] = {"conf": None, "ready": False}


def configure(conf: dict[str, Any]) -> None:
    """Remember the plugin's logging settings; handlers are made on first use."""
    _state["conf"], _state["ready"] = conf, False


def setup(conf: dict[str, Any] | None = None) -> None:
    """Make the handlers now (resident server, tests)."""
    from rdma_cni.logsetup import setup as make

    make(conf)
    _state["conf"], _state["ready"] = None, True


def get(name: str = "rdma_cni") -> Any:
    import logging

    if _state["conf"] is not None and not _state["ready"]:
        setup(_state["conf"])
    return logging.getLogger(name)


class LazyLogger:
    """A logger proxy that loads ``logging`` (and sets up handlers) on first call."""

    def __init__(self, name: str = "rdma_cni") -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(get(self._name), attr)
