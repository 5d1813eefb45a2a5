"""Read-only access to sysfs (and the few /proc files the RDMA code reads).

This is the only module that touches ``/sys``. Every path is relative to an
injectable root so tests can build fake trees (see ``tests/support/fakes/sysfs.py``).
Any read error (ENOENT, EINVAL of an empty GID slot, EISDIR, ...) reads as
``None``: callers treat it as "no value", never as a crash.
"""

from __future__ import annotations

import os


class Sysfs:
    """Paths like ``"sys/class/net/eth1/mtu"`` are relative to ``root``."""

    def __init__(self, root: str = "/") -> None:
        self.root = os.path.abspath(root)

    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel.lstrip("/"))

    def read(self, rel: str) -> str | None:
        """Stripped text of the file, or None when it cannot be read."""
        try:
            with open(self.path(rel), encoding="utf-8", errors="replace") as f:
                return f.read().strip()
        except (OSError, ValueError):
            return None

    def listdir(self, rel: str) -> list[str]:
        """Sorted entries of the directory, [] when missing or unreadable."""
        try:
            return sorted(os.listdir(self.path(rel)))
        except OSError:
            return []

    def exists(self, rel: str) -> bool:
        return os.path.exists(self.path(rel))

    def realpath(self, rel: str) -> str | None:
        """The resolved path relative to root, or None when it does not exist."""
        full = self.path(rel)
        if not os.path.exists(full):
            return None
        resolved = os.path.realpath(full)
        base = os.path.realpath(self.root)
        if base == "/":
            return resolved.lstrip("/")
        if resolved != base and not resolved.startswith(base + os.sep):
            return None
        return os.path.relpath(resolved, base)
