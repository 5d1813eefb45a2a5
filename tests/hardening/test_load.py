"""Concurrency and load (shared-multi, natively, one stand-in NIC), through the installed
plugin on both of its paths: in-process (the front execs the bundle) and forwarded to
``rdma-cni serve`` (the image's bundle, its default workers, in the node netns; every
request must reach it):

- many pods ADD and DEL concurrently for several rounds: zero duplicate addresses
  (read from the pods with ``ip -j``), zero leaks, a consistent store after every
  round (each reservation has its state, each state has its links);
- range exhaustion: exactly as many ADDs succeed as there are free addresses, the
  rest get 102 and leave nothing;
- ADD racing GC: GC listing the in-flight pods never loses a live attachment.

The always-run variant is small; the full 64 pods x 10 rounds is ``sized`` (run it
with RDMA_CNI_SLOW=1).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from cnirunner import rdma_blocks, snapshot
from harness import bump, pod_ipv4, pod_link_exists, put, store_problems
from support.resident import Serve

pytestmark = pytest.mark.root
SUITE = "concurrency"
T = TypeVar("T")


def _parallel(fn: Callable[[int], T], n: int) -> list[T]:
    with ThreadPoolExecutor(max_workers=n) as ex:
        return list(ex.map(fn, range(n)))


def _chain(rig, cidr: str, gw: str, version: str = "0.4.0", **extra: Any):
    rig.nic("rnic0", cidr, gw)
    rig.chains.append(rig.chain("shared-multi", ["rnic0"], binary=rig.binary,
                                cni_version=version, residentSocket=rig.socket,
                                metricsFile=str(rig.tmp / "metrics"), **extra))
    return rig.chains[-1]


def _pods(rig, n: int) -> list:
    return [rig.pod(eth0=None) for _ in range(n)]


def _bump(rig, name: str, amount: float = 1) -> None:
    """A figure of the path the rig's plugin takes (in-process or serve)."""
    bump(SUITE, f"{name} [{rig.path}]", amount)


def _only_lo(pods: Sequence) -> list[str]:
    return [p.name for p in pods if sorted(p.links()) != ["lo"]]


def _rounds(rig, n_pods: int, n_rounds: int) -> None:
    chain = _chain(rig, "198.51.100.1/24", "198.51.100.254")
    pods = _pods(rig, n_pods)
    want = {i: 1 + i % 2 for i in range(n_pods)}
    started = time.monotonic()
    for rnd in range(n_rounds):
        cids = [f"r{rnd}c{i}" for i in range(n_pods)]
        runs = _parallel(lambda i, cids=cids: chain.add(cids[i], pods[i].path,  # type: ignore[misc]
                                                        rdma_blocks(want[i]), pod=f"p{i}"),
                         n_pods)
        failed = [(i, r.out) for i, r in enumerate(runs) if r.rc != 0]
        assert failed == [], f"round {rnd}: failed ADDs {failed[:3]}"
        addrs = [a for p in pods for _, a in pod_ipv4(p.name)]
        dupes = [a for a, c in Counter(addrs).items() if c > 1]
        _bump(rig, "duplicates", len(dupes))
        assert dupes == [], f"round {rnd}: duplicate addresses {dupes}"
        assert len(addrs) == sum(want.values())
        problems = store_problems(rig.data_dir, pod_link_exists)
        assert problems == [], problems
        runs = _parallel(lambda i, cids=cids: chain.delete(cids[i]), n_pods)  # type: ignore[misc]
        assert [r.out for r in runs if r.rc != 0] == []
        leaks = _only_lo(pods) + rig.files() + (["node"] if rig.node_changes() else [])
        _bump(rig, "leaks", len(leaks))
        assert leaks == [], f"round {rnd}: leaked {leaks[:5]}"
        _bump(rig, "rounds")
        _bump(rig, "pod ADD+DEL", n_pods)
        _bump(rig, "addresses assigned", len(addrs))
    put(SUITE, f"{n_pods}x{n_rounds} seconds [{rig.path}]", time.monotonic() - started)


