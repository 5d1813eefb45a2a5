#!/usr/bin/env python3
"""Benchmark rdma-cni (the PyInstaller build) against Go macvlan+host-local.

    sudo .venv/bin/python bench/run.py [--rounds N] [--quick] [--path inproc|resident|both]
                                       [--out bench/results/latest.json]

The host side makes the node and fabric netns, then re-executes this script once
under ``ip netns exec <node>``: the driver and every plugin it spawns run in the
node netns (with its sysfs), and plugin timings carry no ``ip netns exec``.
Everything made here is deleted at the end, on errors and on Ctrl-C. See README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

import busy
import cni
import figures
import floor
import floor_batch
import lab
import report
import resident
from cni import Invocation
from figures import Builder, Contender, Scenario
from sides import GoMacvlan, RdmaCni, leftover_state, rdma_blocks

REPO = Path(__file__).resolve().parents[1]
BINARY = REPO / "dist" / "rdma-cni" / "rdma-cni"
GO_MACVLAN = "/usr/lib/cni/macvlan"
#: share of the time budget per scenario (figure 7's includes making its busy node)
SHARE = {"s1": 0.17, "s2": 0.13, "s3": 0.07, "s4": 0.3, "s7": 0.23, "s8": 0.1}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=15, help="rounds per figure (default 15)")
    p.add_argument("--parallel-rounds", type=int, default=0,
                   help="rounds of figure 4 (default: rounds/3, at least 2)")
    p.add_argument("--pods", type=int, default=32, help="pods ADDed at once in figure 4")
    p.add_argument("--spawn", choices=("gated", "serial"), default="gated",
                   help="figure 4's batch: every exec started and held, then let go at once "
                        "(gated, the default), or each let go as the driver starts it, one "
                        "after the other (serial, the way of runs before 2026-12-06)")
    p.add_argument("--attachments", type=int, default=512,
                   help="attachments on the node in figure 7 (default 512, 64 with --quick)")
    p.add_argument("--flood-idle", type=int, default=200,
                   help="idle connections held open to the server in figure 8 (default 200)")
    p.add_argument("--flood-slow", type=int, default=200,
                   help="slow connections held open to the server in figure 8 (default 200)")
    p.add_argument("--quick", action="store_true",
                   help="about 45 s: 4 rounds, 1 round of figure 4 with 8 pods, 64 "
                        "attachments in figure 7")
    p.add_argument("--budget", type=float, default=0,
                   help="seconds for the whole run (default 250, 40 with --quick): a figure "
                        "past its share stops after its minimum rounds (3; 1 for figure 4)")
    p.add_argument("--path", choices=("inproc", "resident", "both"), default=None,
                   help="rdma-cni in-process, forwarded to `rdma-cni serve`, or both "
                        "(default: both when the binary has `serve`)")
    p.add_argument("--cycles", type=int, default=1000,
                   help="ADD/DEL cycles through the resident process for its memory figure "
                        "(default 1000, 100 with --quick; 0 skips it)")
    p.add_argument("--only", default="",
                   help="comma-separated scenarios: s1,s2,s3,s4,s7,s8")
    p.add_argument("--binary", default=str(BINARY),
                   help="the bundle's executable (the bundle is copied before the run)")
    p.add_argument("--disk-rest", type=float, default=2.0,
                   help="figure 7: seconds to wait after a sync before each half (0: none)")
    p.add_argument("--settle", type=float, default=0.1,
                   help="seconds to wait after making a round's pods (not timed)")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "latest.json"))
    p.add_argument("--binary-origin", default="", help=argparse.SUPPRESS)
    p.add_argument("--inner-prefix", help=argparse.SUPPRESS)
    p.add_argument("--inner-tmp", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.parallel_rounds = min(args.rounds, 4), 1
        args.pods = 8 if "--pods" not in argv else args.pods
        args.cycles = 100 if "--cycles" not in argv else args.cycles
        args.attachments = 64 if "--attachments" not in argv else args.attachments
        args.disk_rest = 0.0 if "--disk-rest" not in argv else args.disk_rest
    args.budget = args.budget or (40.0 if args.quick else 250.0)
    args.parallel_rounds = args.parallel_rounds or max(2, args.rounds // 3)
    return args


def _interrupt(signum: int, _frame: Any) -> NoReturn:
    raise KeyboardInterrupt(f"signal {signum}")


def preflight(args: argparse.Namespace) -> None:
    if os.geteuid() != 0:
        sys.exit("bench/run.py needs root (network namespaces): run it with sudo")
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"{args.binary} is missing: build it with ./scripts/build.sh")
    if not os.access(GO_MACVLAN, os.X_OK):
        sys.exit(f"{GO_MACVLAN} is missing: apt-get install containernetworking-plugins")
    stale = [p for p in (REPO / "rdma_cni").rglob("*.py")
             if p.stat().st_mtime > os.path.getmtime(args.binary)]
    if stale and args.binary == str(BINARY):
        sys.stderr.write(f"warning: {len(stale)} source files are newer than {args.binary} "
                         f"(e.g. {stale[0].relative_to(REPO)}): run ./scripts/build.sh\n")


def install_bundle(binary: str, tmp: str) -> str:
    """Lay the host plugin (the ``-host`` tree beside the bundle of ``binary``) out in a
    temp CNI bin dir with ``install``'s own functions (``<bin>/rdma-cni`` ->
    ``rdma-cni.versions/<version>-<digest>/rdma-cni-front``, the plugin and its own C library
    beside it), so the run measures the plugin as a node runs it and a rebuild of dist/
    cannot touch it."""
    sys.path.insert(0, str(REPO))
    from rdma_cni.tools import bundle

    bin_dir = os.path.join(tmp, "bin")
    os.makedirs(bin_dir)
    tree = bundle.default_host_tree(os.path.dirname(os.path.abspath(binary)))
    name, _ = bundle.install_tree(tree, bin_dir)
    bundle.switch_link(bin_dir, name)
    return os.path.join(bin_dir, "rdma-cni")


def direct_plugin(plugin: str) -> str:
    """The installed tree's plugin exec'd straight on the host's C library, without the
    front and the tree's own loader: not what ships (it needs the host's glibc to be as
    new as the build's), the reference that shows what the loader costs (figure 6l)."""
    return os.path.join(os.path.dirname(os.path.realpath(plugin)), "rdma-cni")


