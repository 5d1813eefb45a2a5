"""Statistics, the JSON record and the markdown table of a benchmark run."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from figures import Scenario

MIB = 1024.0
SCENARIO_FIGURE = {"s1": "figure 1", "s2": "figures 2 and 5", "s3": "figure 3",
                   "s4": "figure 4"}
PATH_LABEL = {"inproc": "in-process", "resident": "resident"}


@dataclass(frozen=True)
class Figure:
    id: str
    title: str
    scenario: str
    metric: str
    unit: str = "ms"
    goal: float | None = None  # ratio goal, or an absolute bound when absolute=True
    absolute: bool = False


FIGURES = (
    Figure("1", "8 RDMA interfaces, ADD+DEL (1 exec vs 8+8 macvlan execs)", "s1", "total_ms",
           goal=1.0),
    Figure("1a", "8 RDMA interfaces, ADD only", "s1", "add_ms"),
    Figure("1b", "8 RDMA interfaces, DEL only", "s1", "del_ms"),
    Figure("2", "1 interface, ADD", "s2", "add_ms", goal=4.0),
    Figure("2b", "1 interface, DEL", "s2", "del_ms"),
    Figure("2c", "1 interface, ADD CPU time (user+sys; exec + resident daemon)", "s2",
           "add_total_cpu_ms"),
    Figure("3", "pod without RDMA blocks, pass-through ADD", "s3", "add_ms", goal=4.0),
    Figure("4", "N pods ADD at once, wall time", "s4", "wall_ms", goal=1.5),
    Figure("4b", "N pods DEL at once, wall time", "s4", "del_wall_ms"),
    Figure("4c", "N pods ADD at once, CPU time (execs + resident daemon)", "s4",
           "add_total_cpu_ms"),
    Figure("5", "peak RSS of one ADD (1 interface)", "s2", "add_rss_kib", unit="MiB",
           goal=40.0, absolute=True),
)


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def p90(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return float(xs[0])
    return float(statistics.quantiles(xs, n=10, method="inclusive")[-1])


def summary(xs: Sequence[float], scale: float = 1.0) -> dict[str, Any]:
    vals = [x / scale for x in xs]
    return {"n": len(vals), "median": round(median(vals), 3), "p90": round(p90(vals), 3),
            "min": round(min(vals), 3), "max": round(max(vals), 3)}


def figure_row(fig: Figure, sc: Scenario, path: str) -> dict[str, Any]:
    scale = MIB if fig.unit == "MiB" else 1.0
    a = summary(sc.samples[path][fig.metric], scale)
    b = summary(sc.samples["go"][fig.metric], scale)
    ratio = a["median"] / b["median"] if b["median"] else float("inf")
    row: dict[str, Any] = {
        "id": fig.id, "title": fig.title.replace("N pods", f"{sc.parallel} pods"),
        "path": path, "unit": fig.unit, "rdma_cni": a, "go": b, "ratio": round(ratio, 3),
        "ratio_p90": round(a["p90"] / b["p90"], 3) if b["p90"] else None,
        "goal": fig.goal, "goal_kind": "absolute" if fig.absolute else "ratio",
    }
    if fig.goal is not None:
        row["met"] = (a["median"] if fig.absolute else ratio) <= fig.goal
    if fig.scenario == "s4" and fig.metric == "wall_ms":
        row["duplicates"] = {"rdma_cni": sc.duplicates.get(path, 0),
                             "go": sc.duplicates.get("go", 0)}
        row["met"] = row["met"] and row["duplicates"]["rdma_cni"] == 0
    return row


def rows(scenarios: dict[str, Scenario], paths: Sequence[str]) -> list[dict[str, Any]]:
    return [figure_row(fig, scenarios[fig.scenario], path)
            for fig in FIGURES if fig.scenario in scenarios for path in paths]


def _cmd(*argv: str) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: {exc}"
    return proc.stdout.strip()


def machine(load_at_start: Sequence[float] = ()) -> dict[str, Any]:
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"uname": _cmd("uname", "-a"), "nproc": os.cpu_count(), "cpu_model": model,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "loadavg_at_start": [round(x, 2) for x in load_at_start],
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
            "python_driver": platform.python_version()}


def versions(binary: str, repo: str, origin: str = "") -> dict[str, Any]:
    head = _cmd("git", "-C", repo, "rev-parse", "--short", "HEAD")
    dirty = bool(_cmd("git", "-C", repo, "status", "--porcelain", "--", "rdma_cni"))
    built = os.path.getmtime(binary)
    return {
        "rdma_cni": _cmd(binary, "--version"),
        "rdma_cni_binary": origin or binary,
        "rdma_cni_built": datetime.datetime.fromtimestamp(built, datetime.UTC)
        .isoformat(timespec="seconds"),
        "git": head + ("-dirty" if dirty else ""),
        "containernetworking_plugins": _cmd("dpkg-query", "-W", "-f", "${Version}",
                                            "containernetworking-plugins"),
    }


def _cell(s: dict[str, Any], unit: str) -> str:
    return f"{s['median']:.1f} {unit} ({s['p90']:.1f})"


def markdown(record: dict[str, Any]) -> str:
    m, v = record["machine"], record["versions"]
    rounds = ", ".join(f"{SCENARIO_FIGURE.get(k, k)} x{s['rounds']}"
                       for k, s in record["scenarios"].items())
    lines = [
        f"rdma-cni {v['rdma_cni'].split()[-1]} ({v['git']}) vs Go macvlan+host-local "
        f"{v['containernetworking_plugins']}; {m['nproc']} x {m['cpu_model']}, "
        f"{m['uname'].split()[2]}; {m['date']}; load average {m['loadavg_at_start'][:1]} at "
        f"start, {m['loadavg_at_end'][:1]} at end. Rounds (fresh pods each): {rounds}; "
        "cells: median (p90).",
        "",
        "| # | figure | path | rdma-cni median (p90) | Go median (p90) | ratio | goal | met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in record["figures"]:
        goal = "" if r["goal"] is None else (
            f"<= {r['goal']:g} {r['unit']}" if r["goal_kind"] == "absolute"
            else f"<= {r['goal']:g}x")
        met = "" if "met" not in r else ("yes" if r["met"] else "**no**")
        title = r["title"]
        if "duplicates" in r:
            title += f"; duplicate addresses: {r['duplicates']['rdma_cni']}"
        lines.append(f"| {r['id']} | {title} | {PATH_LABEL.get(r['path'], r['path'])} | "
                     f"{_cell(r['rdma_cni'], r['unit'])} | {_cell(r['go'], r['unit'])} | "
                     f"{r['ratio']:.2f}x | {goal} | {met} |")
    daemon = record.get("resident_daemon")
    if daemon:
        lines += ["", f"Resident process memory: peak {daemon.get('VmHWM', 0) / MIB:.1f} MiB, "
                      f"at the end {daemon.get('VmRSS', 0) / MIB:.1f} MiB."]
    return "\n".join(lines) + "\n"


def write(record: dict[str, Any], out: str) -> str:
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    md = markdown(record)
    for path, text in ((out, json.dumps(record, indent=1) + "\n"),
                       (os.path.splitext(out)[0] + ".md", md)):
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return md
