"""The reservations' change journal: which names of ``addrs/`` changed, and since when.

Every change this release makes to ``addrs/`` (a reservation linked into place, one
removed) happens under the store's lock and is noted here first: the name, under the
next generation number. A process that listed the directory at generation G then reads,
instead of listing it again and checking each file, the names noted since G: on a node
with hundreds of reservations the listing and a ``lstat`` per address of the pool were
the one part of an ADD that grew with them (bench/README, figure 7).

It lives in the lock file, after the boot stamp (:mod:`rdma_cni.store.boot`), in text:
the stamp's first 64 bytes are left to it, padded with newlines (an earlier release
reads them stripped), then a header line ``j1 <epoch> <generation>`` and a ring of
:data:`RING` slots, ``<generation> <name>``, each in the slot of its generation modulo
:data:`RING`. The epoch is random, written with the header when there is none: a lock
file truncated (the boot stamp's ``ftruncate``, a store removed and made again) starts a
new epoch, and a reader that remembers another one lists the directory again.

What a reader cannot trust, it does not: no header, another epoch, more changes than
the ring holds, or a slot that does not hold the generation it should give ``None``
("list it again"). A writer that dies after noting a name and before changing it costs
a reader one look at a file that did not change. A process that changes ``addrs/``
without noting it (by hand, or an earlier release during an upgrade) can make a reader
believe an address taken that is free, or free that is taken; the reservation's
exclusive link refuses the second, and readers list the directory again after
:data:`REFRESH` seconds and before they call a pool full, which bounds the first.
Callers hold the store's lock and pass its file descriptor.
"""

from __future__ import annotations

import os

from rdma_cni.log import LazyLogger

log = LazyLogger(__name__)

#: the boot stamp's bytes (:func:`rdma_cni.store.boot.check_boot` reads 64)
STAMP = 64
#: slots in the ring: the changes a reader may fall behind by and still catch up
RING = 128
_HEAD = b"j1 %s %020d\n"
_HEAD_LEN = len(_HEAD % (b"0" * 16, 0))
_SLOT = 32  # "<generation, 11 digits> <name, up to 19 characters>\n"
_NAME = _SLOT - 13
_SLOTS_AT = STAMP + _HEAD_LEN
#: seconds after which a reader lists the directory again whatever the journal says
REFRESH = 10.0

Head = tuple[bytes, int]  # (epoch, generation)


def head(fd: int) -> Head | None:
    """The journal's (epoch, generation); None when there is none or it does not parse."""
    raw = os.pread(fd, _HEAD_LEN, STAMP)
    parts = raw.split()
    if len(raw) != _HEAD_LEN or len(parts) != 3 or parts[0] != b"j1" or \
            len(parts[1]) != 16 or not parts[2].isdigit():
        return None
    return parts[1], int(parts[2])


def start(fd: int) -> Head:
    """A new epoch at generation 0 (the stamp's room padded for earlier releases)."""
    size = os.fstat(fd).st_size
    if size < STAMP:
        os.pwrite(fd, b"\n" * (STAMP - size), size)
    epoch = os.urandom(8).hex().encode()
    os.pwrite(fd, _HEAD % (epoch, 0), STAMP)
    return epoch, 0


def note(fd: int, name: str) -> None:
    """Before ``name`` of ``addrs/`` changes: its slot, then the header, written. A write
    that fails is logged and the change goes on: the journal is a hint (the module
    docstring), a reservation's safety is its exclusive link."""
    data = name.encode("ascii", "replace")
    try:
        if len(data) > _NAME:  # a name the ring cannot hold: every reader lists again
            start(fd)
            return
        now = head(fd) or start(fd)
        epoch, gen = now[0], now[1] + 1
        os.pwrite(fd, b"%011d %-19s\n" % (gen % 10**11, data),
                  _SLOTS_AT + (gen % RING) * _SLOT)
        os.pwrite(fd, _HEAD % (epoch, gen), STAMP)
    except OSError as e:
        log.warning("failed to note a change of %s in the store's journal: %s",
                    ascii(name)[1:-1], e.strerror or e)


def since(fd: int, seen: Head | None) -> tuple[Head | None, set[str] | None]:
    """The journal's head now (started when there is none; None when it cannot be read
    or written) and the names noted after ``seen``; None for the names when they cannot
    be told (list the directory)."""
    try:
        return _since(fd, seen)
    except OSError as e:
        log.warning("failed to read the store's journal: %s", e.strerror or e)
        return None, None


def _since(fd: int, seen: Head | None) -> tuple[Head, set[str] | None]:
    now = head(fd)
    if now is None:
        return start(fd), None
    if seen is None or seen[0] != now[0] or not 0 <= now[1] - seen[1] < RING:
        return now, None
    if now[1] == seen[1]:
        return now, set()
    raw = os.pread(fd, RING * _SLOT, _SLOTS_AT)
    names: set[str] = set()
    for gen in range(seen[1] + 1, now[1] + 1):
        at = (gen % RING) * _SLOT
        slot = raw[at:at + _SLOT].split()
        if len(slot) != 2 or slot[0] != b"%011d" % (gen % 10**11):
            return now, None
        names.add(slot[1].decode("ascii", "replace"))
    return now, names
