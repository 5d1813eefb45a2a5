#!/usr/bin/env python3
"""The in-process one-interface ADD step by step: the same ``dispatch.run`` call
`rdma-cni serve` makes, on a fresh pod of a throwaway node netns each round, after a pause
(figure 2's pods come one at a time), with each named step of the ADD timed by a wrapper
around it (a few microseconds each; no profiler, whose cost grows with every call).

    sudo .venv/bin/python bench/phases.py [--rounds 40] [--pause 20] [--data-tmpfs]
                                          [--json FILE]

Prints, per step in the order they run, the medians of when it started (from the ADD's
start) and of its wall, and its share of the ADD's wall; a step inside another is
indented under it. ``--data-tmpfs``: the store's data dir on a tmpfs mounted for the run
(the ADD's store on memory, not this machine's disk). Everything made here is deleted at
the end.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import inproc  # noqa: E402
import lab  # noqa: E402

#: (module, attribute path, label): the steps timed, as ``cmd_add`` calls them
STEPS = [
    ("rdma_cni.cni.dispatch", "run", "ADD (dispatch.run)"),
    ("rdma_cni.cni.dispatch", "_decode", "decode the config"),
    ("rdma_cni.cni.dispatch", "_build_request", "build the request"),
    ("rdma_cni.cni.dispatch", "_call", "the command"),
    ("rdma_cni.cni.commands.add", "cmd_add", "cmd_add"),
    ("rdma_cni.cni.commands.add", "Session", "open the netns"),
    ("rdma_cni.cni.commands.add", "repeat", "a repeated ADD?"),
    ("rdma_cni.node.nics", "rdma_nics", "the RDMA NICs (sysfs)"),
    ("rdma_cni.cni.commands.add", "_allocation", "the kubelet's allocation"),
    ("rdma_cni.cni.commands.add", "nic_facts", "the NICs' facts (netlink)"),
    ("rdma_cni.cni.commands.add", "plan_interfaces", "plan"),
    ("rdma_cni.cni.commands.add", "_free_tables", "free route tables"),
    ("rdma_cni.cni.commands.add", "_states", "the state's origin"),
    ("rdma_cni.cni.commands.add", "_reserve", "reserve"),
    ("rdma_cni.store.core", "Store.prepare_ip", "claim record ahead"),
    ("rdma_cni.store.core", "Store.ip_owners", "reservations read"),
    ("rdma_cni.store.core", "Store.reserve_ip", "address reserved"),
    ("rdma_cni.store.core", "Store.put_state", "pending state"),
    ("rdma_cni.cni.commands.add", "_apply", "apply"),
    ("rdma_cni.cni.commands.add", "apply", "the executor's steps"),
    ("rdma_cni.store.core", "Store.prepare_state", "a state record written"),
    ("rdma_cni.store.core", "Store.commit_state", "a state record put in place"),
    ("rdma_cni.cni.result", "append", "the result"),
]
ADD = STEPS[0][2]  # the whole command: the ADD's, and its DEL's
Mark = tuple[str, int, int]  # label, start, end (ns)


@contextmanager
def timed(marks: list[Mark]) -> Iterator[None]:
    """Every step of :data:`STEPS` wrapped to append its mark to ``marks``; put back after."""
    undo: list[Callable[[], None]] = []
    try:
        for module, path, label in STEPS:
            owner: Any = importlib.import_module(module)
            *outer, name = path.split(".")
            for part in outer:
                owner = getattr(owner, part)
            real = getattr(owner, name)
            setattr(owner, name, _wrapper(real, label, marks))
            undo.append(_putter(owner, name, real))
        yield
    finally:
        for u in reversed(undo):
            u()


def _putter(owner: Any, name: str, real: Any) -> Callable[[], None]:
    return lambda: setattr(owner, name, real)


def _wrapper(real: Callable[..., Any], label: str, marks: list[Mark]) -> Callable[..., Any]:
    def step(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return real(*args, **kwargs)
        finally:
            marks.append((label, t0, time.perf_counter_ns()))
    return step


def inner(args: argparse.Namespace) -> int:
    inproc.preload()
    data = os.path.join(args.tmp, "data")
    if args.data_tmpfs:
        os.makedirs(data, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "rdma-cni-bench",
                        data], check=True)
    try:
        rounds = _measure(args)
        fs = fs_of(data)
    finally:
        if args.data_tmpfs:
            subprocess.run(["umount", data], check=True)
    report = _report(rounds, args)
    report["data_fs"] = fs
    _print(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


def fs_of(path: str) -> str:
    """The type of the file system ``path`` is on (this process's mount table)."""
    from rdma_cni.tools.doctor_integrity import mount_of, parse_mountinfo

    mount = mount_of(os.path.realpath(path),
                     parse_mountinfo(Path("/proc/self/mountinfo").read_text()))
    return mount.fstype if mount is not None else ""


def _measure(args: argparse.Namespace) -> list[list[Mark]]:
    """Each counted ADD's marks, its own first (the whole ``dispatch.run``)."""
    got: list[list[Mark]] = []
    adds = inproc.Adds(args.tmp, args.prefix)  # it looks ``dispatch.run`` up at each call
    try:
        for r in range(args.rounds + 1):  # round 0 warms up, not counted
            marks: list[Mark] = []
            with timed(marks):
                adds.once(lambda: time.sleep(args.pause / 1e3))
            whole = next(m for m in marks if m[0] == ADD)  # the ADD's, not its DEL's
            if r:
                got.append([whole] + [m for m in marks if whole[1] <= m[1] and m[2] <= whole[2]
                                      and m is not whole])
    finally:
        adds.close()
    return got


def _keyed(marks: list[Mark]) -> dict[str, Mark]:
    """One round's marks by step in the order they started; a step's later calls as
    ``step #2`` and on."""
    out: dict[str, Mark] = {}
    for m in sorted(marks, key=lambda m: (m[1], -m[2])):
        key, n = m[0], 1
        while key in out:
            n += 1
            key = f"{m[0]} #{n}"
        out[key] = m
    return out


def _report(rounds: list[list[Mark]], args: argparse.Namespace) -> dict[str, Any]:
    keyed = [_keyed(marks) for marks in rounds]
    first = keyed[0]
    steps: list[dict[str, Any]] = []
    for key, m in first.items():
        depth = sum(1 for o in first.values() if o is not m and o[1] <= m[1] and m[2] <= o[2])
        have = [k for k in keyed if key in k]
        steps.append({"step": key, "depth": depth, "rounds": len(have),
                      "start_us": statistics.median((k[key][1] - k[ADD][1]) / 1e3 for k in have),
                      "wall_us": statistics.median((k[key][2] - k[key][1]) / 1e3 for k in have)})
    add_wall = steps[0]["wall_us"]
    for s in steps:
        s["share"] = s["wall_us"] / add_wall
    return {"rounds": len(rounds), "pause_ms": args.pause, "data_tmpfs": args.data_tmpfs,
            "add_wall_us": add_wall, "steps": steps}


def _print(report: dict[str, Any]) -> None:
    where = f"{report['data_fs']}" + (" (mounted for the run)" if report["data_tmpfs"] else "")
    print(f"the in-process one-interface ADD step by step, after a {report['pause_ms']:g} ms "
          f"pause, {report['rounds']} rounds, the store on {where}: medians, us")
    print(f"{'step':<36} {'start':>7} {'wall':>7} {'share':>6}")
    for s in report["steps"]:
        name = "  " * s["depth"] + s["step"]
        print(f"{name:<36} {s['start_us']:7.0f} {s['wall_us']:7.0f} {s['share']:6.2f}")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--pause", type=float, default=20.0, help="ms before each ADD")
    p.add_argument("--data-tmpfs", action="store_true",
                   help="the store's data dir on a tmpfs mounted for the run")
    p.add_argument("--json", default="")
    args = p.parse_known_args()[0]
    if args.rounds < 1 or args.pause < 0:
        print("phases: --rounds >= 1, --pause >= 0 (ms)", file=sys.stderr)
        return 2
    return lab.node_main(p, "rph", __file__, inner)


if __name__ == "__main__":
    sys.exit(main())
