#!/usr/bin/env python3
"""The kernel's floor of figure 4 (32 pods ADDed at once) and of 4b (their DELs): each
pod's request as bench/floor.py makes figure 2's (its own address on ``rdma0``), with an
exec of the static C ``true`` first, the front's least cost; one process per pod, each
started and made ready first (a Python of its own that has imported floor.py, not a fork
of the driver: a fork's first writes to the driver's pages and its exit from them would
be counted), then all held at a gate and let go at once, as figure 4's execs are
(``--spawn gated``). The wall runs from the gate's opening to the last process's exit, on
the same CPUs as the figure; the store lock and the metrics file are taken by whoever gets
there first, the others waiting in the kernel."""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import floor


def _ready(command: str, a: floor.Attachment, store: floor.Store, true: str | None,
           gate: int) -> subprocess.Popen[bytes]:
    """A pod's process, started and waited for until it is ready at the gate."""
    spec = {"command": command, "pod": a.pod_path, "key": a.key, "host": a.ifaces[0].host,
            "store": store.root, "true": true}
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), json.dumps(spec)],
                            stdin=gate, stdout=subprocess.PIPE, close_fds=True)
    assert proc.stdout is not None
    if proc.stdout.read(1) != b"r":
        proc.wait()
        raise RuntimeError(f"floor: a batch process did not get ready (exit {proc.returncode})")
    return proc


def _batch(command: str, batch: list[floor.Attachment], store: floor.Store,
           true: str | None) -> float:
    """One batch, ms: every process made ready and held, the gate opened, the last reaped."""
    gate, opener = os.pipe()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs = [_ready(command, a, store, true, gate) for a in batch]
        start = time.perf_counter_ns()
        os.close(opener)
        opener = -1
        codes = [p.wait() for p in procs]
        wall = (time.perf_counter_ns() - start) / 1e6
    finally:
        os.close(gate)
        for p in procs:
            if opener >= 0:  # something failed before the gate opened: none may start
                p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()
        if opener >= 0:
            os.close(opener)
    if any(codes):
        raise RuntimeError(f"floor: {sum(1 for c in codes if c)} of the batch's "
                           f"{len(batch)} pods failed")
    return wall


def batch_floor(tmp: str, pods: Any, n_pods: int, rounds: int, true: str | None
                ) -> dict[str, Any]:
    """Medians of ``rounds`` batches of ``n_pods`` floor ADDs at once and of their DELs at
    once, on fresh pods from ``pods`` (bench/lab.py's Pods: made and deleted untimed)."""
    store = floor.Store(os.path.join(tmp, "floor-batch-store"))
    adds: list[float] = []
    dels: list[float] = []
    try:
        for _ in range(rounds):
            made = pods.create(n_pods)
            try:
                batch = [floor.Attachment(p.path, hashlib.sha1(p.name.encode()).hexdigest(),
                                          (floor.Iface(0, 2 + n),))
                         for n, p in enumerate(made)]
                adds.append(_batch("add", batch, store, true))
                dels.append(_batch("del", batch, store, true))
            finally:
                pods.delete(made)
    finally:
        store.close()
    return {"add_ms": round(statistics.median(adds), 3),
            "del_ms": round(statistics.median(dels), 3), "n": rounds, "pods": n_pods,
            "with_exec": true is not None}


def pod_main(spec: dict[str, Any]) -> int:
    """One pod's process: ready, held until the gate (stdin) opens, then the exec of
    ``true`` and the floor's ADD or DEL."""
    store = floor.Store(spec["store"], make=False)
    a = floor.Attachment(spec["pod"], spec["key"], (floor.Iface(0, spec["host"]),))
    work = floor.floor_add if spec["command"] == "add" else floor.floor_del
    os.write(1, b"r")
    os.read(0, 1)  # end of file once the driver closes the gate
    if spec["true"]:
        child = os.posix_spawn(spec["true"], [spec["true"]], {})
        if os.waitpid(child, 0)[1] != 0:
            return 1
    work(a, store)
    return 0


if __name__ == "__main__":
    code = 1
    try:
        code = pod_main(json.loads(sys.argv[1]))
    except Exception as exc:
        sys.stderr.write(f"floor batch process: {type(exc).__name__}: {exc}\n")
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: a minimal program has none to do
