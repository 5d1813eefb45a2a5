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
SCENARIO_FIGURE = {"s1": "figure 1", "s2": "figures 2, 5 and 6", "s3": "figure 3",
                   "s4": "figure 4", "s7-0": "figure 7 (none)", "s7": "figure 7",
                   "s8-0": "figure 8 (quiet)", "s8": "figure 8"}
PATH_LABEL = {"inproc": "in-process", "resident": "resident",
              "direct": "in-process, host's libc"}


@dataclass(frozen=True)
class Figure:
    id: str
    title: str
    scenario: str
    metric: str
    unit: str = "ms"
    goal: float | None = None  # ratio goal to Go in the same run
    #: the path the goal is about (the node's normal path is the resident one); the
    #: figure's row on the other path is shown without a goal
    goal_path: str = "resident"
    cpu: str | None = None  # the CPU-time metric shown beside the wall time
    paths: tuple[str, ...] = ("inproc", "resident")
    #: the scenario whose samples on the same path are the reference (instead of Go's in
    #: the same scenario): rdma-cni against itself on a quieter node
    baseline: str | None = None


FIGURES = (
    Figure("1", "8 RDMA interfaces, ADD+DEL (1 exec vs 8+8 macvlan execs)", "s1", "total_ms",
           goal=0.25, cpu="total_cpu_ms"),
    Figure("1a", "8 RDMA interfaces, ADD only", "s1", "add_ms", cpu="add_total_cpu_ms"),
    Figure("1b", "8 RDMA interfaces, DEL only", "s1", "del_ms", cpu="del_total_cpu_ms"),
    Figure("2", "1 interface, ADD", "s2", "add_ms", goal=0.5, cpu="add_total_cpu_ms",
           paths=("resident",)),
    Figure("2b", "1 interface, DEL", "s2", "del_ms", goal=0.75, cpu="del_total_cpu_ms"),
    Figure("3", "pod without RDMA blocks, pass-through ADD", "s3", "add_ms", goal=0.3,
           cpu="add_total_cpu_ms"),
    Figure("4", "N pods ADD at once, wall time", "s4", "wall_ms", goal=0.5,
           cpu="add_total_cpu_ms"),
    Figure("4b", "N pods DEL at once, wall time", "s4", "del_wall_ms"),
    Figure("5", "peak RSS of the exec'd process (1-interface ADD)", "s2", "add_rss_kib",
           unit="MiB", goal=1.0),
    Figure("6", "in-process fallback, 1 interface, ADD", "s2", "add_ms", goal=15.0,
           goal_path="inproc", cpu="add_total_cpu_ms", paths=("inproc",)),
    Figure("6l", "figure 6's plugin exec'd on the host's C library, no front, no bundled "
           "loader (a reference: 6 minus 6l is what the loader costs)", "s2", "add_ms",
           cpu="add_total_cpu_ms", paths=("direct",)),
    Figure("7", "1 interface, ADD, N attachments already on the node, against none", "s7",
           "add_ms", goal=1.3, cpu="add_total_cpu_ms", baseline="s7-0"),
    Figure("8", "1 interface, ADD, N idle and slow connections open to the server, against "
           "none", "s8", "add_ms", goal=2.0, baseline="s8-0", paths=("resident",)),
)
#: what the reference of a figure against itself is, by its baseline scenario
BASELINE_LABEL = {"s7-0": "none", "s8-0": "none"}
#: each figure's floor: how many execs of the static C ``true`` (the least an exec'd
#: plugin costs) and which parts of the record's ``floor`` (bench/floor.py: the same
#: netlink requests and store writes as `serve`'s, nothing else); figure 4's batch has
#: its execs inside (bench/floor_batch.py). Figures 5 and 5b (memory) have none.
FLOOR_OF: dict[str, tuple[int, tuple[tuple[str, str], ...]]] = {
    "1": (2, (("add_del_many", "add_ms"), ("add_del_many", "del_ms"))),
    "1a": (1, (("add_del_many", "add_ms"),)),
    "1b": (1, (("add_del_many", "del_ms"),)),
    "2": (1, (("add_del", "add_ms"),)),
    "2b": (1, (("add_del", "del_ms"),)),
    "3": (1, (("pass_through", "add_ms"),)),
    "4": (0, (("batch", "add_ms"),)),
    "4b": (0, (("batch", "del_ms"),)),
    "6": (1, (("add_del", "add_ms"),)),
    "6l": (1, (("add_del", "add_ms"),)),
    "7": (1, (("add_del_busy", "add_ms"),)),
    "8": (1, (("add_del", "add_ms"),)),
}
#: the resident process after the ADD/DEL cycles: an absolute bound, MiB
RESIDENT_RSS_GOAL_MIB = 80.0


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