def bundle_of(args: argparse.Namespace) -> str:
    """What `serve` runs: the image's bundle (a DaemonSet container runs it, not the host)."""
    return args.binary_origin or args.binary


def host_main(args: argparse.Namespace, argv: list[str]) -> int:
    """Host side: make the node, run the driver inside it, delete everything."""
    preflight(args)
    names = lab.Names(f"rcb{os.getpid() % 100000}")
    tmp = tempfile.mkdtemp(prefix="rdma-cni-bench.")
    signal.signal(signal.SIGTERM, _interrupt)
    inner: subprocess.Popen[bytes] | None = None
    try:
        binary = install_bundle(args.binary, tmp)
        lab.make_node(names)
        inner = subprocess.Popen(["ip", "netns", "exec", names.node, sys.executable,
                                  os.path.abspath(__file__), *argv, "--binary", binary,
                                  "--binary-origin", args.binary,
                                  "--inner-prefix", names.prefix, "--inner-tmp", tmp])
        return inner.wait()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted: cleaning up\n")
        return 130
    finally:
        if inner is not None and inner.poll() is None:
            inner.send_signal(signal.SIGTERM)  # it cleans up its pods and daemon
            try:
                inner.wait(timeout=60)
            except subprocess.TimeoutExpired:
                inner.kill()
                inner.wait()
        lab.destroy(names)
        shutil.rmtree(tmp, ignore_errors=True)


