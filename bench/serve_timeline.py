#!/usr/bin/env python3
"""Where `rdma-cni serve`'s time goes per request, seen from inside it: one-interface
ADDs and DELs through the built front (figure 2's shape), or ``--at-once N`` pods
ADDed and DELeted at once (figure 4's), with ``serve`` run from this source tree with
timers around its request path.

    sudo .venv/bin/python bench/serve_timeline.py [--rounds 40] [--at-once 32]
                                                  [--interfaces 0] [--workers 2] [--json FILE]

Per request (medians, ADD and DEL apart): the intake's latency (connection accepted to
the request's thread starting), the request thread's wall and CPU and how long it
waited runnable for a CPU (/proc/thread-self/schedstat), the answer's (the request up
to its reply, what the caller waits for; the thread goes on with what
``serve`` does after it), the dispatcher's, the view check's, the frame's decoding, the
choice of the request's log file, each store lock: the wait for it and
how long it was held, by the function that took it, and (one pod at a time) the CPU of
the intake loops' rounds the request caused, every process's and that of the process
that took it. With ``--at-once``, also per round:
the wall of the whole batch, each process's request CPU against that wall (how much of
its one interpreter it used), the intake loops' CPU per request, the share of the wall
the store lock was held, and the
share of the CPUs' time they idled (their ``cpuidle`` states' time, where the kernel
shows it).

``serve`` here is the source tree on this interpreter, not the bundle `bench/run.py`
measures (timers cannot be put into the frozen one), with the same workers; the front is
``dist/rdma-cni-host/rdma-cni-front`` (``./scripts/build.sh``). The timers cost a few
microseconds per call. Everything made here is deleted at the end.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import cni  # noqa: E402
import lab  # noqa: E402
import resident  # noqa: E402
from sides import RdmaCni, rdma_blocks  # noqa: E402

from rdma_cni.resident.workers import default_count  # noqa: E402

FRONT = HERE.parent / "dist" / "rdma-cni-host" / "rdma-cni-front"

#: run as `rdma-cni serve` would be: the timers, then serve's own main. Each process
#: writes its requests to ``$TIMELINE_OUT.<pid>`` when it is told to stop.
SERVE = r"""
import json, os, sys, threading, time
sys.path.insert(0, os.environ["TIMELINE_REPO"])
from rdma_cni.cni import dispatch
from rdma_cni.resident import intake, main, protocol, requestlog, server, view
from rdma_cni.store import lock

now, cpu = time.perf_counter_ns, time.thread_time_ns
done, accepted, local = [], {}, threading.local()
steps = []  # each round of a process's intake loop: (pid, its end, its thread's CPU)


def timed(owner, name, field):
    inner = getattr(owner, name)

    def wrapper(*a, **k):
        rec = getattr(local, "rec", None)
        w0, c0 = now(), cpu()
        try:
            return inner(*a, **k)
        finally:
            if rec is not None:
                rec[field] = rec.get(field, 0) + now() - w0
                rec[field + "_cpu"] = rec.get(field + "_cpu", 0) + cpu() - c0
    setattr(owner, name, wrapper)


def taker():
    f, names = sys._getframe(2), []
    while f is not None and len(names) < 2:
        if f.f_code.co_filename.find("contextlib") < 0 and f.f_code.co_name not in (
                "lock", "__enter__", "acquire", "entered", "wrapper"):
            names.append(f.f_code.co_name)
        f = f.f_back
    return "/".join(names)


step = intake.Intake.step
def _step(self, *a, **k):
    c0 = cpu()
    try:
        return step(self, *a, **k)
    finally:
        steps.append((os.getpid(), now(), cpu() - c0))
intake.Intake.step = _step

admit = intake.Intake._admit
def _admit(self, conn):
    accepted[conn.fileno()] = now()
    return admit(self, conn)
intake.Intake._admit = _admit

