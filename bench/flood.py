#!/usr/bin/env python3
"""The resident server under a flood of connections: one-interface ADD through the
front while ``--idle`` idle and ``--slow`` slow connections are held open against
`rdma-cni serve`, against the same ADD with none.

    sudo .venv/bin/python bench/flood.py [--rounds 20] [--idle 200] [--slow 200]
                                         [--out bench/results/flood-latest.json]

Both sides are rdma-cni's resident path, quiet and flooded; bench/run.py measures the
same as its figure 8 with :func:`measure` on its own `serve`. The host side makes
the node netns (bench/lab.py) and lays the bundle out with `install`'s functions, then
re-executes this script under ``ip netns exec <node>``; the driver starts the bundle's
`serve` there and, per round, ADDs and DELs a fresh pod (serial execs reaped with
``wait4``, bench/cni.py). Quiet and flooded rounds alternate in blocks: quiet, flood,
quiet, flood. The flood is the security tests' own (tests/faults/security_rig.py): slow
connections send a header length, then one byte a second; a connection `serve` closes
is opened again at once. Goal: the flooded median within 1.5x the quiet one and the
flooded p90 within 2x the quiet p90 (the first ADD after a flood starts is the one a
server without bounds kept waiting), every ADD answered by `serve` (its log counts
them), none by the in-process fallback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO), str(REPO / "tests"), str(REPO / "tests" / "faults")]

import cni  # noqa: E402
import lab  # noqa: E402
import report  # noqa: E402
import resident  # noqa: E402
from run import BINARY, bundle_of, install_bundle  # noqa: E402
from security_rig import Flood  # noqa: E402
from sides import RdmaCni, rdma_blocks  # noqa: E402

GOAL, GOAL_P90 = 1.5, 2.0


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/flood.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=20, help="ADDs per side (default 20)")
    p.add_argument("--idle", type=int, default=200, help="idle connections (default 200)")
    p.add_argument("--slow", type=int, default=200, help="slow connections (default 200)")
    p.add_argument("--binary", default=str(BINARY), help="the bundle's executable")
    p.add_argument("--out", default=str(HERE / "results" / "flood-latest.json"))
    p.add_argument("--binary-origin", default="", help=argparse.SUPPRESS)
    p.add_argument("--inner-prefix", help=argparse.SUPPRESS)
    p.add_argument("--inner-tmp", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _round(side: RdmaCni, pods: lab.Pods) -> float:
    """One pod: ADD (timed, ms) and DEL through the front."""
    pod = pods.create(1)[0]
    try:
        (inv,) = side.invocations(pod, rdma_blocks(1))
        add = cni.run(inv, "ADD")
        if len(pod.extra_addrs()) != 1:
            raise RuntimeError(f"after ADD pod {pod.name} has {pod.extra_addrs()}")
        cni.run(inv, "DEL")
        return add.wall_ns / 1e6
    finally:
        pods.delete([pod])


def measure(side: RdmaCni, pods: lab.Pods, sock: str, rounds: int, idle: int, slow: int,
            budget_s: float = float("inf")) -> tuple[dict[str, list[float]], list[int]]:
    """ADD times (ms) of ``side`` (its residentSocket ``sock``) quiet and flooded, in
    blocks quiet, flood, quiet, flood of ``rounds // 2`` rounds each (at least 1; a block
    past a quarter of ``budget_s`` stops after 1), after one warm-up round; returns the
    samples and how many connections were open as each flood block began."""
    samples: dict[str, list[float]] = {"quiet": [], "flood": []}
    held: list[int] = []
    _round(side, pods)  # warm-up
    for block in range(4):
        kind = ("quiet", "flood")[block % 2]
        flood = Flood(Path(sock), idle, slow).start() if kind == "flood" else None
        try:
            if flood is not None:
                held.append(flood.open_count())
            start = time.monotonic()
            for i in range(max(1, rounds // 2)):
                if i and time.monotonic() - start > budget_s / 4:
                    break
                samples[kind].append(_round(side, pods))
        finally:
            if flood is not None:
                flood.stop()
    return samples, held


def driver(args: argparse.Namespace) -> int:
    names, tmp = lab.Names(args.inner_prefix), args.inner_tmp
    pods = lab.Pods(names)
    cni.use_measurer(tmp)
    daemon = resident.Daemon.start(bundle_of(args), os.path.join(tmp, "r.sock"),
                                   os.path.join(tmp, "serve.log"))
    side = RdmaCni(args.binary, os.path.join(tmp, "side"), 1, socket=daemon.socket)
    try:
        samples, held = measure(side, pods, daemon.socket, args.rounds, args.idle, args.slow)
        served = served_adds(daemon.log_file)
        record = _record(args, samples, held, served, daemon)
    finally:
        cni.end_all()
        daemon.stop()
        pods.close()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    sys.stdout.write(_table(record))
    return 0 if record["met"] else 1


def served_adds(log_file: str) -> int:
    """ADDs `serve` answered so far (the lines its log writes for them)."""
    with open(log_file) as f:
        return sum(" resident ADD " in line for line in f)


def _record(args: argparse.Namespace, samples: dict[str, list[float]], held: list[int],
            served: int, daemon: resident.Daemon) -> dict[str, Any]:
    quiet, flood = (report.summary(samples[k]) for k in ("quiet", "flood"))
    ratio = flood["median"] / quiet["median"]
    ratio_p90 = flood["p90"] / quiet["p90"]
    total = len(samples["quiet"]) + len(samples["flood"]) + 1
    return {"machine": report.machine(os.getloadavg()),
            "versions": report.versions(args.binary, str(REPO)),
            "config": {"rounds": args.rounds, "idle": args.idle, "slow": args.slow},
            "held_open": held, "add_ms": {"quiet": quiet, "flood": flood},
            "ratio": ratio, "goal": GOAL, "ratio_p90": ratio_p90, "goal_p90": GOAL_P90,
            "served": served, "adds": total,
            "met": ratio <= GOAL and ratio_p90 <= GOAL_P90 and served == total,
            "samples": samples,
            "resident_daemon": daemon.memory_kib()}


def _table(r: dict[str, Any]) -> str:
    q, f = r["add_ms"]["quiet"], r["add_ms"]["flood"]
    return (f"one-interface ADD through the front, resident path ({r['config']['idle']} idle + "
            f"{r['config']['slow']} slow connections held: {r['held_open']})\n"
            f"  quiet: median {q['median']:.1f} ms, p90 {q['p90']:.1f} ms, max {q['max']:.1f} ms "
            f"(n={q['n']})\n"
            f"  flood: median {f['median']:.1f} ms, p90 {f['p90']:.1f} ms, max {f['max']:.1f} ms "
            f"(n={f['n']})\n"
            f"  ratio {r['ratio']:.2f}x (goal <= {r['goal']}x), p90 {r['ratio_p90']:.2f}x (goal <= "
            f"{r['goal_p90']}x); ADDs answered by serve: "
            f"{r['served']} of {r['adds']} -> {'met' if r['met'] else 'NOT met'}\n")


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.inner_prefix:
        return driver(args)
    if os.geteuid() != 0:
        sys.exit("bench/flood.py needs root (network namespaces)")
    names = lab.Names(f"rcf{os.getpid() % 100000}")
    tmp = tempfile.mkdtemp(prefix="rdma-cni-flood.")
    inner: subprocess.Popen[bytes] | None = None
    try:
        binary = install_bundle(args.binary, tmp)
        lab.make_node(names, 1)
        inner = subprocess.Popen(["ip", "netns", "exec", names.node, sys.executable, __file__,
                                  *(argv or sys.argv[1:]), "--binary", binary,
                                  "--binary-origin", args.binary,
                                  "--inner-prefix", names.prefix, "--inner-tmp", tmp])
        return inner.wait()
    finally:
        if inner is not None and inner.poll() is None:
            inner.send_signal(signal.SIGTERM)
            inner.wait()
        lab.destroy(names)
        subprocess.run(["rm", "-rf", tmp], check=False)


if __name__ == "__main__":
    sys.exit(main())
