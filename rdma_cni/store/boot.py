"""The boot a store was last opened in, and what a power loss can leave of its records.

The store writes its records without an fsync (:func:`rdma_cni.store.atomic.write_temp`
with ``sync=False``): a crash of the plugin, or of the server, cannot lose a record, which
is in the page cache the moment its rename or link returns. Only the node's own crash
can, and then everything a record describes went with it: pod netns, sub-interfaces,
rules and routes do not survive a reboot, and an exclusive NIC boots in the host netns.
What such a crash can leave of a record written without an fsync is the record, nothing
(the write or the removal lost), or a cut file (created, its data never written back:
ext4 and XFS leave it empty). The first two are whole records of dead pods, which the
runtime's DEL of their old sandboxes, or the agent's reconciliation, releases as it
always has. The cut ones carry no key: nothing would ever release them.

So the store's lock file holds the kernel's boot ID of the last locked open by this
release (its content was unused: earlier releases leave it empty). The first locked
open in another boot removes every record that does not parse, which only a power loss
of a store written without an fsync leaves (a regular file: anything else in a record's
place is a corrupt record, handled as the store handles one), and then stamps the boot,
with an fsync: that is once per boot. A store without a stamp (written by an earlier
release, which fsynced every record, or new) is adopted as this boot's.
Whole records are never removed here: an earlier release, after a rollback, may have
written them in this very boot for pods that still run."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from rdma_cni.log import LazyLogger
from rdma_cni.store import journal
from rdma_cni.store.atomic import ioerr
from rdma_cni.store.files import Corrupt, read_record, remove, scan

__all__ = ["BOOT_ID", "BootMark", "check_boot", "is_number"]

log = LazyLogger(__name__)

#: where the kernel gives this boot's ID
BOOT_ID = "/proc/sys/kernel/random/boot_id"
#: record directories of the layout (see :mod:`rdma_cni.store.core`); ips/ has a level of pools
RECORD_DIRS = ("state", "addrs", "nics")
#: moves a corrupt state record aside: (path, why) (:meth:`rdma_cni.store.core.Store._quarantine`)
SetAside = Callable[[str, str], None]
_checked: dict[str, str] = {}  # data dir -> the boot it was checked in, by this process
_boot: list[str] = []  # the boot ID, once read


def this_boot() -> str:
    """The kernel's boot ID (read once per process: a process lives in one boot); ""
    when it cannot be read (then nothing is swept)."""
    if not _boot:
        try:
            with open(BOOT_ID, "rb") as f:
                _boot.append(f.read(64).decode("ascii", "replace").strip())
        except OSError:
            return ""
    return _boot[0]


class BootMark(NamedTuple):
    """A moment on a clock a wall-clock step cannot move: ``boottime`` seconds of
    ``CLOCK_BOOTTIME`` in the boot ``boot`` (the kernel's boot ID). ``boot`` None: a
    number of no known boot (the wall clock an earlier release wrote), which no age is
    taken from. JSON: ``{"boot": <id>, "boottime": <seconds>}``."""

    boot: str | None
    boottime: float

    @classmethod
    def now(cls) -> BootMark:
        return cls(this_boot(), time.clock_gettime(time.CLOCK_BOOTTIME))

    def age(self, now: BootMark) -> float | None:
        """Seconds from this mark to ``now``, or None when they are not of one known
        boot (a mark of another boot, or of none, is older than anything of this one)."""
        if not now.boot or self.boot != now.boot:
            return None
        return now.boottime - self.boottime

    @classmethod
    def from_json(cls, v: Any) -> BootMark | None:
        """The JSON form, a bare number (of no boot), or None for anything else."""
        if is_number(v):
            return cls(None, float(v))
        if isinstance(v, dict) and isinstance(v.get("boot"), str) and is_number(v.get("boottime")):
            return cls(v["boot"], float(v["boottime"]))
        return None

    def to_json(self) -> dict[str, Any] | float:
        return self.boottime if self.boot is None else {"boot": self.boot,
                                                        "boottime": self.boottime}


def is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def check_boot(root: str, lock_fd: int, set_aside: SetAside) -> None:
    """With the store's lock file ``lock_fd`` locked: sweep what a power loss cut, once
    per boot (see the module docstring); ``set_aside`` moves a corrupt state record
    aside (:func:`sweep_cut_records`)."""
    boot = this_boot()
    if not boot or _checked.get(root) == boot:
        return
    path = os.path.join(root, "lock")
    try:
        stamp = os.pread(lock_fd, 64, 0).decode("ascii", "replace").strip()
        if stamp != boot:
            if stamp:
                swept = sweep_cut_records(root, set_aside)
                log.warning("data dir %s was last opened in boot %s, this is boot %s: "
                            "removed %d record(s) a power loss cut", root,
                            ascii(stamp)[1:-1], boot, swept)
            journal.reset(lock_fd)  # what was swept was not noted: a new epoch
            os.ftruncate(lock_fd, 0)
            os.pwrite(lock_fd, boot.encode() + b"\n", 0)
            os.fsync(lock_fd)
    except OSError as e:
        raise ioerr("stamp the boot in", path, e) from e
    _checked[root] = boot


def sweep_cut_records(root: str, set_aside: SetAside) -> int:
    """Remove the records under ``root`` that do not parse; how many. Only regular files:
    a power loss leaves no FIFO, directory or symlink, so one of those is a corrupt record
    as the store handles one at any time: a state record is moved aside by
    ``set_aside(path, why)``, a reservation or claim is kept (held by no one known)."""
    swept = 0
    state_dir = os.path.join(root, "state")
    for path in _records(root):
        try:
            read_record(path)
        except Corrupt as e:
            if not _regular(path):
                if os.path.dirname(path) == state_dir:
                    set_aside(path, str(e))
                else:
                    log.warning("kept %s, held by no one known: %s", path, e)
            elif remove(path):
                log.warning("removed %s, cut by a power loss: %s", path, e)
                swept += 1
    return swept


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return True  # gone meanwhile: nothing to set aside


def _records(root: str) -> Iterator[str]:
    for sub in RECORD_DIRS:
        d = os.path.join(root, sub)
        yield from (os.path.join(d, n) for n in scan(d))
    pools = os.path.join(root, "ips")
    for pool in scan(pools):
        d = os.path.join(pools, pool)
        if os.path.isdir(d):
            yield from (os.path.join(d, n) for n in scan(d))