def figure_row(fig: Figure, sc: Scenario, path: str,
               base: Scenario | None = None) -> dict[str, Any]:
    """One row: ``path``'s samples in ``sc`` against Go's in ``sc`` or, for a figure with
    a ``baseline``, against the same path's in ``base`` (the ``go`` cell then holds it)."""
    scale = MIB if fig.unit == "MiB" else 1.0
    ref = base.samples[path] if base is not None else sc.samples["go"]
    a = summary(sc.samples[path][fig.metric], scale)
    b = summary(ref[fig.metric], scale)
    ratio = a["median"] / b["median"] if b["median"] else float("inf")
    goal = fig.goal if path == fig.goal_path else None
    title = fig.title.replace("N pods", f"{sc.parallel} pods")
    if sc.load:
        title = title.replace("N ", f"{sc.load} ", 1)
    row: dict[str, Any] = {
        "id": fig.id, "title": title,
        "path": path, "unit": fig.unit, "rdma_cni": a, "go": b, "ratio": round(ratio, 3),
        "ratio_p90": round(a["p90"] / b["p90"], 3) if b["p90"] else None,
        "goal": goal, "goal_kind": "ratio",
    }
    if base is not None:
        row["reference"] = BASELINE_LABEL.get(fig.baseline or "", "baseline")
    if fig.cpu is not None:
        row["cpu_ms"] = {"rdma_cni": summary(sc.samples[path][fig.cpu])["median"],
                         "go": summary(ref[fig.cpu])["median"]}
    if goal is not None:
        row["met"] = ratio <= goal
    if fig.scenario == "s4" and fig.metric == "wall_ms":
        row["duplicates"] = {"rdma_cni": sc.duplicates.get(path, 0),
                             "go": sc.duplicates.get("go", 0)}
        if goal is not None:
            row["met"] = row["met"] and row["duplicates"]["rdma_cni"] == 0
    return row


def rows(scenarios: dict[str, Scenario], paths: Sequence[str]) -> list[dict[str, Any]]:
    """Every figure whose scenarios (and baseline) ran, on each of ``paths`` it has and
    its scenario measured."""
    out = []
    for fig in FIGURES:
        sc = scenarios.get(fig.scenario)
        base = scenarios.get(fig.baseline) if fig.baseline else None
        if sc is None or (fig.baseline and base is None):
            continue
        out += [figure_row(fig, sc, path, base) for path in paths
                if path in fig.paths and path in sc.samples
                and (base is None or path in base.samples)]
    return out


def floor_of(fig_id: str, fl: dict[str, Any] | None) -> float | None:
    """The kernel's floor of figure ``fig_id`` (``FLOOR_OF``) from the run's floor record,
    ms; None when the figure has none or a part of it was not measured."""
    if fig_id not in FLOOR_OF or not fl:
        return None
    execs, parts = FLOOR_OF[fig_id]
    true = fl.get("static_true") or {}
    if execs and not true:
        return None
    total = execs * true["wall_ms"] if execs else 0.0
    for key, metric in parts:
        value = (fl.get(key) or {}).get(metric)
        if not value:
            return None
        total += value
    return round(total, 3)


def add_floor(figure_rows: list[dict[str, Any]], fl: dict[str, Any] | None) -> None:
    """Beside each figure that has one, the kernel's floor of its command (``floor_of``)
    and how many times it the figure's median is."""
    for row in figure_rows:
        floor = floor_of(row["id"], fl)
        if floor is None:
            continue
        row["floor_ms"] = floor
        row["floor_ratio"] = round(row["rdma_cni"]["median"] / floor, 3)