def _rdma_builder(side: RdmaCni, blocks: list[dict[str, Any]], ours: int) -> Builder:
    def build(pod: lab.Pod) -> tuple[list[Invocation], int]:
        return side.invocations(pod, blocks), ours
    return build


def _go_builder(side: GoMacvlan, n_ifaces: int) -> Builder:
    def build(pod: lab.Pod) -> tuple[list[Invocation], int]:
        return side.invocations(pod, n_ifaces), n_ifaces
    return build


def contenders(args: argparse.Namespace, paths: list[str], tmp: str, key: str,
               n_nics: int, blocks: int, ours: int,
               daemon: resident.Daemon | None) -> list[Contender]:
    """rdma-cni per path and the Go reference, in the order they alternate (A B A)."""
    out: list[Contender] = []
    blist = rdma_blocks(ours) + rdma_blocks(blocks - ours, name="other-net")
    for path in paths + (["direct"] if key == "s2" and "inproc" in paths else []):
        helper = daemon if path == "resident" else None
        side = RdmaCni(direct_plugin(args.binary) if path == "direct" else args.binary,
                       os.path.join(tmp, key, path), n_nics,
                       socket=helper.socket if helper else "")
        out.append(Contender(path, f"rdma-cni ({path})", _rdma_builder(side, blist, ours),
                             side.data_dir, helper.cpu_s if helper else None))
        if len(out) == 1:
            go = GoMacvlan(os.path.join(tmp, key, "go"), n_nics)
            out.append(Contender("go", "Go macvlan+host-local", _go_builder(go, blocks),
                                 go.data_dir))
    return out


def scenarios(args: argparse.Namespace, paths: list[str], tmp: str,
              daemon: resident.Daemon | None) -> list[Scenario]:
    def cs(key: str, n_nics: int, blocks: int, ours: int | None = None) -> list[Contender]:
        return contenders(args, paths, tmp, key, n_nics, blocks,
                          blocks if ours is None else ours, daemon)

    every = [
        Scenario("s1", "8 RDMA interfaces per pod, ADD+DEL", cs("s1", 8, 8), args.rounds),
        Scenario("s2", "1 interface, ADD", cs("s2", 1, 1), args.rounds),
        Scenario("s3", "pass-through ADD", cs("s3", 1, 1, ours=0), args.rounds),
        Scenario("s4", f"{args.pods} pods ADD at once", cs("s4", 1, 1), args.parallel_rounds,
                 parallel=args.pods, warmup=0, min_rounds=1),
    ]
    shares = budgets(args)
    chosen = [s for s in every if s.key in shares]
    for s in chosen:
        s.budget_s = shares[s.key]
    return chosen


def budgets(args: argparse.Namespace) -> dict[str, float]:
    """Seconds of ``--budget`` per chosen scenario (``--only``; all by default)."""
    only = {s for s in args.only.split(",") if s}
    chosen = [k for k in SHARE if not only or k in only]
    total = sum(SHARE[k] for k in chosen)
    return {k: args.budget * SHARE[k] / total for k in chosen}


