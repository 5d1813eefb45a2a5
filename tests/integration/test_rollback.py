"""Rollback at every step boundary of ADD: an injected failure (RDMA_CNI_TEST_FAIL_AT_STEP)
leaves nothing behind by itself; a SIGKILL (RDMA_CNI_TEST_CRASH_AT_STEP) leaves what
the following DEL must clean completely."""

from __future__ import annotations

import pytest
from cnirunner import HPC_NET, rdma_blocks, snapshot

from rdma_cni.datapath.execute import steps_for
from rdma_cni.vocab.plan import IfacePlan

pytestmark = pytest.mark.root
PLUGIN_RUNNER = "binary"  # the session build: immune to edits of the tree mid-run


def _n_steps(kind: str, n: int) -> int:
    plans = [IfacePlan(k=k, name=f"eth{k + 1}", tmp="t", nic="n", kind=kind, mtu=1500,
                       table=100 + k) for k in range(n)]
    return len(steps_for(plans))


SHARED_STEPS = _n_steps("macvlan", 2)
EXCL_STEPS = _n_steps("physical", 1)
CASES = [("shared-multi", 2, k) for k in range(SHARED_STEPS + 1)] + \
        [("exclusive", 1, k) for k in range(EXCL_STEPS + 1)]
IDS = [f"{mode}-k{k}" for mode, _, k in CASES]


def _setup(rig, mode: str):
    rig.nic("rnic0", "198.51.100.1/26", "198.51.100.62")
    rig.nic("rnic1", "198.51.100.65/26", None, routes=[("198.19.0.0/16", "198.51.100.126")])
    devices = ["rnic0", "rnic1"] if mode == "shared-multi" else ["rnic0"]
    pod = rig.pod()
    chain = rig.chain(mode, devices)
    return chain, pod


def _pod_clean(pod, before) -> None:
    assert sorted(pod.links()) == ["eth0", "lo"]
    assert HPC_NET not in str(pod.routes("all"))
    assert snapshot(pod.name) == before


def test_step_counts() -> None:
    assert SHARED_STEPS == 16 and EXCL_STEPS == 7  # update CASES' meaning when steps change


@pytest.mark.parametrize(("mode", "n", "k"), CASES, ids=IDS)
def test_failure_at_step_rolls_back(rig, mode: str, n: int, k: int) -> None:
    chain, pod = _setup(rig, mode)
    before = snapshot(pod.name)
    run = chain.add("c1", pod.path, rdma_blocks(n),
                    env={"RDMA_CNI_TEST_FAIL_AT_STEP": str(k)})
    assert run.rc == 1 and run.code == 5, run
    assert f"injected failure at step {k}" in run.out["msg"]
    # nothing left by the failed ADD itself: no link, address, rule, moved NIC,
    # reservation or state (the fixture checks the node netns and data dir again)
    _pod_clean(pod, before)
    assert rig.files() == []
    assert rig.node_changes() == {}
    # the runtime's DEL after the failed ADD is a no-op success
    assert chain.delete("c1", blocks=rdma_blocks(n)).rc == 0


@pytest.mark.parametrize(("mode", "n", "k"), CASES, ids=IDS)
def test_crash_at_step_then_del_cleans(rig, mode: str, n: int, k: int) -> None:
    chain, pod = _setup(rig, mode)
    before = snapshot(pod.name)
    run = chain.add("c1", pod.path, rdma_blocks(n),
                    env={"RDMA_CNI_TEST_CRASH_AT_STEP": str(k)})
    assert run.rc == -9, run
    assert rig.files(), "the pending state must be saved before the first step"
    run = chain.delete("c1", blocks=rdma_blocks(n))
    assert run.rc == 0, run
    _pod_clean(pod, before)
    assert rig.files() == []
    assert rig.node_changes() == {}


@pytest.mark.parametrize(("mode", "n", "k"),
                         [("shared-multi", 2, 5), ("shared-multi", 2, SHARED_STEPS),
                          ("exclusive", 1, 2), ("exclusive", 1, EXCL_STEPS)],
                         ids=["shared-multi-mid", "shared-multi-end", "exclusive-mid",
                              "exclusive-end"])
def test_add_again_after_crash_replaces_the_wreck(rig, mode: str, n: int, k: int) -> None:
    chain, pod = _setup(rig, mode)
    before = snapshot(pod.name)
    run = chain.add("c1", pod.path, rdma_blocks(n), env={"RDMA_CNI_TEST_CRASH_AT_STEP": str(k)})
    assert run.rc == -9, run
    run = chain.add("c1", pod.path, rdma_blocks(n))
    assert run.rc == 0, run
    names = [i["name"] for i in run.out["interfaces"][1:]]
    assert names == [f"eth{i + 1}" for i in range(n)]
    assert chain.check("c1").rc == 0
    assert chain.delete("c1").rc == 0
    _pod_clean(pod, before)
