"""``install --watch``: re-apply our entry within a moment of a change to the CNI conf
dir (inotify), and every ``interval`` seconds as a backstop.

``DirWatch`` watches the conf dir (files created, renamed in or out, written,
truncated, deleted) and its parent (the conf dir itself removed, renamed or
created anew). When the dir is replaced the watch is re-armed on the new one;
while it is absent only the parent is watched. ``wait(timeout)`` returns as soon
as something relevant happened (after a short settle time, so a truncate and the
write that follows arrive as one wake-up) or when ``timeout`` passes: the caller
re-checks the files either way, so a lost event costs at most one timeout.

When the first file is a symlink, the directories of its target (and of every link on
the way) are watched as well, for those names: the primary writes its own file there.

Where inotify is unavailable (no kernel support, the watch limit reached)
``open_watch`` returns None and ``watch_entry`` polls.

``watch_entry`` re-reads the first conflist on every wake and inserts our entry into
what the primary wrote (``conflist.ensure_entry``), so the primary's own changes are
kept, and takes it out of the other files (a new first file took over); an outcome is
said once, not on every wake; and a writer that keeps removing the entry is answered
at most once a second after a few fast rounds, not in a loop.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from inotify_simple import INotify, flags

from rdma_cni.cliargs import say as _say
from rdma_cni.errors import CniError
from rdma_cni.models.subconfig import first_conf_file
from rdma_cni.tools.conffile import link_chain
from rdma_cni.tools.conflist import ensure_entry

DIR_MASK = (flags.CREATE | flags.DELETE | flags.MODIFY | flags.CLOSE_WRITE | flags.MOVED_FROM
            | flags.MOVED_TO | flags.ATTRIB | flags.DELETE_SELF | flags.MOVE_SELF)
PARENT_MASK = flags.CREATE | flags.DELETE | flags.MOVED_FROM | flags.MOVED_TO | flags.ONLYDIR
GONE = flags.IGNORED | flags.DELETE_SELF | flags.MOVE_SELF | flags.UNMOUNT
#: a symlink target's dir; MASK_ADD: never narrows a watch the dir already has
LINK_MASK = (flags.CREATE | flags.DELETE | flags.MODIFY | flags.CLOSE_WRITE | flags.MOVED_FROM
             | flags.MOVED_TO | flags.ATTRIB | flags.ONLYDIR | flags.MASK_ADD)
SETTLE_MS = 50


def _ident(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class DirWatch:
    """inotify on ``path`` and its parent; see the module docstring."""

    def __init__(self, path: str, settle_ms: int = SETTLE_MS,
                 follow: Callable[[], list[str]] | None = None) -> None:
        self.path = os.path.abspath(path)
        self.follow = follow or list  # the files outside the dir whose changes count
        self.link_wds: dict[str, int] = {}  # dir -> wd
        self.link_names: dict[int, set[str]] = {}  # wd -> the names that count there
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
        self._arm_dir()
        self._arm_links()

    def _arm_dir(self) -> None:
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

    def _arm_links(self) -> None:
        """Watch the dirs of the files the first file links to, for those names."""
        want: dict[str, set[str]] = {}
        here = os.path.realpath(self.path)
        for p in self.follow():
            d = os.path.realpath(os.path.dirname(p) or ".")  # as inotify resolves it
            if d != here:
                want.setdefault(d, set()).add(os.path.basename(p))
        for d in set(self.link_wds) - set(want):
            wd = self.link_wds.pop(d)
            self.link_names.pop(wd, None)
            if wd not in (self.parent_wd, self.dir_wd):
                with contextlib.suppress(OSError):
                    self.ino.rm_watch(wd)
        for d, names in want.items():
            try:
                added = self.link_wds.get(d) or self._add(d, LINK_MASK)
            except OSError:  # no permission, the watch limit: the backstop poll covers it
                added = None
            if added is not None:
                self.link_wds[d] = added
                self.link_names[added] = names

    def _relevant(self, ev: Any) -> bool:
        if ev.name and ev.name in self.link_names.get(ev.wd, ()):
            return True
        if ev.wd in self.link_names and ev.wd not in (self.parent_wd, self.dir_wd):
            if ev.mask & GONE:  # that dir is gone: watched again by the next _arm
                self.link_wds = {d: w for d, w in self.link_wds.items() if w != ev.wd}
                del self.link_names[ev.wd]
            return bool(ev.mask & GONE)
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


def open_watch(path: str, follow: Callable[[], list[str]] | None = None) -> DirWatch | None:
    """A DirWatch on ``path``, or None where inotify cannot be used."""
    try:
        return DirWatch(path, follow=follow)
    except OSError:
        return None


def linked_files(conf_dir: str, root: str) -> list[str]:
    """What the first file of ``conf_dir`` links to (see conffile.link_chain), if a link."""
    try:
        path = first_conf_file(conf_dir, any_link=True)
        return link_chain(path, root)[1:] if path else []
    except (CniError, OSError):
        return []


class _Reporter:
    """Say each watch outcome once (a broken primary file is not repeated every wake)."""

    def __init__(self) -> None:
        self.last = ""

    def __call__(self, msg: str) -> None:
        if msg and msg != self.last:
            _say(f"watch: {msg}")
        self.last = msg


class _Pacer:
    """Keep a fight with another writer from spinning: after ``STREAK`` re-applies,
    each within ``DETECT`` s of the one before, wait ``PAUSE`` s after each."""

    STREAK, DETECT, PAUSE = 5, 2.0, 1.0

    def __init__(self) -> None:
        self.last = float("-inf")
        self.streak = 0

    def after(self, reapplied: bool, stop: threading.Event) -> None:
        if not reapplied:
            return
        now = time.monotonic()
        self.streak = self.streak + 1 if now - self.last < self.DETECT else 0
        self.last = now
        if self.streak >= self.STREAK:
            if self.streak == self.STREAK:
                _say("watch: another writer keeps removing the entry; re-applying at most "
                     f"once every {self.PAUSE:g} s")
            stop.wait(self.PAUSE)


Guard = Callable[[], AbstractContextManager[Any]]


def reapply(conf_dir: str, entry: dict[str, Any], say: Callable[[str], None],
            root: str = "/", installed: Callable[[], bool] | None = None,
            guard: Guard | None = None) -> bool:
    """One watch step: put the entry back if the first conflist lost it; True if it did.
    Not once the plugin is gone from the bin dir (``installed``: uninstalled while this
    watch still runs): an entry without its plugin fails every pod's ADD. ``guard``: held
    from that check to the write (an uninstall holds it too: it cannot take the plugin
    and the entry out between them)."""
    with guard() if guard is not None else contextlib.nullcontext():
        if installed is not None and not installed():
            say("the plugin is gone from the CNI bin dir (uninstalled?) or another install "
                "has taken its place: the entry is not re-applied")
            return False
        try:
            outcome = ensure_entry(conf_dir, entry, root)
        except (CniError, OSError) as e:
            say(str(getattr(e, "msg", e)))
            return False
    say(f"entry re-applied: {outcome}" if outcome != "unchanged" else "")
    return outcome != "unchanged"


def watch_entry(conf_dir: str, entry: dict[str, Any], interval: float,
                rounds: int | None = None, stop: threading.Event | None = None,
                root: str = "/", installed: Callable[[], bool] | None = None,
                guard: Guard | None = None) -> None:
    """Re-apply ``entry`` within a moment of any change to ``conf_dir`` (inotify), and
    every ``interval`` seconds as a backstop (only polling where inotify is unavailable).
    ``rounds`` and ``stop`` bound it, for tests; ``root``: see conffile; ``installed``
    and ``guard``: see :func:`reapply`."""
    stop = stop or threading.Event()
    watcher = open_watch(conf_dir, lambda: linked_files(conf_dir, root))
    if watcher is None:
        _say(f"watch: inotify unavailable, polling {conf_dir} every {interval:g} s")
    say, pacer = _Reporter(), _Pacer()
    reapply(conf_dir, entry, say, root, installed, guard)  # changed before the watch was armed
    n = 0
    try:
        while (rounds is None or n < rounds) and not stop.is_set():
            n += 1
            if watcher is not None:
                watcher.wait(interval)
            elif stop.wait(interval):
                break
            if not stop.is_set():
                pacer.after(reapply(conf_dir, entry, say, root, installed, guard), stop)
    finally:
        if watcher is not None:
            watcher.close()