def busy_figure(args: argparse.Namespace, paths: list[str], tmp: str,
                daemon: resident.Daemon | None, pods: lab.Pods,
                budget: float) -> tuple[dict[str, Scenario], dict[str, Any]]:
    """Figure 7: one-interface ADDs on a node with no other attachment, then on the same
    node with ``--attachments`` made through the plugin (bench/busy.py), in one data dir."""
    data = os.path.join(tmp, "s7")
    cs = []
    for path in paths:
        helper = daemon if path == "resident" else None
        side = RdmaCni(args.binary, data, lab.N_NICS, socket=helper.socket if helper else "")
        cs.append(Contender(path, f"rdma-cni ({path})", _rdma_builder(side, rdma_blocks(1), 1),
                            data, helper.cpu_s if helper else None))
    start = time.monotonic()
    base = Scenario("s7-0", "1 interface, ADD, no other attachment", cs, args.rounds,
                    budget_s=budget / 4)
    _disk_at_rest(args.disk_rest)
    figures.run(base, pods, args.settle, lab.N_NICS)
    n = args.attachments
    made = busy.make(args.binary, daemon.socket if daemon else "", data, pods, n, lab.N_NICS)
    _disk_at_rest(args.disk_rest)
    loaded = Scenario("s7", f"1 interface, ADD, {n} attachments on the node", cs, args.rounds,
                      load=n, state_check=False,
                      budget_s=max(budget - (time.monotonic() - start), 0.0))
    try:
        figures.run(loaded, pods, args.settle, lab.N_NICS)
        # the kernel's floor of the same ADD with the attachments still on the node
        busy_floor = floor.add_del_floor(tmp, pods, args.rounds)
    finally:
        busy.remove(made, pods, data)
    return {"s7-0": base, "s7": loaded}, {"attachments": n, "setup_s": round(made.setup_s, 1),
                                          "teardown_s": round(made.teardown_s, 1),
                                          "floor": busy_floor}


def _disk_at_rest(pause: float) -> None:
    """Before each half of figure 7: what was written so far (the attachments' ~1,500
    new files) written back, then ``pause`` seconds, so that both halves measure a node
    whose attachments exist, not one still writing them back (bench/README, figure 7)."""
    if pause > 0:
        os.sync()
        time.sleep(pause)


def flood_figure(args: argparse.Namespace, tmp: str, daemon: resident.Daemon,
                 pods: lab.Pods, budget: float) -> tuple[dict[str, Scenario], dict[str, Any]]:
    """Figure 8: bench/flood.py's measurement (quiet and flooded blocks of one-interface
    ADDs through the front) on this run's `serve`; every ADD must be answered by it."""
    import flood  # here: flood.py imports this module's host-side helpers

    side = RdmaCni(args.binary, os.path.join(tmp, "s8"), lab.N_NICS, socket=daemon.socket)
    load = args.flood_idle + args.flood_slow
    sys.stderr.write(f"s8: 1 interface, ADD, quiet and with {load} connections held open ")
    start, before = time.monotonic(), flood.served_adds(daemon.log_file)
    samples, held = flood.measure(side, pods, daemon.socket, args.rounds, args.flood_idle,
                                  args.flood_slow, budget)
    adds = 1 + len(samples["quiet"]) + len(samples["flood"])
    served = flood.served_adds(daemon.log_file) - before
    sys.stderr.write(f"{time.monotonic() - start:.1f}s\n")
    if served != adds:
        raise RuntimeError(f"s8: serve answered {served} of the {adds} ADDs (the others ran "
                           "in-process)")
    left = leftover_state(side.data_dir)
    if left:
        raise RuntimeError(f"s8: state left after DEL: {left}")
    out = {}
    for key, kind, title, n in (("s8-0", "quiet", "1 interface, ADD, quiet", 0),
                                ("s8", "flood", f"1 interface, ADD, {load} connections held "
                                 "open", load)):
        sc = Scenario(key, title, [], len(samples[kind]), load=n)
        sc.samples, sc.done_rounds = {"resident": {"add_ms": samples[kind]}}, len(samples[kind])
        out[key] = sc
    return out, {"idle": args.flood_idle, "slow": args.flood_slow, "held_open": held,
                 "served": served, "adds": adds}


