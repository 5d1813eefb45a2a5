"""The reservations' change journal: which names of ``addrs/`` changed, and since when.

Every change this release makes to ``addrs/`` (a reservation linked into place, one
removed) happens under the store's lock and is noted here first: the name, under the
next generation number. A process that listed the directory at generation G then reads,
instead of listing it again and checking each file, the names noted since G: on a node
with hundreds of reservations the listing and a ``lstat`` per address of the pool were
the one part of an ADD that grew with them (bench/README, figure 7).

It is an extended attribute of the lock file (:data:`ATTR`), replaced whole at each note
(a reader sees one note or the next, never half of one), so the lock file's content stays
the boot stamp (:mod:`rdma_cni.store.boot`) an earlier release reads: the line
``<epoch> <generation>``, then a ring of :data:`RING` slots, ``<generation> <name>``, each
in the slot of its generation modulo :data:`RING`. The epoch is random, written when
there is none (a store made again, a boot's sweep: :func:`start`), and a reader that
remembers another one lists the directory again.

What a reader cannot trust, it does not: no journal, another epoch, more changes than the
ring holds, or a slot that does not hold the generation it should give ``None`` ("list
it again"). A writer that dies after noting a name and before changing it costs a reader
one look at a file that did not change. A process that changes ``addrs/`` without noting
it (by hand, or an earlier release during an upgrade) can make a reader believe an
address taken that is free, or free that is taken; the reservation's exclusive link
refuses the second, and readers list the directory again after :data:`REFRESH` seconds
and before they call a pool full, which bounds the first. A filesystem without user
extended attributes (a tmpfs before Linux 6.6) has no journal: every ADD lists, as
before it. Callers hold the store's lock and pass its file descriptor.
"""

from __future__ import annotations

import errno
import os

from rdma_cni.log import LazyLogger

log = LazyLogger(__name__)

#: the lock file's extended attribute that holds the journal
ATTR = "user.rdma-cni.journal"
#: slots in the ring: the changes a reader may fall behind by and still catch up
RING = 64
_HEAD = b"%s %020d\n"
_HEAD_LEN = len(_HEAD % (b"0" * 16, 0))
_SLOT = 24  # "<generation mod 10**7, 7 digits> <name, up to 15 characters>\n"
_NAME = 15
_GEN = 10**7
#: seconds after which a reader lists the directory again whatever the journal says
REFRESH = 10.0
#: errors that say the filesystem keeps no such attribute: no journal, said once
_UNSUPPORTED = (errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM)
_said: list[bool] = []

Head = tuple[bytes, int]  # (epoch, generation)


def _read(fd: int) -> bytes | None:
    try:
        return os.getxattr(fd, ATTR)
    except OSError as e:
        if e.errno == errno.ENODATA:
            return None
        raise


def head_of(raw: bytes | None) -> Head | None:
    """The (epoch, generation) of a journal's value; None when it does not parse."""
    if raw is None or len(raw) != _HEAD_LEN + RING * _SLOT:
        return None
    parts = raw[:_HEAD_LEN].split()
    if len(parts) != 2 or len(parts[0]) != 16 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def start(fd: int) -> tuple[Head, bytearray]:
    """A new epoch at generation 0, written."""
    epoch = os.urandom(8).hex().encode()
    raw = bytearray(_HEAD % (epoch, 0) + b" " * (RING * _SLOT))
    os.setxattr(fd, ATTR, bytes(raw))
    return (epoch, 0), raw


def reset(fd: int) -> None:
    """A new epoch: ``addrs/`` changed without a note (a boot's sweep of cut records)."""
    try:
        start(fd)
    except OSError as e:
        _failed("start", e)


def note(fd: int, name: str) -> None:
    """Before ``name`` of ``addrs/`` changes: the journal with it noted, written whole. A
    write that fails is logged and the change goes on: the journal is a hint (see the
    module docstring), a reservation's safety is its exclusive link."""
    data = name.encode("ascii", "replace")
    try:
        if len(data) > _NAME:  # a name the ring cannot hold: every reader lists again
            start(fd)
            return
        raw = _read(fd)
        now = head_of(raw)
        if now is None or raw is None:
            now, buf = start(fd)
        else:
            buf = bytearray(raw)
        epoch, gen = now[0], now[1] + 1
        at = _HEAD_LEN + (gen % RING) * _SLOT
        buf[at:at + _SLOT] = b"%07d %-15s\n" % (gen % _GEN, data)
        buf[:_HEAD_LEN] = _HEAD % (epoch, gen)
        os.setxattr(fd, ATTR, bytes(buf))
    except OSError as e:
        _failed("note a change of " + ascii(name)[1:-1] + " in", e)


def since(fd: int, seen: Head | None) -> tuple[Head | None, set[str] | None]:
    """The journal's head now (started when there is none; None when it cannot be read
    or written) and the names noted after ``seen``; None for the names when they cannot
    be told (list the directory)."""
    try:
        raw = _read(fd)
        now = head_of(raw)
        if now is None or raw is None:
            return start(fd)[0], None
    except OSError as e:
        _failed("read", e)
        return None, None
    if seen is None or seen[0] != now[0] or not 0 <= now[1] - seen[1] < RING:
        return now, None
    names: set[str] = set()
    for gen in range(seen[1] + 1, now[1] + 1):
        at = _HEAD_LEN + (gen % RING) * _SLOT
        slot = raw[at:at + _SLOT].split()
        if len(slot) != 2 or slot[0] != b"%07d" % (gen % _GEN):
            return now, None
        names.add(slot[1].decode("ascii", "replace"))
    return now, names


def _failed(what: str, e: OSError) -> None:
    if e.errno in _UNSUPPORTED:
        if not _said:
            _said.append(True)
            log.info("the store's filesystem keeps no extended attributes (%s): "
                     "every ADD lists the reservations", e.strerror or e)
        return
    log.warning("failed to %s the store's journal: %s", what, e.strerror or e)
