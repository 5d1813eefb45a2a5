"""Crashes at every step: SIGKILL at each step boundary of ADD (shared-multi with two
interfaces, exclusive with one), at each teardown action of DEL, and in the middle
of store writes; afterwards DEL and GC leave zero links, addresses, rules, moved
NICs, reservations or state files (the ``rig`` fixture re-checks node and data dir).

Twice: in-process (``python -m rdma_cni``, ``residentSocket: ""``), and as a node runs
it: the installed plugin (the front) forwarding to ``rdma-cni serve`` from the image's
bundle, where what dies at the step is the server (its one process, ``--workers 1``)
or one worker of two (the parent is stopped while the request is sent, so a forked
worker takes it). The front then runs the request in-process; it must still succeed,
and the next requests, through a restarted server or the surviving parent, clean up.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from cnirunner import PYTHON, REPO, rdma_blocks, sh, snapshot
from harness import bump
from support.resident import Serve

from rdma_cni.datapath.execute import steps_for
from rdma_cni.store.core import Store
from rdma_cni.testhooks import CRASH_AT_STEP, CRASH_IN_DEL
from rdma_cni.vocab.plan import IfacePlan

pytestmark = pytest.mark.root
SUITE = "crash"


def _n_steps(kind: str, n: int) -> int:
    plans = [IfacePlan(k=k, name=f"eth{k + 1}", tmp="t", nic="n", kind=kind, mtu=1500,
                       table=100 + k) for k in range(n)]
    return len(steps_for(plans))


MODES = {"shared-multi": ("macvlan", 2, ["rnic0", "rnic1"]),
         "exclusive": ("physical", 1, ["rnic0"])}
# ADD: boundary k is "before step k" (k == number of steps: after the last one)
ADD_CASES = [(m, k) for m, (kind, n, _) in MODES.items() for k in range(_n_steps(kind, n) + 1)]
# DEL: per interface: rules, link (exclusive: + host recovery); then the end of teardown
DEL_POINTS = {"shared-multi": 2 * 2 + 1, "exclusive": 3 + 1}
DEL_CASES = [(m, k) for m, n in DEL_POINTS.items() for k in range(n)]


def _setup(rig, mode: str, socket: str = ""):
    rig.nic("rnic0", "198.51.100.1/26", "198.51.100.62")
    rig.nic("rnic1", "198.51.100.65/26", None, routes=[("198.19.0.0/16", "198.51.100.126")])
    pod = rig.pod()
    chain = rig.chain(mode, MODES[mode][2], cni_version="1.1.0", residentSocket=socket,
                      metricsFile=str(rig.tmp / "metrics"))
    return chain, pod, snapshot(pod.name)


def _assert_clean(rig, pod, before) -> None:
    assert sorted(pod.links()) == ["eth0", "lo"], pod.links()
    assert snapshot(pod.name) == before
    assert rig.files() == []
    assert rig.node_changes() == {}
    assert not (rig.data_dir / "corrupt").exists() or not any((rig.data_dir / "corrupt").iterdir())


@pytest.mark.parametrize(("mode", "k"), ADD_CASES, ids=[f"{m}-k{k}" for m, k in ADD_CASES])
def test_add_killed_then_del_and_gc(rig, mode: str, k: int) -> None:
    chain, pod, before = _setup(rig, mode)
    n = MODES[mode][1]
    run = chain.add("c1", pod.path, rdma_blocks(n), env={"RDMA_CNI_TEST_CRASH_AT_STEP": str(k)})
    assert run.rc == -signal.SIGKILL, run
    bump(SUITE, "ADD kills")
    assert chain.delete("c1", blocks=rdma_blocks(n)).rc == 0
    assert chain.gc([]).rc == 0
    _assert_clean(rig, pod, before)


@pytest.mark.parametrize(("mode", "k"), ADD_CASES, ids=[f"{m}-k{k}" for m, k in ADD_CASES])
def test_add_killed_then_gc_alone(rig, mode: str, k: int) -> None:
    """No DEL ever comes (the runtime lost it): GC alone reclaims everything."""
    chain, pod, before = _setup(rig, mode)
    n = MODES[mode][1]
    run = chain.add("c1", pod.path, rdma_blocks(n), env={"RDMA_CNI_TEST_CRASH_AT_STEP": str(k)})
    assert run.rc == -signal.SIGKILL, run
    bump(SUITE, "ADD kills")
    assert chain.gc([("other", "eth0")]).rc == 0
    _assert_clean(rig, pod, before)


@pytest.mark.parametrize(("mode", "k"), DEL_CASES, ids=[f"{m}-k{k}" for m, k in DEL_CASES])
def test_del_killed_then_del(rig, mode: str, k: int) -> None:
    chain, pod, before = _setup(rig, mode)
    n = MODES[mode][1]
    assert chain.add("c1", pod.path, rdma_blocks(n)).rc == 0
    run = chain.delete("c1", env={"RDMA_CNI_TEST_CRASH_IN_DEL": str(k)})
    assert run.rc == -signal.SIGKILL, run
    bump(SUITE, "DEL kills")
    assert rig.files(), "a killed DEL must keep the state for the next DEL"
    assert chain.delete("c1").rc == 0
    assert chain.gc([]).rc == 0
    _assert_clean(rig, pod, before)


# --- through the installed front and `rdma-cni serve` ---------------------------------
KILLED = ("serve", "worker")  # the whole server (its one process), or one worker of two
Start = Callable[[dict[str, str], int], Serve]


@pytest.fixture
def resident(rig, built_binary: list[str], installed_plugin: list[str],
             tmp_path_factory: pytest.TempPathFactory,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[Start]:
    """The rig runs the installed plugin; ``start(hooks, workers)`` runs ``serve`` from the
    image's bundle in the node netns with the test seams ``hooks`` in its environment
    (and only there: the front and its in-process fallback never see them)."""
    side = tmp_path_factory.mktemp("serve")  # a short path: a socket's is at most 107 bytes
    started: list[Serve] = []

    def start(hooks: dict[str, str], workers: int) -> Serve:
        with monkeypatch.context() as env:
            for key, value in hooks.items():
                env.setenv(key, value)
            serve = Serve(rig.node.ns, side / "r.sock", side / f"serve{len(started)}.log",
                          argv=built_binary, options=["--workers", str(workers)])
        started.append(serve)
        return serve

    rig.binary = installed_plugin
    try:
        yield start
    finally:
        for serve in started:
            _signal(serve.proc.pid, signal.SIGCONT)
            serve.stop()


def _signal(pid: int, sig: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def _workers(serve: Serve) -> list[int]:
    deadline = time.monotonic() + 10  # the socket shows before the workers are forked
    while time.monotonic() < deadline:
        pids = [int(p) for p in sh("pgrep", "-P", str(serve.proc.pid), check=False).split()]
        if pids:
            return pids
        time.sleep(0.02)
    raise AssertionError("serve forked no worker")


@contextmanager
def _killing(serve: Serve, killed: str) -> Iterator[None]:
    """Around the request its seam kills: for a worker, the parent is stopped meanwhile
    (only the worker accepts), and afterwards the worker is dead, the parent alive; for
    the server, its one process is dead."""
    if killed == "serve":
        yield
        assert serve.proc.wait(timeout=20) == -signal.SIGKILL, "serve was not killed"
        return
    (worker,) = _workers(serve)
    os.kill(serve.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(serve.proc.pid, signal.SIGCONT)
    status = Path(f"/proc/{worker}/status")
    assert not status.exists() or "zombie" in status.read_text(), "the worker was not killed"
    assert serve.proc.poll() is None, "serve died with its worker"


def _survivor(serve: Serve, killed: str, start: Start) -> Serve:
    """What serves the next requests: a restarted server, or the one whose worker died.
    (The dead server's socket is removed first, so that the rig sees when the new one
    is in place: meanwhile the plugin would run in-process, as it does on a node.)"""
    if killed == "worker":
        return serve
    serve.sock.unlink()
    return start({}, 1)


SERVE_CASES = [("ADD", m, k) for m, k in ADD_CASES] + [("DEL", m, k) for m, k in DEL_CASES]
HOOK = {"ADD": CRASH_AT_STEP, "DEL": CRASH_IN_DEL}


@pytest.mark.parametrize("killed", KILLED)
@pytest.mark.parametrize(("cmd", "mode", "k"), SERVE_CASES,
                         ids=[f"{c}-{m}-k{k}" for c, m, k in SERVE_CASES])
def test_killed_through_serve(rig, resident: Start, cmd: str, mode: str, k: int,
                              killed: str) -> None:
    """``serve`` (or its worker) killed at step k of an ADD or a DEL: the front finishes
    the request in-process; the runtime's DEL and a GC, answered by what serves now,
    leave the pod and the node as they were."""
    serve = resident({HOOK[cmd]: str(k)}, 1 if killed == "serve" else 2)
    chain, pod, before = _setup(rig, mode, str(serve.sock))
    n = MODES[mode][1]
    if cmd == "DEL":
        assert chain.add("c1", pod.path, rdma_blocks(n)).rc == 0
    with _killing(serve, killed):
        run = chain.add("c1", pod.path, rdma_blocks(n)) if cmd == "ADD" else chain.delete("c1")
    assert run.rc == 0, run  # the front ran it in-process once the server's answer was lost
    assert len(pod.links()) == 2 + (n if cmd == "ADD" else 0), pod.links()
    assert serve.served(cmd) == 0, "the server finished the request it was to die in"
    bump(SUITE, f"{cmd} kills through serve ({killed})")
    survivor = _survivor(serve, killed, resident)
    assert chain.delete("c1").rc == 0
    assert chain.gc([]).rc == 0
    assert (survivor.served("DEL"), survivor.served("GC")) == (1, 1)
    _assert_clean(rig, pod, before)


WRITER = r"""
import ipaddress, sys, itertools
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.store.core import Store
from rdma_cni.store.state import AttachmentState
s = Store(sys.argv[1])
for i in itertools.count():
    key = AttachmentKey("vpc-cni", f"w{i % 7}", "eth0")
    with s.lock():
        s.put_state(key, AttachmentState.from_json({
            "status": "pending", "mode": "shared-multi", "netns": "", "interfaces": [],
            "result": None, "pad": "x" * (i % 5000)}))
        s.reserve_ip("198.51.100.0/26", ipaddress.IPv4Address(f"198.51.100.{10 + i % 7}"),
                     key, "eth1")
        s.claim_nic(f"rnicw{i % 3}", key, "eth1")
    if i % 3 == 0:
        s.purge(key)
"""


def test_store_survives_killed_writers(rig) -> None:
    """Kill store writers at random times; the store stays readable, a later ADD/DEL works
    and GC reclaims the writers' leftovers."""
    rng = random.Random(7)
    kills = 0
    for _ in range(25):
        proc = subprocess.Popen([str(PYTHON), "-c", WRITER, str(rig.data_dir)], cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        time.sleep(rng.uniform(0.15, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += proc.returncode == -signal.SIGKILL
        store = Store(str(rig.data_dir))
        store.list_states()
        store.owners()
        assert store.corrupt_records() == [], store.corrupt_records()
    bump(SUITE, "store writer kills", kills)
    chain, pod, before = _setup(rig, "shared-multi")
    assert chain.add("c1", pod.path, rdma_blocks(2)).rc == 0
    assert chain.check("c1").rc == 0
    assert chain.delete("c1").rc == 0
    assert chain.gc([]).rc == 0
    _assert_clean(rig, pod, before)
    assert kills >= 20


def test_counts() -> None:
    assert len(ADD_CASES) == 17 + 8  # update the matrix when the step lists change
    assert len(DEL_CASES) == 5 + 4  # (and docs/reliability.md, which quotes them)
