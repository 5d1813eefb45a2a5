"""The measured scenarios. Every round makes fresh pod netns (not timed), runs
each contender in turn (A B A B ...), verifies the pod after ADD and after DEL,
and deletes the pods, so every ADD starts from the same state.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import cni
import lab
from cni import Invocation
from lab import Pod, Pods
from sides import leftover_state

Samples = dict[str, list[float]]
#: builds a contender's invocations for one pod; returns them and the RDMA links expected
Builder = Callable[[Pod], tuple[list[Invocation], int]]


@dataclass
class Contender:
    key: str  # "inproc" | "resident" | "go"
    label: str
    build: Builder
    data_dir: str
    #: cumulative CPU seconds of a helper process serving this contender (the resident daemon)
    helper_cpu: Callable[[], float] | None = None

    def helper_s(self) -> float:
        return self.helper_cpu() if self.helper_cpu else 0.0


@dataclass
class Scenario:
    key: str
    title: str
    contenders: list[Contender]
    rounds: int
    parallel: int = 0  # pods ADDed at once; 0 = one pod, serial execs
    warmup: int = 1
    budget_s: float = float("inf")  # past it, stop after min_rounds
    min_rounds: int = 3
    #: what the node holds besides the measured pod: attachments (figure 7), connections
    #: open to the server (figure 8); 0 = nothing
    load: int = 0
    #: check every contender's data dir is empty at the end (off while a busy node's
    #: attachments share it: their removal checks it)
    state_check: bool = True
    done_rounds: int = 0
    samples: dict[str, Samples] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)


def ms(ns: int) -> float:
    return ns / 1e6


def _expect_links(pod: Pod, n_rdma: int, when: str) -> None:
    links = pod.links()
    if len(links) != 2 + n_rdma or "eth0" not in links:
        raise RuntimeError(f"after {when}, pod {pod.name} has links {links}, "
                           f"expected lo, eth0 and {n_rdma} more")


def _serial_sample(c: Contender, pod: Pod) -> dict[str, float]:
    invs, n_rdma = c.build(pod)
    # the server's CPU is read after the check of the pod's links that follows each
    # command, so what it does once the answer is out (the exporter's count) is counted
    helper0 = c.helper_s()
    adds = [cni.run(inv, "ADD") for inv in invs]
    _expect_links(pod, n_rdma, f"{c.label} ADD")
    helper1 = c.helper_s()
    helper_add = helper1 - helper0
    dels = [cni.run(inv, "DEL") for inv in reversed(invs)]
    _expect_links(pod, 0, f"{c.label} DEL")
    helper_del = c.helper_s() - helper1
    add_ms = sum(ms(e.wall_ns) for e in adds)
    del_ms = sum(ms(e.wall_ns) for e in dels)
    return {"add_ms": add_ms, "del_ms": del_ms, "total_ms": add_ms + del_ms,
            "add_cpu_ms": sum(e.cpu_s for e in adds) * 1e3,
            "add_helper_cpu_ms": helper_add * 1e3,
            "add_total_cpu_ms": (sum(e.cpu_s for e in adds) + helper_add) * 1e3,
            "del_cpu_ms": sum(e.cpu_s for e in dels) * 1e3,
            "del_total_cpu_ms": (sum(e.cpu_s for e in dels) + helper_del) * 1e3,
            "total_cpu_ms": (sum(e.cpu_s for e in adds + dels) + helper_add + helper_del) * 1e3,
            "add_rss_kib": max(e.maxrss_kib for e in adds),
            "add_execs": len(adds)}


def _parallel_sample(c: Contender, pods: Sequence[Pod]) -> tuple[dict[str, float], int]:
    built = [c.build(p) for p in pods]
    invs = [inv for b in built for inv in b[0]]
    helper0 = c.helper_s()
    wall, adds = cni.run_parallel(invs, "ADD")
    addrs: list[str] = []
    for pod, (_, n_rdma) in zip(pods, built, strict=True):
        _expect_links(pod, n_rdma, f"{c.label} parallel ADD")
        addrs += pod.extra_addrs()
    helper_add = c.helper_s() - helper0  # as in _serial_sample: after the checks
    dups = len(addrs) - len(set(addrs))
    dwall, _ = cni.run_parallel(list(reversed(invs)), "DEL")
    left = lab.leftovers(pods)
    if left:
        raise RuntimeError(f"after {c.label} parallel DEL, pods kept links: {left}")
    return {"wall_ms": ms(wall), "del_wall_ms": ms(dwall),
            "add_cpu_ms": sum(e.cpu_s for e in adds) * 1e3,
            "add_total_cpu_ms": (sum(e.cpu_s for e in adds) + helper_add) * 1e3,
            "add_rss_kib": max(e.maxrss_kib for e in adds),
            "addresses": len(addrs)}, dups


def _record(sc: Scenario, key: str, sample: dict[str, float]) -> None:
    per = sc.samples.setdefault(key, {})
    for name, value in sample.items():
        per.setdefault(name, []).append(value)


def _round(sc: Scenario, pods_api: Pods, settle: float, keep: bool) -> None:
    per_pod = max(sc.parallel, 1)
    pods = pods_api.create(per_pod * len(sc.contenders))
    time.sleep(settle)  # let the previous round's netns teardown (async in the kernel) finish
    try:
        for i, c in enumerate(sc.contenders):
            group = pods[i * per_pod:(i + 1) * per_pod]
            if sc.parallel:
                sample, dups = _parallel_sample(c, group)
                if keep:
                    sc.duplicates[c.key] = sc.duplicates.get(c.key, 0) + dups
            else:
                sample = _serial_sample(c, group[0])
            if keep:
                _record(sc, c.key, sample)
    finally:
        pods_api.delete(pods)


def run(sc: Scenario, pods_api: Pods, settle: float, n_nics: int) -> Scenario:
    """All rounds of a scenario (warm-up rounds first, not recorded)."""
    sys.stderr.write(f"{sc.key}: {sc.title} ")
    start = time.monotonic()
    for r in range(sc.warmup + sc.rounds):
        _round(sc, pods_api, settle, keep=r >= sc.warmup)
        sys.stderr.write("." if r >= sc.warmup else "w")
        sys.stderr.flush()
        sc.done_rounds = max(r + 1 - sc.warmup, 0)
        spent = time.monotonic() - start
        if sc.done_rounds >= sc.min_rounds and spent * (r + 2) / (r + 1) > sc.budget_s:
            sys.stderr.write(f" (time budget {sc.budget_s:.0f}s reached)")
            break
    strays = lab.node_strays(n_nics)
    if strays:
        raise RuntimeError(f"{sc.key}: links left in the node netns: {strays}")
    for c in sc.contenders if sc.state_check else []:
        state = leftover_state(c.data_dir)
        if state:
            raise RuntimeError(f"{sc.key}: {c.label} left state after DEL: {state}")
    sys.stderr.write(f" {time.monotonic() - start:.1f}s\n")
    return sc


def cycles(build: Builder, pods_api: Pods, daemon: Any, n: int) -> dict[str, Any]:
    """``n`` ADD/DEL cycles of one pod through the resident process; its VmRSS after a
    warm-up, every tenth of the run and at the end (growth = a leak)."""
    sys.stderr.write(f"s5: resident memory over {n} ADD/DEL cycles ")
    start, series = time.monotonic(), []
    pod = pods_api.create(1)
    warmup = min(20, n)
    try:
        for i in range(warmup + n):
            invs, n_rdma = build(pod[0])
            for inv in invs:
                cni.run(inv, "ADD")
            _expect_links(pod[0], n_rdma, "cycle ADD")
            for inv in reversed(invs):
                cni.run(inv, "DEL")
            if i + 1 == warmup or (i + 1 - warmup) % max(n // 10, 1) == 0:
                series.append(daemon.memory_kib().get("VmRSS", 0))
                sys.stderr.write(".")
                sys.stderr.flush()
    finally:
        pods_api.delete(pod)
    mem = daemon.memory_kib()
    sys.stderr.write(f" {time.monotonic() - start:.1f}s\n")
    return {"cycles": n, "warmup": warmup, "rss_kib_series": series,
            "rss_kib_after_warmup": series[0], "rss_kib_end": mem.get("VmRSS", 0),
            "hwm_kib": mem.get("VmHWM", 0)}