@pytest.fixture(params=["in-process", "serve"])
def lrig(rig, installed_plugin: list[str], built_binary: list[str],
         tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """The rig running the installed plugin, on the path of the parameter; through serve,
    the server must have served every request of the test and every answer must have
    been taken (a caller that gave up waiting runs the request in-process)."""
    rig.binary, rig.socket, rig.path, rig.chains = installed_plugin, "", request.param, []
    serve: Serve | None = None
    if request.param == "serve":
        side = tmp_path_factory.mktemp("serve")  # a short path: a socket's is at most 107 bytes
        serve = Serve(rig.node.ns, side / "r.sock", side / "serve.log", argv=built_binary)
        rig.socket = str(serve.sock)
    try:
        yield rig
        if serve is not None:
            assert serve.proc.poll() is None, "serve died during the test"
            sent = Counter(cmd for chain in rig.chains for cmd in chain.ran)
            served = {cmd: serve.served(cmd) for cmd in sent}
            assert served == dict(sent), f"sent {dict(sent)}, served {served}"
            lost = [line for line in serve.log.read_text().splitlines()
                    if "resident request failed" in line]  # the caller had gone
            assert lost == [], f"{len(lost)} answers were not taken: {lost[:3]}"
            bump(SUITE, "requests answered by serve", sum(served.values()))
    finally:
        if serve is not None:
            serve.stop()


def test_concurrent_rounds_small(lrig) -> None:
    _rounds(lrig, int(os.environ.get("RDMA_CNI_LOAD_PODS", "16")),
            int(os.environ.get("RDMA_CNI_LOAD_ROUNDS", "3")))


@pytest.mark.slow
@pytest.mark.sized
def test_concurrent_rounds_64x10(lrig) -> None:
    _rounds(lrig, 64, 10)


def test_range_exhaustion(lrig) -> None:
    """/28 with the host on .1 and the gateway on .14: .2-.13 = 12 free addresses."""
    chain = _chain(lrig, "198.51.100.1/28", "198.51.100.14")
    n = 20
    pods = _pods(lrig, n)
    runs = _parallel(lambda i: chain.add(f"x{i}", pods[i].path, rdma_blocks(1)), n)
    ok = [i for i, r in enumerate(runs) if r.rc == 0]
    codes = Counter(r.code for r in runs if r.rc != 0)
    assert len(ok) == 12 and codes == {102: 8}, (ok, codes)
    losers = [pods[i] for i in range(n) if i not in ok]
    assert _only_lo(losers) == []
    addrs = [a for p in pods for _, a in pod_ipv4(p.name)]
    assert len(set(addrs)) == 12 == len(addrs)
    assert store_problems(lrig.data_dir, pod_link_exists) == []
    assert len(list((lrig.data_dir / "state").glob("*.json"))) == 12
    runs = _parallel(lambda i: chain.delete(f"x{i}", pods[i].path,
                                            blocks=rdma_blocks(1)), n)
    assert all(r.rc == 0 for r in runs)
    assert _only_lo(pods) == []
    _bump(lrig, "exhaustion ADDs", n)
    _bump(lrig, "exhaustion 102s", codes[102])


def test_add_racing_gc(lrig) -> None:
    chain = _chain(lrig, "198.51.100.1/24", "198.51.100.254", version="1.1.0")
    n_live, n_stale = 16, 4
    pods = _pods(lrig, n_live + n_stale)
    for j in range(n_stale):
        assert chain.add(f"stale{j}", pods[n_live + j].path, rdma_blocks(1)).rc == 0
    live = [(f"live{i}", "eth0") for i in range(n_live)]
    stop, gcs, gc_fail = threading.Event(), [0], []

    def gc_loop() -> None:
        while not stop.is_set():
            run = chain.gc(live)
            gcs[0] += 1
            if run.rc != 0:
                gc_fail.append(run.out)

    thread = threading.Thread(target=gc_loop)
    thread.start()
    try:
        runs = _parallel(lambda i: chain.add(f"live{i}", pods[i].path, rdma_blocks(2)), n_live)
    finally:
        stop.set()
        thread.join()
    assert chain.gc(live).rc == 0
    assert gc_fail == [] and [r.out for r in runs if r.rc != 0] == []
    for i in range(n_live):
        assert chain.check(f"live{i}").rc == 0, f"live{i} lost"
        assert len(pod_ipv4(pods[i].name)) == 2
    assert _only_lo(pods[n_live:]) == [], "stale attachments survived GC"
    _bump(lrig, "GC runs racing ADD", gcs[0] + 1)
    _bump(lrig, "live attachments lost", 0)
    for i in range(n_live):
        assert chain.delete(f"live{i}").rc == 0
    for j in range(n_stale):
        chain.cache.pop((f"stale{j}", "eth0"), None)
    assert _only_lo(pods) == [] and snapshot(lrig.node.ns) == lrig.baseline
