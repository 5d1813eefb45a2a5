"""Read-only access to sysfs (and the few /proc files the RDMA code reads).

This is the only module that touches ``/sys``. Every path is relative to an
injectable root so tests can build fake trees (see ``tests/support/fakes/sysfs.py``).
Any read error (ENOENT, EINVAL of an empty GID slot, EISDIR, ...) reads as
``None``: callers treat it as "no value", never as a crash.
"""

from __future__ import annotations

import os
from collections.abc import Generator

#: bytes asked for per read (a sysfs attribute is at most a page)
CHUNK = 65536


class Sysfs:
    """Paths like ``"sys/class/net/eth1/mtu"`` are relative to ``root``."""

    def __init__(self, root: str = "/") -> None:
        self.root = os.path.abspath(root)

    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel.lstrip("/"))

    def read(self, rel: str) -> str | None:
        """Stripped text of the file, or None when it cannot be read."""
        return _text(self.path(rel))

    def each(self, rel: str) -> Generator[tuple[str, str], None, None]:
        """(name, stripped text) of each file in the directory that can be read, in name
        order, numbers by their value (a GID table's slots, hundreds of them mostly empty:
        opened from the directory, each name without its path walked again); none when the
        directory cannot be opened. A caller that stops early closes the directory as it
        drops the iterator (or closes it)."""
        try:
            dfd = os.open(self.path(rel), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (OSError, ValueError):
            return
        try:
            for name in sorted(os.listdir(dfd), key=_slot_order):
                text = _text(name, dfd)
                if text is not None:
                    yield name, text
        except OSError:
            return
        finally:
            os.close(dfd)

    def read_each(self, rel: str) -> dict[str, str]:
        """:meth:`each` as a dict; {} when the directory cannot be opened."""
        return dict(self.each(rel))

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


def _slot_order(name: str) -> tuple[int, int, str]:
    """Numbered entries (a GID table's slots) first and by their number, then the others."""
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def _text(path: str, dir_fd: int | None = None) -> str | None:
    """Stripped text of the file, read with the bare system calls (no buffered file object:
    discovery reads hundreds of GID slots, most of which fail to read); None when it
    cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    except (OSError, ValueError):
        return None
    chunks = []
    try:
        while chunk := os.read(fd, CHUNK):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace").strip()