decode = protocol.decode_request
def _decode(data):
    env, stdin = decode(data)
    local.rec["cmd"] = env.get("CNI_COMMAND", "")
    return env, stdin
protocol.decode_request = _decode

def runqueue_ns():  # how long this thread has waited runnable for a CPU (schedstat)
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0

handle_in = server.Server._handle_in
def _handle_in(self, conn, data, fds):
    rec = local.rec = {"pid": os.getpid(), "accepted": accepted.pop(conn.fileno(), 0),
                       "start": now(), "locks": []}
    c0, q0 = cpu(), runqueue_ns()
    try:
        return handle_in(self, conn, data, fds)
    finally:
        rec["end"], rec["cpu"], rec["runqueue"] = now(), cpu() - c0, runqueue_ns() - q0
        local.rec = None
        done.append(rec)
server.Server._handle_in = _handle_in

timed(dispatch, "run", "dispatch")
timed(view, "mismatch", "view")
timed(protocol, "decode_request", "decode")
timed(server.Server, "_answer", "answer")
timed(requestlog.RequestLog, "_target", "log routing")

enter, leave = lock.FileLock.__enter__, lock.FileLock.__exit__
def _enter(self):
    w0 = now()
    got = enter(self)
    self._timeline = (taker(), w0, now())
    return got
def _leave(self, *exc):
    rec = getattr(local, "rec", None)
    site, w0, held = self._timeline
    if rec is not None:
        rec["locks"].append((site, held - w0, now() - held))
    return leave(self, *exc)
lock.FileLock.__enter__, lock.FileLock.__exit__ = _enter, _leave

stop = server.Server.stop
def _stop(self):
    with open(f"{os.environ['TIMELINE_OUT']}.{os.getpid()}", "w") as f:
        json.dump({"requests": done, "steps": steps}, f)
    stop(self)
server.Server.stop = _stop
# run as `<bundle> serve ...` is: the subcommand dropped, the workers chosen here
sys.exit(main.main([*sys.argv[2:], "--workers", os.environ["TIMELINE_WORKERS"]]))
"""


def start_serve(tmp: str, workers: int) -> resident.Daemon:
    """The instrumented ``serve`` (a script of :data:`SERVE` that runs as the bundle would
    be run) started and ended as `bench/run.py` does its own."""
    script = os.path.join(tmp, "serve-timeline")
    with open(script, "w") as f:
        f.write(f"#!{sys.executable}\n{SERVE}")
    os.chmod(script, 0o700)
    os.environ.update(TIMELINE_OUT=os.path.join(tmp, "timeline"),
                      TIMELINE_REPO=str(HERE.parent), TIMELINE_WORKERS=str(workers))
    return resident.Daemon.start(script, os.path.join(tmp, "timeline.sock"),
                                 os.path.join(tmp, "serve.log"))


def stop_serve(daemon: resident.Daemon,
               tmp: str) -> tuple[list[dict[str, Any]], list[list[float]]]:
    """Stop serve and return every process's requests and its intake loop's rounds
    (serve waits for its workers, and each wrote its file as it stopped)."""
    daemon.stop()
    records: list[dict[str, Any]] = []
    steps: list[list[float]] = []
    for name in sorted(os.listdir(tmp)):
        if name.startswith("timeline."):
            with open(os.path.join(tmp, name)) as f:
                got = json.load(f)
            records += got["requests"]
            steps += got["steps"]
    return records, steps


def us(ns: float) -> float:
    return round(ns / 1e3, 1)


def held_by(r: dict[str, Any]) -> dict[str, float]:
    """ns the store lock was held during request ``r``, by the function that took it."""
    sites: dict[str, float] = defaultdict(float)
    for site, _wait, held in r["locks"]:
        sites[site] += held
    return sites


def intake_shares(records: list[dict[str, Any]], steps: list[list[float]]) -> None:
    """One pod at a time: each request's share of the intake loops' CPU, every process's
    (``intake_cpu``) and its own process's (``intake_cpu_own``): the rounds that ended
    from its connection's acceptance up to the next request's (its acceptance, the
    arrival of its frame, the sibling woken by the same connection, the wake-up once it is
    answered). Rounds before the first request's acceptance are not counted."""
    order = sorted((r for r in records if r["accepted"]), key=lambda r: r["accepted"])
    for i, r in enumerate(order):
        until = order[i + 1]["accepted"] if i + 1 < len(order) else float("inf")
        mine = [(pid, c) for pid, end, c in steps if r["accepted"] <= end < until]
        r["intake_cpu"] = sum(c for _, c in mine)
        r["intake_cpu_own"] = sum(c for pid, c in mine if pid == r["pid"])


