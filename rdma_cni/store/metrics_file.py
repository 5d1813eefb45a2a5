"""The plugin's own operation counters: a small fixed-size file the CNI plugin
updates on every invocation and ``rdma-cni exporter`` reads.

Imported on every CNI invocation, so stdlib only and cheap.

Layout (little-endian), always exactly :data:`FILE_SIZE` bytes::

    header  8 bytes   magic b"RCNIMET", format version 1 (u8)
    slots   SLOTS x SLOT_SIZE bytes, one per (command, code):
            used u8, command u8, code u16, count u64, sum_seconds f64,
            bucket counts u64 x len(BUCKETS) (non-cumulative; +Inf = count - sum),
            crc32 of the preceding slot bytes u32

Bounded: the file never grows; a (command, code) pair beyond the table lands in
the last slot, reserved for command OTHER, code :data:`OVERFLOW_CODE`.

Never anyone else's file: the path comes from a config, so a writer touches only a
regular file with one link that is empty or starts with :data:`MAGIC` (a file it
made); anything else (another file named by mistake or on purpose, a FIFO, a device,
a hard link) is left exactly as it is and nothing is recorded.

Writers (:func:`record`) never raise and never wait: they try a non-blocking
``flock(LOCK_EX)`` a few times within :data:`LOCK_BUDGET` seconds (the critical
section is one ``pread`` and one ``pwrite`` of a slot, microseconds) and skip
the record if the lock stays busy (e.g. a holder stopped by a debugger). A
missing or malformed file (wrong size or magic) is re-initialised; a slot whose
checksum does not match (torn or corrupted) is reset on its next update and
ignored by readers. Counters can therefore reset, which Prometheus handles.

Readers (:func:`read`) take ``flock(LOCK_SH)`` the same non-blocking way and,
failing that, read anyway: torn slots fail their checksum and are skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import struct
import time
import zlib
from typing import NamedTuple

from rdma_cni import defaults
from rdma_cni.confdefaults import DEFAULTS
from rdma_cni.regfile import open_regular

DEFAULT_PATH = defaults.METRICS_FILE
MAGIC = b"RCNIMET\x01"
#: Histogram upper bounds, seconds (+Inf implied).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
COMMANDS = ("OTHER", "ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION")
SLOTS = 64
OVERFLOW_CODE = 0xFFFF
LOCK_BUDGET = 0.05

_BODY = struct.Struct(f"<BBHQd{len(BUCKETS)}Q")
_CRC = struct.Struct("<I")
SLOT_SIZE = _BODY.size + _CRC.size
FILE_SIZE = len(MAGIC) + SLOTS * SLOT_SIZE


class OpStat:
    """Totals of one (command, code): ``buckets`` are non-cumulative counts."""

    __slots__ = ("buckets", "code", "command", "count", "sum")

    def __init__(self, command: str, code: int, count: int, sum: float,
                 buckets: tuple[int, ...]) -> None:
        self.command, self.code, self.count, self.sum = command, code, count, sum
        self.buckets = buckets

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpStat) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __hash__(self) -> int:
        return hash((self.command, self.code, self.count, self.sum, self.buckets))

    def __repr__(self) -> str:
        return (f"OpStat(command={self.command!r}, code={self.code}, count={self.count}, "
                f"sum={self.sum}, buckets={self.buckets})")

    @property
    def result(self) -> str:
        return "success" if self.code == 0 else "error"


class Snapshot(NamedTuple):
    """(NamedTuples here: this module is on every exec, dataclasses are not.)"""

    ops: list[OpStat] = []  # never mutated: read() builds its own
    corrupt_slots: int = 0


def _command_index(command: str) -> int:
    upper = command.upper()
    return COMMANDS.index(upper) if upper in COMMANDS else 0


def _bucket_index(seconds: float) -> int:
    for i, bound in enumerate(BUCKETS):
        if seconds <= bound:
            return i
    return len(BUCKETS)  # +Inf only


def _pack(cmd: int, code: int, count: int, total: float, buckets: list[int]) -> bytes:
    body = _BODY.pack(1, cmd, code, count, total, *buckets)
    return body + _CRC.pack(zlib.crc32(body))


def _unpack(raw: bytes) -> tuple[int, int, int, float, list[int]] | None:
    """(command, code, count, sum, buckets) of a valid used slot, else None."""
    body, (crc,) = raw[: _BODY.size], _CRC.unpack(raw[_BODY.size :])
    if zlib.crc32(body) != crc:
        return None
    used, cmd, code, count, total, *buckets = _BODY.unpack(body)
    if used != 1 or cmd >= len(COMMANDS):
        return None
    return cmd, code, count, total, buckets


def _try_lock(fd: int, op: int) -> bool:
    deadline = time.monotonic() + LOCK_BUDGET
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.0005)


def _open_for_update(path: str) -> int:
    """Open (creating the file, never its directory: a node without the DaemonSet's
    /run/rdma-cni records nothing, and the plugin never litters the host). OSError
    for what is not a plain file of its own (see the module's docstring)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    fd = os.open(path, flags, 0o644)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise OSError(f"{path} is not a metrics file")
    return fd


_Slot = tuple[int, int, int, float, list[int]]


def _find_slot(data: bytes, cmd: int, code: int) -> tuple[int, _Slot | None]:
    """Index of the slot for (cmd, code) and its current values (None: start afresh)."""
    free = -1
    for i in range(SLOTS - 1):
        off = len(MAGIC) + i * SLOT_SIZE
        cur = _unpack(data[off : off + SLOT_SIZE])
        if cur is None:
            free = i if free < 0 else free
        elif (cur[0], cur[1]) == (cmd, code):
            return i, cur
    if free >= 0:
        return free, None
    off = len(MAGIC) + (SLOTS - 1) * SLOT_SIZE
    cur = _unpack(data[off : off + SLOT_SIZE])
    return SLOTS - 1, cur if cur is not None and cur[:2] == (0, OVERFLOW_CODE) else None


def _update(fd: int, cmd: int, code: int, seconds: float) -> None:
    data = os.pread(fd, FILE_SIZE + 1, 0)
    if len(data) != FILE_SIZE or not data.startswith(MAGIC):
        if data and not data.startswith(MAGIC):
            return  # not ours: never overwritten
        os.ftruncate(fd, 0)
        os.pwrite(fd, MAGIC + bytes(FILE_SIZE - len(MAGIC)), 0)
        data = MAGIC + bytes(FILE_SIZE - len(MAGIC))
    index, cur = _find_slot(data, cmd, code)
    if index == SLOTS - 1:  # table full: the shared overflow slot
        cmd, code = 0, OVERFLOW_CODE
    count, total, buckets = (cur[2], cur[3], cur[4]) if cur else (0, 0.0, [0] * len(BUCKETS))
    b = _bucket_index(seconds)
    if b < len(BUCKETS):
        buckets[b] += 1
    slot = _pack(cmd, code, count + 1, total + seconds, buckets)
    os.pwrite(fd, slot, len(MAGIC) + index * SLOT_SIZE)


def path_from_conf(conf: object) -> str | None:
    """The ``metricsFile`` of a raw network config: the default when absent or not a
    string, None when it is ``""`` (recording disabled)."""
    value = conf.get("metricsFile") if isinstance(conf, dict) else None
    if not isinstance(value, str):
        return DEFAULTS["metricsFile"]
    return value or None


def record(path: str, command: str, code: int, seconds: float) -> None:
    """Count one ``command`` that ended with CNI ``code`` (0: success) after ``seconds``.

    Never raises and never waits longer than :data:`LOCK_BUDGET`.
    """
    try:
        cmd = _command_index(command)
        code = int(code) if 0 <= int(code) < OVERFLOW_CODE else OVERFLOW_CODE
        seconds = max(float(seconds), 0.0)
        if seconds != seconds or seconds == float("inf"):
            seconds = 0.0
        fd = _open_for_update(path)
        try:
            if _try_lock(fd, fcntl.LOCK_EX):
                _update(fd, cmd, code, seconds)
        finally:
            os.close(fd)  # also releases the flock
    except Exception:  # metrics must never disturb the CNI command
        return


def _read_bytes(path: str) -> bytes:
    try:  # no regular file there (a FIFO, a symlink): regfile.NotRegularError, an OSError
        fd, _ = open_regular(path)
    except FileNotFoundError:
        return b""
    try:
        locked = _try_lock(fd, fcntl.LOCK_SH)
        try:
            return os.pread(fd, FILE_SIZE + 1, 0)
        finally:
            if locked:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def read(path: str) -> Snapshot:
    """The totals in ``path``; empty when missing or malformed. Raises OSError only
    when the file exists but cannot be read."""
    data = _read_bytes(path)
    if len(data) != FILE_SIZE or not data.startswith(MAGIC):
        return Snapshot()
    ops: list[OpStat] = []
    corrupt = 0
    for i in range(SLOTS):
        off = len(MAGIC) + i * SLOT_SIZE
        raw = data[off : off + SLOT_SIZE]
        cur = _unpack(raw)
        if cur is None:
            corrupt += raw != bytes(SLOT_SIZE)
            continue
        cmd, code, count, total, buckets = cur
        ops.append(OpStat(COMMANDS[cmd], code, count, total, tuple(buckets)))
    return Snapshot(ops, corrupt)
