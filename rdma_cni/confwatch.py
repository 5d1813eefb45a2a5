"""Wake up within a moment of a change to the CNI conf dir (inotify), else after a timeout.

``DirWatch`` watches the conf dir (files created, renamed in or out, written,
truncated, deleted) and its parent (the conf dir itself removed, renamed or
created anew). When the dir is replaced the watch is re-armed on the new one;
while it is absent only the parent is watched. ``wait(timeout)`` returns as soon
as something relevant happened (after a short settle time, so a truncate and the
write that follows arrive as one wake-up) or when ``timeout`` passes: the caller
re-checks the files either way, so a lost event costs at most one timeout.

Where inotify is unavailable (no kernel support, the watch limit reached)
``open_watch`` returns None and the caller polls.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from inotify_simple import INotify
from inotify_simple import flags as F

DIR_MASK = (F.CREATE | F.DELETE | F.MODIFY | F.CLOSE_WRITE | F.MOVED_FROM | F.MOVED_TO
            | F.ATTRIB | F.DELETE_SELF | F.MOVE_SELF)
PARENT_MASK = F.CREATE | F.DELETE | F.MOVED_FROM | F.MOVED_TO | F.ONLYDIR
GONE = F.IGNORED | F.DELETE_SELF | F.MOVE_SELF | F.UNMOUNT
SETTLE_MS = 50


def _ident(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class DirWatch:
    """inotify on ``path`` and its parent; see the module docstring."""

    def __init__(self, path: str, settle_ms: int = SETTLE_MS) -> None:
        self.path = os.path.abspath(path)
        self.parent, self.name = os.path.split(self.path)
        self.settle_ms = settle_ms
        self.ino = INotify()
        self.parent_wd: int | None = None
        self.dir_wd: int | None = None
        self.dir_ident: tuple[int, int] | None = None
        self.rearms = 0  # times the dir watch was (re)placed: 1 after a normal start
        self._arm()

    def close(self) -> None:
        self.ino.close()

    def _add(self, path: str, mask: int) -> int | None:
        try:
            return int(self.ino.add_watch(path, mask))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _arm(self) -> None:
        """(Re)place the watches; the dir watch only when the dir's identity changed."""
        if self.parent_wd is None:
            self.parent_wd = self._add(self.parent, PARENT_MASK)
        ident = _ident(self.path)
        if ident == self.dir_ident and self.dir_wd is not None:
            return
        if self.dir_wd is not None:
            with contextlib.suppress(OSError):  # already gone with the old dir
                self.ino.rm_watch(self.dir_wd)
        self.dir_wd = self._add(self.path, DIR_MASK) if ident else None
        self.dir_ident = ident if self.dir_wd is not None else None
        if self.dir_wd is not None:
            self.rearms += 1

    def _relevant(self, ev: Any) -> bool:
        if ev.wd == self.parent_wd:
            return bool(ev.name == self.name)
        if ev.wd == self.dir_wd and ev.mask & GONE:
            self.dir_wd = None
            self.dir_ident = None
        return True

    def wait(self, timeout: float) -> bool:
        """True when the dir (or its entries) changed before ``timeout`` seconds passed."""
        events = self.ino.read(timeout=max(0, int(timeout * 1000)), read_delay=self.settle_ms)
        changed = any([self._relevant(ev) for ev in events])
        self._arm()
        return changed


def open_watch(path: str) -> DirWatch | None:
    """A DirWatch on ``path``, or None where inotify cannot be used."""
    try:
        return DirWatch(path)
    except OSError:
        return None