def per_request(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Medians (µs) of each measure, per command."""
    out: dict[str, dict[str, float]] = {}
    for cmd in ("ADD", "DEL"):
        recs = [r for r in records if r.get("cmd") == cmd]
        if not recs:
            continue
        cols: dict[str, list[float]] = defaultdict(list)
        for r in recs:
            if r["accepted"]:
                cols["intake to thread"].append(r["start"] - r["accepted"])
            cols["request wall"].append(r["end"] - r["start"])
            cols["request CPU"].append(r["cpu"])
            cols["request runnable, waiting for a CPU"].append(r.get("runqueue", 0))
            for k in ("answer", "dispatch", "view", "decode", "log routing"):
                cols[f"{k} wall"].append(r.get(k, 0))
                cols[f"{k} CPU"].append(r.get(f"{k}_cpu", 0))
            if "intake_cpu" in r:
                cols["intake CPU, every process"].append(r["intake_cpu"])
                cols["intake CPU, the process that took it"].append(r["intake_cpu_own"])
            cols["store locks"].append(len(r["locks"]))
            sites = held_by(r)
            cols["lock wait, all"].append(sum(w for _, w, _ in r["locks"]))
            cols["lock held, all"].append(sum(sites.values()))
            for site, held in sites.items():
                cols[f"lock held by {site}"].append(held)
        out[cmd] = {k: statistics.median(v) if k == "store locks" else us(statistics.median(v))
                    for k, v in cols.items()}
        out[cmd]["requests"] = len(recs)
    return out


def cpu_idle_us() -> int | None:
    """The time every CPU has spent idle (its ``cpuidle`` states' time, us); None where
    the kernel does not show it."""
    times = glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*/time")
    try:
        return sum(int(Path(t).read_text()) for t in times) if times else None
    except (OSError, ValueError):
        return None


def batches(records: list[dict[str, Any]], steps: list[list[float]],
            windows: list[tuple[str, int, int]],
            idle: list[int | None]) -> list[dict[str, Any]]:
    """Per batch (``--at-once``): its wall, each process's request CPU against it, the
    intake loops' CPU per request (their rounds that ended within the batch), the share
    of it the store lock was held (by the function that took it), and the share of the
    CPUs' time they were idle (``idle``: us of it per batch; None: not known)."""
    out = []
    for (cmd, start, end), idle_us in zip(windows, idle, strict=True):
        inside = [r for r in records if r.get("cmd") == cmd and start <= r["start"] <= end]
        intake_ns = sum(c for _, t, c in steps if start <= t <= end)
        wall = end - start
        per_pid: dict[int, float] = defaultdict(float)
        sites: dict[str, float] = defaultdict(float)
        for r in inside:
            per_pid[r["pid"]] += r["cpu"]
            for site, held in held_by(r).items():
                sites[site] += held
        out.append({"cmd": cmd, "requests": len(inside), "wall_ms": round(wall / 1e6, 1),
                    "process_cpu_share": sorted(round(c / wall, 2) for c in per_pid.values()),
                    "intake_cpu_per_request_us": us(intake_ns / max(len(inside), 1)),
                    "lock_held_share": round(sum(sites.values()) / wall, 2),
                    "cpu_idle_share": None if idle_us is None else
                    round(idle_us * 1e3 / (wall * (os.cpu_count() or 1)), 2),
                    "lock_held_share_by": {s: round(h / wall, 2) for s, h in
                                           sorted(sites.items(), key=lambda kv: -kv[1])}})
    return out


def inner(args: argparse.Namespace) -> int:
    if not os.access(args.front, os.X_OK):
        sys.exit(f"{args.front} is missing: build it with ./scripts/build.sh")
    pods_api = lab.Pods(lab.Names(args.prefix))
    serve = start_serve(args.tmp, args.workers)
    side = RdmaCni(str(args.front), os.path.join(args.tmp, "data"), lab.N_NICS,
                   socket=serve.socket)
    windows: list[tuple[str, int, int]] = []
    idle: list[int | None] = []  # per window: us the CPUs idled
    try:
        warm = pods_api.create(1)
        (inv,) = side.invocations(warm[0], rdma_blocks(args.interfaces))
        cni.run(inv, "ADD")
        cni.run(inv, "DEL")
        pods_api.delete(warm)
        for _ in range(args.rounds):
            pods = pods_api.create(args.at_once or 1)
            invs = [side.invocations(p, rdma_blocks(args.interfaces))[0] for p in pods]
            time.sleep(args.settle)
            for cmd in ("ADD", "DEL"):
                idle0, start = cpu_idle_us(), time.perf_counter_ns()
                if args.at_once:
                    cni.run_parallel(invs, cmd)
                else:
                    cni.run(invs[0], cmd)
                windows.append((cmd, start, time.perf_counter_ns()))
                idle1 = cpu_idle_us()
                idle.append(None if idle0 is None or idle1 is None else idle1 - idle0)
            pods_api.delete(pods)
    finally:
        records, steps = stop_serve(serve, args.tmp)
        pods_api.close()
    first = windows[0][1] if windows else 0
    records = [r for r in records if r["start"] >= first]  # not the warm-up's
    if not args.at_once:
        intake_shares(records, steps)
    report = {"rounds": args.rounds, "at_once": args.at_once, "workers": args.workers,
              "per_request_us": per_request(records)}
    if args.at_once:
        report["batches"] = batches(records, steps, windows, idle)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    show(report)
    return 0


def show(report: dict[str, Any]) -> None:
    shape = f"{report['at_once']} pods at once" if report["at_once"] else "one pod at a time"
    print(f"serve's request path, {shape}, {report['workers']} worker process(es), "
          f"{report['rounds']} rounds: medians per request, us")
    for cmd, cols in report["per_request_us"].items():
        print(f"{cmd} ({cols['requests']} requests)")
        for k, v in cols.items():
            if k != "requests":
                print(f"  {v:>10} {k}")
    for b in report.get("batches", []):
        print(f"batch {b['cmd']}: {b['requests']} requests in {b['wall_ms']} ms; request CPU "
              f"per process / wall {b['process_cpu_share']}; intake loops' CPU "
              f"{b['intake_cpu_per_request_us']} us per request; store lock held "
              f"{b['lock_held_share']} of the wall {b['lock_held_share_by']}; CPUs idle "
              f"{b['cpu_idle_share']} of it")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--at-once", type=int, default=0,
                   help="pods ADDed (then DELeted) at once per round (default: one pod)")
    p.add_argument("--workers", type=int, default=default_count(),
                   help=f"serve's processes (default: serve's own, {default_count()} here)")
    p.add_argument("--settle", type=float, default=0.05,
                   help="seconds after making a round's pods (not timed)")
    p.add_argument("--interfaces", type=int, default=1,
                   help="RDMA interfaces per pod (0: a pass-through ADD, figure 3's)")
    p.add_argument("--front", type=Path, default=FRONT)
    p.add_argument("--json", help="also write the report to this file")
    return lab.node_main(p, "rtl", __file__, inner)


if __name__ == "__main__":
    sys.exit(main())
