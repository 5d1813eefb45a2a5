"""The agent and a ready record ADD has just written: containerd adds a sandbox to its
store only at the end of RunPodSandbox, after CNI ADD returned, so until then
``ListPodSandbox`` omits it and ``PodSandboxStatus`` answers NOT_FOUND. A ready record
younger than PENDING_GRACE (from its own write time on CLOCK_BOOTTIME, stamped at ADD)
is kept as a pending one is; older ones, those of another boot and those without the
stamp (earlier releases) are released after two passes as before."""

from __future__ import annotations

import time
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path
from typing import Any

import pytest
from support.fakes.cri import FakeCri

from rdma_cni.adapters.cri import CriClient
from rdma_cni.kube.agent import reconciler as agent
from rdma_cni.kube.agent.plan import PENDING_GRACE
from rdma_cni.store.boot import BootMark, this_boot
from rdma_cni.store.core import Store
from rdma_cni.store.state import AttachmentState, make_state
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.kinds import READY
from rdma_cni.vocab.plan import IfacePlan

POOL = "198.51.100.0/28"
START = 1000.0  # CLOCK_BOOTTIME when the record is written


def ready(store: Store, cid: str, written: dict[str, Any] | None) -> AttachmentKey:
    """A ready record stamped ``written`` (its JSON form; None: no stamp)."""
    key = AttachmentKey("vpc-cni", cid, "eth0")
    plan = IfacePlan(k=0, name="eth1", tmp="rdtmp0", nic="rdfake0", kind="macvlan",
                     mtu=1500, table=100, addresses=(IPv4Interface("198.51.100.2/28"),))
    assert store.reserve_ip(POOL, IPv4Address("198.51.100.2"), key, "eth1")
    store.put_state(key, make_state(READY, "shared-multi", f"/var/run/netns/{cid}",
                                    "default/p1", "uid-1", 20000, [plan], {},
                                    written=BootMark.from_json(written)))
    return key


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[FakeCri]:
    cri = FakeCri(str(tmp_path / "cri.sock")).start()
    cri.sandboxes["agent-pod"] = 1  # the runtime lists something, not this sandbox
    try:
        yield cri
    finally:
        cri.stop()


@pytest.fixture
def boottime(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    clock = [START + 0.5]
    real = time.clock_gettime
    monkeypatch.setattr(time, "clock_gettime", lambda c: clock[0]
                        if c == time.CLOCK_BOOTTIME else real(c))
    return clock


def _agent(tmp_path: Path, runtime: FakeCri) -> agent.Agent:
    return agent.Agent(store=Store(str(tmp_path / "data")), status_path=str(tmp_path / "s.json"),
                       node="n", node_name="node-a", interval=10.0,
                       cri=CriClient(runtime.socket))


def test_a_ready_record_just_written_waits_for_the_runtime_to_list_its_sandbox(
        tmp_path: Path, runtime: FakeCri, boottime: list[float]) -> None:
    ag = _agent(tmp_path, runtime)
    key = ready(ag.store, "fresh", {"boot": this_boot(), "boottime": START})
    for _ in range(4):  # RunPodSandbox still running: passes 30 s apart release nothing
        assert agent.run_once(ag)["released"] == 0
        boottime[0] += 30
    assert ag.store.get_state(key) is not None
    boottime[0] = START + PENDING_GRACE
    doc = agent.run_once(ag)
    assert doc["released"] == 1 and ag.store.get_state(key) is None, doc["reasons"]


@pytest.mark.parametrize("written", [
    None,  # written by an earlier release
    {"boot": "another-boot", "boottime": START},
    {"boot": "this", "boottime": START - PENDING_GRACE},  # old enough
], ids=["unstamped", "another-boot", "old"])
def test_other_ready_records_are_released_after_two_passes(
        tmp_path: Path, runtime: FakeCri, boottime: list[float],
        written: dict[str, Any] | None) -> None:
    ag = _agent(tmp_path, runtime)
    if written is not None and written["boot"] == "this":
        written = {**written, "boot": this_boot()}
    key = ready(ag.store, "old", written)
    assert agent.run_once(ag)["released"] == 0
    boottime[0] += 10
    assert agent.run_once(ag)["released"] == 1 and ag.store.get_state(key) is None


def test_the_stamp_survives_the_store() -> None:
    stamp = BootMark("b", 12.5)
    st = AttachmentState(status=READY, written=stamp)
    assert st.to_json()["written"] == {"boot": "b", "boottime": 12.5}
    assert AttachmentState.from_json(st.to_json()).written == stamp
    assert "written" not in AttachmentState(status=READY).to_json()
