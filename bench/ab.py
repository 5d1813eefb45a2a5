#!/usr/bin/env python3
"""An A/B of a change to the one-interface ADD, in one process: rounds alternate between
this tree as it is (A) and with a variant applied (B), each ADD on a fresh pod after a
pause of each length in turn (bench/inproc.py: the same ``dispatch.run`` call
`rdma-cni serve` makes), so that a drift of the machine reaches both sides alike (on a
guest whose speed drifts within minutes, a difference of a few percent shows here and
in no pair of whole `bench/run.py` runs).

    sudo .venv/bin/python bench/ab.py VARIANT.py [--rounds 100] [--pauses 0,20] [--json FILE]

``VARIANT.py`` is Python that defines ``apply()`` and ``revert()``: monkeypatches of this
tree's modules (say, a function replaced by the code to price, or by nothing, for an upper
bound), applied before each B round and reverted after it. A variant whose ``apply`` does
nothing measures the method itself. Prints, per pause, the ADD's thread CPU (median and
quartiles) of each side and B against A. Everything made here is deleted at the end.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import inproc  # noqa: E402
import lab  # noqa: E402


def _variant(path: str) -> ModuleType | str:
    """The variant's module, or why it is not one."""
    spec = importlib.util.spec_from_file_location("variant", path)
    if spec is None or spec.loader is None or not Path(path).is_file():
        return f"{path} is not a Python file"
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        return f"{path} does not load: {type(exc).__name__}: {' '.join(str(exc).split())}"
    if not all(callable(getattr(module, f, None)) for f in ("apply", "revert")):
        return f"{path} defines no apply() and revert()"
    return module


def inner(args: argparse.Namespace) -> int:
    variant = _variant(args.variant)
    if isinstance(variant, str):
        print(f"ab: {variant}", file=sys.stderr)
        return 2
    inproc.preload()
    pauses = inproc.pauses_of(args.pauses) or []
    got: dict[tuple[float, str], list[int]] = {(p, s): [] for p in pauses for s in "AB"}
    adds = inproc.Adds(args.tmp, args.prefix)
    try:
        for r in range(2 * (args.rounds + 1)):  # the first pair warms up, not counted
            side = "AB"[r % 2]
            if side == "B":
                variant.apply()
            try:
                for p in pauses:
                    cpu, _ = adds.once(lambda p=p: inproc.pause(p / 1e3, False))
                    if r >= 2:
                        got[(p, side)].append(cpu)
            finally:
                if side == "B":
                    variant.revert()
    finally:
        adds.close()
    report = _report(got, pauses, args)
    _print(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


def _report(got: dict[tuple[float, str], list[int]], pauses: list[float],
            args: argparse.Namespace) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for p in pauses:
        row: dict[str, Any] = {}
        for side in "AB":
            cpu = sorted(got[(p, side)])
            q1, _, q3 = statistics.quantiles(cpu, n=4) if len(cpu) > 1 else (cpu[0],) * 3
            row[side] = {"adds": len(cpu), "cpu_ms": statistics.median(cpu) / 1e6,
                         "q1_ms": q1 / 1e6, "q3_ms": q3 / 1e6}
        row["b_over_a"] = row["B"]["cpu_ms"] / row["A"]["cpu_ms"]
        rows[f"{p:g}"] = row
    return {"variant": args.variant, "rounds": args.rounds, "pause_ms": rows}


def _print(report: dict[str, Any]) -> None:
    print(f"one-interface ADD in-process, A (as is) and B ({report['variant']}) in "
          f"alternate rounds, {report['rounds']} each: the ADD's CPU, ms")
    print(f"{'pause ms':>9} {'A median':>9} {'A q1-q3':>13} {'B median':>9} {'B q1-q3':>13} "
          f"{'B/A':>6}")
    for p, row in report["pause_ms"].items():
        a, b = row["A"], row["B"]
        print(f"{p:>9} {a['cpu_ms']:9.3f} {a['q1_ms']:6.3f}-{a['q3_ms']:<6.3f} "
              f"{b['cpu_ms']:9.3f} {b['q1_ms']:6.3f}-{b['q3_ms']:<6.3f} {row['b_over_a']:6.3f}")


def _problem(args: argparse.Namespace) -> str:
    """Why these arguments cannot run ("" when they can)."""
    if inproc.pauses_of(args.pauses) is None or args.rounds < 1:
        return "--pauses takes ms >= 0, comma-separated; --rounds >= 1"
    if not Path(args.variant).exists():
        return f"{args.variant} does not exist"
    loaded = _variant(args.variant)
    return loaded if isinstance(loaded, str) else ""


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("variant", help="a Python file defining apply() and revert()")
    p.add_argument("--rounds", type=int, default=100, help="rounds of each side")
    p.add_argument("--pauses", default="0,20", help="ms before each ADD, comma-separated")
    p.add_argument("--json", default="")
    args = p.parse_known_args()[0]
    problem = _problem(args)
    if problem:
        print(f"ab: {problem}", file=sys.stderr)
        return 2
    return lab.node_main(p, "rab", __file__, inner)


if __name__ == "__main__":
    sys.exit(main())
