#!/usr/bin/env python3
"""What one store record costs on a filesystem: the store's own write (a temp file
created exclusively, flocked, written, linked to its name, the temp unlinked; no fsync,
as rdma_cni/store/atomic.py writes records since 729d9a9), its removal, and one cycle of
the store's lock file, in a directory on disk and in one on a tmpfs mounted for the run.
Then a record replaced by another (an ADD's ready state over its pending one) both
ways the store has done it: renamed over it (``put_in_place``) and swapped into place
(``swap_in_place``), each followed by the replaced record's removal (DEL's purge).

    sudo .venv/bin/python bench/recordwrite.py [--disk DIR] [--n 300] [--rounds 5]

Prints the median over ``--rounds`` of the mean microseconds per operation for each.
The tmpfs is mounted in a mount namespace of this process's own (``unshare``) and goes
with it; the files on disk are removed.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rdma_cni.store import atomic

RECORD = b"{" + b"x" * 300 + b"}"  # about a reservation's size


def cycle(d: str, n: int) -> tuple[float, float, float]:
    """Mean us per record write, per removal, per lock cycle in ``d``."""
    t0 = time.perf_counter()
    for i in range(n):
        tmp = f"{d}/.tmp-{i}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, RECORD)
        os.close(fd)
        os.link(tmp, f"{d}/r{i}")
        os.unlink(tmp)
    t1 = time.perf_counter()
    for i in range(n):
        os.unlink(f"{d}/r{i}")
    t2 = time.perf_counter()
    lock = f"{d}/lock"
    for _ in range(n):
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    t3 = time.perf_counter()
    return tuple((b - a) / n * 1e6 for a, b in ((t0, t1), (t1, t2), (t2, t3)))  # type: ignore[return-value]


def measure(d: str, n: int, rounds: int) -> list[float]:
    runs = [cycle(d, n) for _ in range(rounds)]
    return [statistics.median(r[k] for r in runs) for k in range(3)]


def replace_cycle(d: str, n: int, put: Callable[[str, str, str], None]) -> tuple[float, float]:
    """Mean us per replacement of an existing record by ``put`` (the store's
    ``put_in_place`` or ``swap_in_place``), and per removal of the record then in place."""
    spent = 0.0
    for i in range(n):
        atomic.put_in_place(d, f"r{i}", atomic.write_temp(d, f"r{i}", RECORD, sync=False))
        tmp = atomic.write_temp(d, f"r{i}", RECORD + b" ", sync=False)
        t = time.perf_counter()
        put(d, f"r{i}", tmp)
        spent += time.perf_counter() - t
    t = time.perf_counter()
    for i in range(n):
        os.unlink(f"{d}/r{i}")
    return spent / n * 1e6, (time.perf_counter() - t) / n * 1e6


def measure_replace(d: str, n: int, rounds: int,
                    put: Callable[[str, str, str], None]) -> list[float]:
    runs = [replace_cycle(d, n, put) for _ in range(rounds)]
    return [statistics.median(r[k] for r in runs) for k in range(2)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--disk", default="/var/tmp", help="a directory on the disk to measure")
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not args.inner:
        return subprocess.call(["unshare", "-m", "--propagation", "private", sys.executable,
                                *sys.argv, "--inner"])
    disk = tempfile.mkdtemp(prefix="rdma-cni-recordwrite.", dir=args.disk)
    mem = tempfile.mkdtemp(prefix="rdma-cni-recordwrite-tmpfs.")
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "recordwrite", mem],
                       check=True)
        for name, d in (("disk " + args.disk, disk), ("tmpfs", mem)):
            w, r, lk = measure(d, args.n, args.rounds)
            print(f"{name}: record written {w:.0f} us, removed {r:.0f} us, "
                  f"lock cycle {lk:.0f} us (median of {args.rounds} x {args.n})")
            for how, put in (("renamed over", atomic.put_in_place),
                             ("swapped in", atomic.swap_in_place)):
                rep, rem = measure_replace(d, args.n, args.rounds, put)
                print(f"{name}: record {how} {rep:.0f} us, then removed {rem:.0f} us "
                      f"(median of {args.rounds} x {args.n})")
    finally:
        subprocess.run(["umount", mem], check=False)
        shutil.rmtree(disk, ignore_errors=True)
        os.rmdir(mem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