def driver_main(args: argparse.Namespace) -> int:
    """Inside the node netns: measure, write the record, print the table."""
    signal.signal(signal.SIGTERM, _interrupt)
    names, tmp = lab.Names(args.inner_prefix), args.inner_tmp
    has_serve = resident.supported(bundle_of(args))
    path = args.path or ("both" if has_serve else "inproc")
    paths = ["inproc", "resident"] if path == "both" else [path]
    if "resident" in paths and not has_serve:
        sys.exit(f"{args.binary} has no `serve` subcommand: use --path inproc")
    pods = lab.Pods(names)
    measurer = cni.use_measurer(tmp)
    cni.SPAWN = args.spawn if measurer is not None else "serial"
    load = os.getloadavg()
    daemon: resident.Daemon | None = None
    try:
        if "resident" in paths:
            daemon = resident.Daemon.start(bundle_of(args),
                                           os.path.join(tmp, "rdma-cni.sock"),
                                           os.path.join(tmp, "serve.log"))
        done = {s.key: figures.run(s, pods, args.settle, lab.N_NICS)
                for s in scenarios(args, paths, tmp, daemon)}
        shares, extra = budgets(args), {}
        if "s7" in shares:
            seven, extra["busy_node"] = busy_figure(args, paths, tmp, daemon, pods,
                                                    shares["s7"])
            done.update(seven)
        if "s8" in shares and daemon is not None:
            eight, extra["flood"] = flood_figure(args, tmp, daemon, pods, shares["s8"])
            done.update(eight)
        cycles = None
        if daemon is not None and args.cycles:
            cycles = figures.cycles(_cycle_side(args, tmp, daemon), pods, daemon, args.cycles)
        record = build_record(args, paths, done, daemon, load)
        record["resident_cycles"] = cycles
        record.update(extra)
        record["floor"] = floor.measure(tmp, pods=pods, rounds=args.rounds, many=lab.N_NICS)
        if "s4" in done:
            record["floor"]["batch"] = floor_batch.batch_floor(
                tmp, pods, args.pods, args.parallel_rounds, record["floor"]["static_true_path"])
        if record.get("busy_node", {}).get("floor"):
            record["floor"]["add_del_busy"] = {**record["busy_node"]["floor"],
                                               "attachments": record["busy_node"]["attachments"]}
        record["measurer"] = cni.MEASURER_CC  # None: spawned directly
        record["figures"] += report.cycle_rows(cycles)
        report.add_floor(record["figures"], record["floor"])
        sys.stdout.write(report.write(record, args.out))
        sys.stderr.write(f"wrote {args.out}\n")
        return 0 if all(r.get("met", True) for r in record["figures"]) else 1
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted: ending plugins and the daemon, deleting the pods\n")
        return 130
    finally:
        cni.end_all()
        if daemon is not None:
            daemon.stop()
        pods.close()


def _cycle_side(args: argparse.Namespace, tmp: str, daemon: resident.Daemon) -> Builder:
    side = RdmaCni(args.binary, os.path.join(tmp, "s5", "resident"), 1, socket=daemon.socket)
    return _rdma_builder(side, rdma_blocks(1), 1)


def build_record(args: argparse.Namespace, paths: list[str], done: dict[str, Scenario],
                 daemon: resident.Daemon | None, load: tuple[float, ...]) -> dict[str, Any]:
    return {
        "machine": report.machine(load),
        "versions": report.versions(args.binary, str(REPO), args.binary_origin),
        "config": {"rounds": args.rounds, "parallel_rounds": args.parallel_rounds,
                   "budget_s": args.budget, "cycles": args.cycles,
                   "attachments": args.attachments,
                   "flood": {"idle": args.flood_idle, "slow": args.flood_slow},
                   "pods": args.pods, "paths": paths, "settle_s": args.settle,
                   "spawn": cni.SPAWN, "collect": cni.COLLECT,
                   "cni_version": "0.4.0", "mode": "shared-multi"},
        "figures": report.rows(done, [*paths, "direct"]),
        "resident_daemon": daemon.memory_kib() if daemon else None,
        "scenarios": {k: {"title": s.title, "rounds": s.done_rounds, "parallel": s.parallel,
                          "order": [c.key for c in s.contenders], "samples": s.samples,
                          "duplicates": s.duplicates} for k, s in done.items()},
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args.inner_prefix:
        return driver_main(args)
    return host_main(args, argv)


if __name__ == "__main__":
    sys.exit(main())
