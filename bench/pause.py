#!/usr/bin/env python3
"""What a pause before a one-interface ADD costs it: the same ``dispatch.run`` call
`rdma-cni serve` makes, in this process, on a fresh pod each round in a throwaway node
netns, after a pause of each length in turn (round after round, so that a drift of the
machine reaches every length alike). Figure 2's pods come one at a time, as a node
starts them; figure 4's come back to back.

    sudo .venv/bin/python bench/pause.py [--rounds 40] [--pauses 0,5,20,50] [--spin]
                                         [--load-other-cpu] [--json FILE] [--profile PREFIX]

``--spin``: each pause spent running (a loop on this thread) instead of sleeping, so its
CPU never idles. ``--load-other-cpu``: this process pinned to one CPU and a child of its
own spinning on another for the whole run. Prints, per pause, the medians of the ADD's
thread CPU and wall and its CPU against that after no pause; ``--profile PREFIX``: the
counted ADDs after each pause P under cProfile as well, written to ``PREFIX-P.prof``
(pstats; the figures printed then include its overhead). Everything made here is
deleted at the end (the child ended by its PID).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import signal
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import inproc  # noqa: E402
import lab  # noqa: E402


def _spinner(cpu: int) -> int:
    """A child spinning on ``cpu`` until it is killed; its PID."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        try:
            os.sched_setaffinity(0, {cpu})
            while True:
                pass
        finally:
            os._exit(0)
    return pid


def inner(args: argparse.Namespace) -> int:
    inproc.preload()
    child = None
    if args.load_other_cpu:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            print("pause: --load-other-cpu needs two CPUs", file=sys.stderr)
            return 2
        os.sched_setaffinity(0, {cpus[0]})
        child = _spinner(cpus[1])
    try:
        got = _measure(args, inproc.pauses_of(args.pauses) or [])
    finally:
        if child is not None:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
    report = _report(got, args)
    _print(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


def _measure(args: argparse.Namespace, pauses: list[float]
             ) -> dict[float, list[tuple[int, int]]]:
    """(thread CPU, wall) in ns of each counted ADD, by the pause (ms) before it."""
    got: dict[float, list[tuple[int, int]]] = {p: [] for p in pauses}
    profiles = {p: cProfile.Profile() for p in pauses} if args.profile else {}
    adds = inproc.Adds(args.tmp, args.prefix)
    try:
        for r in range(args.rounds + 1):  # round 0 warms up, not counted
            for p in pauses:
                sample = adds.once(lambda p=p: inproc.pause(p / 1e3, args.spin),
                                   profiles.get(p) if r else None)
                if r:
                    got[p].append(sample)
    finally:
        adds.close()
    for p, prof in profiles.items():
        prof.dump_stats(f"{args.profile}-{p:g}.prof")
    return got


def _report(got: dict[float, list[tuple[int, int]]], args: argparse.Namespace
            ) -> dict[str, Any]:
    rows = {}
    for p, samples in got.items():
        rows[f"{p:g}"] = {"adds": len(samples),
                          "cpu_ms": statistics.median(c for c, _ in samples) / 1e6,
                          "wall_ms": statistics.median(w for _, w in samples) / 1e6}
    base = rows[f"{min(got):g}"]["cpu_ms"]
    for row in rows.values():
        row["cpu_ratio"] = row["cpu_ms"] / base
    return {"rounds": args.rounds, "spin": args.spin, "load_other_cpu": args.load_other_cpu,
            "pause_ms": rows}


def _print(report: dict[str, Any]) -> None:
    how = "spinning" if report["spin"] else "sleeping"
    load = ", another CPU loaded" if report["load_other_cpu"] else ""
    print(f"one-interface ADD in-process after a pause ({how}{load}), "
          f"{report['rounds']} rounds: medians")
    print(f"{'pause ms':>9} {'CPU ms':>8} {'wall ms':>8} {'CPU ratio':>10}")
    for p, row in report["pause_ms"].items():
        print(f"{p:>9} {row['cpu_ms']:8.2f} {row['wall_ms']:8.2f} {row['cpu_ratio']:9.2f}x")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--pauses", default="0,5,20,50", help="ms, comma-separated")
    p.add_argument("--spin", action="store_true", help="spend each pause running")
    p.add_argument("--load-other-cpu", action="store_true",
                   help="a child spinning on another CPU for the whole run")
    p.add_argument("--json", default="")
    p.add_argument("--profile", default="", help="PREFIX: pstats files PREFIX-<pause>.prof")
    args = p.parse_known_args()[0]
    if inproc.pauses_of(args.pauses) is None or args.rounds < 1:
        print("pause: --pauses takes ms >= 0, comma-separated; --rounds >= 1",
              file=sys.stderr)
        return 2
    return lab.node_main(p, "rpz", __file__, inner)


if __name__ == "__main__":
    sys.exit(main())
