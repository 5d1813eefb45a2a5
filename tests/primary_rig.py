"""A stand-in primary CNI that keeps rewriting its conflist, and a reader that polls the
conf dir as the runtime does, each a process of its own, to race ``install --watch``.

The primary writes generation 1, 2, ... of its list (a field of its own plugin), by
temp file + rename (as vpc-cni does) or in place (``open(O_TRUNC)`` + write, as a naive
agent does), with random pauses. Before each write it reads its file back: a generation
older than its last write means another writer put an older one back (*undone*). The
reader records every (time, generation, chained) change it sees at the conf dir path.
:func:`rollbacks` then lists what the runtime could have seen go backwards: a generation
older than one the primary had finished writing before the read began (apart: those
inside the swap window install's compare and swap leaves, which the next view undoes).

Run as a script: ``primary_rig.py primary PATH MODE COUNT SEED`` or
``primary_rig.py reader PATH`` (until SIGTERM); each prints one JSON report.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PRIMARY_TYPE = "vpc-cni"


def primary(gen: int) -> dict[str, Any]:
    """vpc-cni's list; ``gen`` is a field of its own that changes with every rewrite."""
    return {"cniVersion": "0.4.0", "name": "vpc-cni", "disableCheck": True,
            "plugins": [{"type": PRIMARY_TYPE, "generation": gen,
                         "capabilities": {"bandwidth": True}},
                        {"type": "portmap", "capabilities": {"portMappings": True}}]}


def write(path: str, doc: dict[str, Any], mode: str) -> None:
    data = json.dumps(doc, indent=2)
    if mode == "rename":
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            f.write(data)
        os.replace(tmp, path)
    else:
        with open(path, "w") as f:  # O_TRUNC at open, then the write
            f.write(data)


def generation(path: str) -> tuple[int, bool] | None:
    """(the primary's generation, whether rdma-cni is chained) of the list at ``path``;
    None while it cannot be read whole (an in-place write under way)."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        plugins = doc["plugins"]
        gen = next(p["generation"] for p in plugins if p.get("type") == PRIMARY_TYPE)
        return int(gen), any(p.get("type") == "rdma-cni" for p in plugins)
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None


def run_primary(path: str, mode: str, count: int, seed: int) -> dict[str, Any]:
    pauses = schedule(random.Random(seed))
    found = generation(path)
    last = found[0] if found else 0
    undone, done = [], []
    for gen in range(last + 1, last + count + 1):
        seen = generation(path)
        if seen is not None and seen[0] < last:
            undone.append([last, seen[0]])
        write(path, primary(gen), mode)
        done.append([gen, time.monotonic_ns()])
        last = gen
        time.sleep(next(pauses))
    return {"undone": undone, "done": done}


def schedule(rng: random.Random) -> Iterator[float]:
    """The pauses after each write: bursts of 10-30 writes a few ms apart (longer than
    the watch's 50 ms settle time, so it wakes and writes in the middle of one), then a
    pause of 60-150 ms (so it also gets its entry in between)."""
    while True:
        for _ in range(rng.randint(10, 30)):
            yield rng.uniform(0, 0.005)
        yield rng.uniform(0.06, 0.15)


def run_reader(path: str) -> dict[str, Any]:
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    seen: list[list[Any]] = []
    reads = 0
    while not stop:
        t = time.monotonic_ns()
        got = generation(path)
        reads += 1
        if got is not None and (not seen or seen[-1][1:] != list(got)):
            seen.append([t, *got])
    return {"seen": seen, "reads": reads}


#: how soon the newest generation is back after the watch swapped a file built on an
#: older one onto the path (two system calls, rdma_cni/tools/conffile.py, "What remains")
SWAP_BACK_NS = 50_000_000


def rollbacks(done: list[list[int]], seen: list[list[Any]]) -> tuple[list[str], list[str]]:
    """Reads that found a generation older than one the primary had finished writing
    before the read began, or older than an earlier read found: (those the runtime could
    have acted on, those inside the window conffile.py documents). A view is in that
    window when it holds our entry (the watch's file) and the next view, within
    :data:`SWAP_BACK_NS`, is the newest generation again (the swap back)."""
    lost, window, newest, k, high = [], [], 0, 0, 0
    for i, (t, gen, chained) in enumerate(seen):
        while k < len(done) and done[k][1] < t:
            newest = done[k][0]
            k += 1
        if gen < newest or gen < high:
            text = (f"read at {t}: generation {gen}, after the primary wrote {newest} "
                    f"and a read found {high}")
            after = seen[i + 1] if i + 1 < len(seen) else None
            back = after is not None and after[1] >= max(newest, high) and \
                after[0] - t <= SWAP_BACK_NS
            (window if chained and back else lost).append(text)
        high = max(high, gen)
    return lost, window


class Race:
    """The primary and the reader as processes; ``finish`` returns both reports."""

    def __init__(self, own_file: Path, view: Path, mode: str, count: int, seed: int) -> None:
        me = [sys.executable, str(Path(__file__).resolve())]
        self.reader = subprocess.Popen([*me, "reader", str(view)], stdout=subprocess.PIPE,
                                       text=True)
        self.primary = subprocess.Popen([*me, "primary", str(own_file), mode, str(count),
                                         str(seed)], stdout=subprocess.PIPE, text=True)

    def finish(self, settle: float) -> tuple[dict[str, Any], dict[str, Any]]:
        out, _ = self.primary.communicate(timeout=300)
        time.sleep(settle)  # the reader keeps watching while the watch settles
        self.reader.send_signal(signal.SIGTERM)
        seen, _ = self.reader.communicate(timeout=30)
        assert self.primary.returncode == 0 and self.reader.returncode == 0
        return json.loads(out), json.loads(seen)

    def kill(self) -> None:
        for p in (self.primary, self.reader):
            if p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    if what == "primary":
        report = run_primary(args[0], args[1], int(args[2]), int(args[3]))
    else:
        report = run_reader(args[0])
    print(json.dumps(report))