def cycle_rows(cycles: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Figure 5b: the resident process's RSS after the ADD/DEL cycles (absolute bound)."""
    if not cycles:
        return []
    end = cycles["rss_kib_end"] / MIB
    start = cycles["rss_kib_after_warmup"] / MIB
    cell = {"n": cycles["cycles"], "median": round(end, 3), "p90": round(end, 3),
            "min": round(start, 3), "max": round(cycles["hwm_kib"] / MIB, 3)}
    return [{"id": "5b", "title": f"resident process RSS, all its processes summed, after "
             f"{cycles['cycles']} ADD/DEL cycles (after warm-up: {start:.1f} MiB)",
             "path": "resident", "unit": "MiB",
             "rdma_cni": cell, "go": None, "ratio": None, "ratio_p90": None,
             "goal": RESIDENT_RSS_GOAL_MIB, "goal_kind": "absolute",
             "met": end <= RESIDENT_RSS_GOAL_MIB, "growth_mib": round(end - start, 3)}]


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
    """What ran: ``git`` is the commit the binary was built from (its ``--version``),
    this checkout's HEAD only when the binary names none (a ``--binary`` of another
    checkout must not be credited to this one)."""
    said = _cmd(binary, "--version")
    built_from = said.rsplit("(commit ", 1)[-1].rstrip(")") if "(commit " in said else ""
    if built_from and built_from != "unknown":
        commit, _, dirty_mark = built_from.partition("-")
        git = commit[:7] + ("-dirty" if dirty_mark else "")
    else:
        head = _cmd("git", "-C", repo, "rev-parse", "--short", "HEAD")
        dirty = bool(_cmd("git", "-C", repo, "status", "--porcelain", "--", "rdma_cni"))
        git = head + ("-dirty" if dirty else "")
    built = os.path.getmtime(binary)
    return {
        "rdma_cni": said,
        "rdma_cni_binary": origin or binary,
        "rdma_cni_built": datetime.datetime.fromtimestamp(built, datetime.UTC)
        .isoformat(timespec="seconds"),
        "git": git,
        "containernetworking_plugins": _cmd("dpkg-query", "-W", "-f", "${Version}",
                                            "containernetworking-plugins"),
    }


def _cell(s: dict[str, Any], unit: str) -> str:
    return f"{s['median']:.1f} {unit} ({s['p90']:.1f})"


#: how figure 4's batch began, by ``config["spawn"]`` (records before it have none: serial)
BATCHES = {
    "gated": "every exec started and held at a gate, then all let go at once; its wall from "
             "the gate's opening to the last exit",
    "serial": "each exec let go as the driver started it, one after the other; its wall from "
              "the first start to the last exit, the driver's spawning included",
}


def _batches(record: dict[str, Any]) -> str:
    cc = record.get("measurer")
    timed = f" Each exec timed by bench/measure-exec.c built with {cc}." \
        if isinstance(cc, str) else ""
    if "s4" not in record.get("scenarios", {}):
        return timed
    config = record.get("config", {})
    way = config.get("spawn", "serial")
    after = "; the driver collected none of them until the last had exited" \
        if way == "gated" and config.get("collect") == "after" else ""
    return f"{timed} Figure 4's batches: {BATCHES.get(way, way)}{after}."


def markdown(record: dict[str, Any]) -> str:
    m, v = record["machine"], record["versions"]
    rounds = ", ".join(f"{SCENARIO_FIGURE.get(k, k)} x{s['rounds']}"
                       for k, s in record["scenarios"].items())
    lines = [
        f"rdma-cni {v['rdma_cni'].split()[1]} ({v['git']}) vs Go macvlan+host-local "
        f"{v['containernetworking_plugins']}; {m['nproc']} x {m['cpu_model']}, "
        f"{m['uname'].split()[2]}; {m['date']}; load average {m['loadavg_at_start'][:1]} at "
        f"start, {m['loadavg_at_end'][:1]} at end. Rounds (fresh pods each): {rounds}; "
        f"cells: median (p90).{_batches(record)}",
        "",
        "| # | figure | path | rdma-cni median (p90) | Go median (p90) | ratio | CPU ms "
        "rdma-cni / Go | goal | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in record["figures"]:
        lines.append(_line(r))
    daemon = record.get("resident_daemon")
    if daemon:
        lines += ["", f"Resident process memory, its {daemon.get('workers', 1)} processes "
                      f"summed: RSS at the end {daemon.get('VmRSS', 0) / MIB:.1f} MiB "
                      f"(peaks summed {daemon.get('VmHWM', 0) / MIB:.1f} MiB; proportional "
                      f"set size {daemon.get('Pss', 0) / MIB:.1f} MiB; the largest process "
                      f"{daemon.get('VmRSS_max', 0) / MIB:.1f} MiB)."]
    lines += _floor_line(record.get("floor"))
    return "\n".join(lines) + "\n"


def _line(r: dict[str, Any]) -> str:
    goal = "" if r["goal"] is None else (
        f"<= {r['goal']:g} {r['unit']}" if r["goal_kind"] == "absolute"
        else f"<= {r['goal']:g}x")
    met = "" if "met" not in r else ("yes" if r["met"] else "**no**")
    title = r["title"]
    if "duplicates" in r:
        title += f"; duplicate addresses: {r['duplicates']['rdma_cni']}"
    if "floor_ms" in r:
        title += f"; kernel's floor {r['floor_ms']:.1f} ms: {r['floor_ratio']:.1f}x"
    cpu = r.get("cpu_ms")
    cpu_cell = f"{cpu['rdma_cni']:.1f} / {cpu['go']:.1f}" if cpu else ""
    go = _cell(r["go"], r["unit"]) if r["go"] else ""
    if go and "reference" in r:
        go = f"rdma-cni, {r['reference']}: {go}"
    ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else ""
    return (f"| {r['id']} | {title} | {PATH_LABEL.get(r['path'], r['path'])} | "
            f"{_cell(r['rdma_cni'], r['unit'])} | {go} | {ratio} | {cpu_cell} | {goal} | "
            f"{met} |")


def _floor_line(fl: dict[str, Any] | None) -> list[str]:
    if not fl:
        return []
    true, glibc = fl.get("static_true"), fl.get("static_true_glibc")
    t = f"exec of a static C `true` built as the front is (musl) {true['wall_ms']:.2f} ms " \
        f"wall ({true['cpu_ms']:.2f} ms CPU)" if true else "no musl-gcc for a static `true`"
    if glibc:
        t += f", against glibc {glibc['wall_ms']:.2f} ms wall ({glibc['cpu_ms']:.2f} ms CPU)"
    cmd = fl.get("add_del")
    kernel = "" if not cmd else (
        f"; the kernel's floor of figure 2's ADD ({cmd['add_requests']} netlink requests, "
        # runs before the settings went through netlink wrote them under /proc/sys
        f"{'4 sysctl writes, ' if cmd['add_requests'] == 15 else ''}"
        f"the store's records written and put in place as `serve` does, "
        f"no exec) {cmd['add_ms']:.2f} ms and of figure 2b's DEL ({cmd['del_requests']} "
        f"requests, the records removed) {cmd['del_ms']:.2f} ms, medians of {cmd['n']} "
        "(bench/floor.py)")
    made = fl.get("file_create")
    create = f"; a new file in the run's temp dir, where both sides' stores are, " \
        f"{made['create_us']:.0f} us" if made else ""
    return ["", f"Physical floor on this machine, same run: {t}; one netlink round trip "
                f"(RTM_GETLINK) {fl['netlink']['rtt_ms'] * 1e3:.0f} us{create}{kernel}."
                + _other_floors(fl) + _busy_floor(fl.get("add_del_busy"), cmd)]


def _other_floors(fl: dict[str, Any]) -> str:
    """Figures 1, 3 and 4's floors of their commands, and how a figure's floor is made."""
    out = []
    many, passing, batch = fl.get("add_del_many"), fl.get("pass_through"), fl.get("batch")
    if many:
        out.append(f"of figure 1's ADD of {many['interfaces']} interfaces "
                   f"({many['add_requests']} requests) {many['add_ms']:.2f} ms and its DEL "
                   f"({many['del_requests']} requests, the links deleted as one group) "
                   f"{many['del_ms']:.2f} ms, medians of {many['n']}")
    if passing:
        out.append(f"of figure 3's pass-through ADD (the operation's count and a log line, "
                   f"no request) {passing['add_ms'] * 1e3:.0f} us")
    if batch:
        execs = "each after an exec of the static `true`, " if batch["with_exec"] else ""
        out.append(f"of figure 4's {batch['pods']} ADDs at once (one process each, "
                   f"{execs}let go at a gate) {batch['add_ms']:.2f} ms and of their DELs at "
                   f"once {batch['del_ms']:.2f} ms, medians of {batch['n']} batches "
                   "(bench/floor_batch.py)")
    if not out:
        return ""
    return (" The kernel's floor " + "; ".join(out) + ". Beside each figure: its command's "
            "floor plus one exec of the static `true` per exec the figure makes.")


def _busy_floor(busy: dict[str, Any] | None, none: dict[str, Any] | None) -> str:
    """Figure 7's floor: figure 2's floor ADD made with the attachments of figure 7 on
    the node, against the same with none (the run's own floor, made after they went)."""
    if not busy or not none:
        return ""
    return (f" With figure 7's {busy['attachments']} attachments on the node, the same floor "
            f"ADD took {busy['add_ms']:.2f} ms ({busy['add_ms'] / none['add_ms']:.2f}x the "
            f"floor without them) and its DEL {busy['del_ms']:.2f} ms, medians of {busy['n']}.")


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
