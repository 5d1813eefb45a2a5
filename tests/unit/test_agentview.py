"""The agent's evidence grading and pass planning (pure): what a wrong view cannot
make it release."""

from __future__ import annotations

from typing import Any

import pytest

from rdma_cni.kube.agent import plan as agentplan
from rdma_cni.kube.agent.view import (
    ALIVE,
    GONE,
    UNKNOWN,
    Evidence,
    judge,
    mount_of,
    propagation,
    runtime_dir,
)
from rdma_cni.store.state import AttachmentState

ID = (4, 4026532999)


def state(cid: str, netns: str = "/var/run/netns/p", origin: dict[str, Any] | None = None,
          status: str = "ready") -> AttachmentState:
    st: dict[str, Any] = {"key": {"network": "n", "containerID": cid, "ifname": "eth0"},
                          "netns": netns, "status": status, "pod": "ns/p"}
    if origin is not None:
        st["origin"] = origin
    return AttachmentState.from_json(st)


REC = {"node": "node-a", "netnsDev": ID[0], "netnsIno": ID[1]}


def never(_: str) -> None:
    return None


def test_runtime_list_is_authoritative() -> None:
    ev = Evidence(sandboxes={"a": "ready"}, runtime_present=True)
    assert judge(state("a"), ev, never).kind == ALIVE
    assert judge(state("b"), ev, never).kind == GONE


def test_runtime_absence_contradicted_by_a_live_netns_is_unknown() -> None:
    ev = Evidence(sandboxes={}, runtime_present=True, held=frozenset({ID}))
    assert judge(state("a", origin=REC), ev, never).kind == UNKNOWN
    assert judge(state("a", origin=REC), Evidence(sandboxes={}, runtime_present=True),
                 lambda p: ID).kind == UNKNOWN


def test_unreachable_runtime_is_never_evidence_of_gone() -> None:
    ev = Evidence(runtime_present=True, runtime_error="UNAVAILABLE",
                  sound_dirs=frozenset({"/var/run/netns"}))
    verdict = judge(state("a"), ev, never)
    assert verdict.kind == UNKNOWN and "UNAVAILABLE" in verdict.why


def test_without_runtime_only_a_propagated_view_proves_gone() -> None:
    private = Evidence(unsound_dirs={"/var/run/netns": "no propagation (private)"})
    assert judge(state("a"), private, never).kind == UNKNOWN
    sound = Evidence(sound_dirs=frozenset({"/var/run/netns"}))
    assert judge(state("a"), sound, never).kind == GONE
    assert judge(state("a", origin=REC), Evidence(held=frozenset({ID})), never).kind == ALIVE
    assert judge(state("a", netns="/proc/123/ns/net"), sound, never).kind == UNKNOWN
    reused = judge(state("a", origin=REC), sound, lambda p: (4, 1))
    assert reused.kind == UNKNOWN and "other than" in reused.why


MOUNTINFO = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
42 27 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw
83 71 254:0 /run/netns /var/run/netns rw,relatime - ext4 /dev/vda rw
84 71 0:5 / /var/run/netns2 rw,relatime master:7 - tmpfs tmpfs rw
"""


def test_propagation_from_mountinfo() -> None:
    assert mount_of("/run/netns", MOUNTINFO) == ("/run/netns", ["shared:1"])
    assert propagation("/run/netns", MOUNTINFO) == ""
    assert propagation("/var/run/netns2", MOUNTINFO) == ""
    assert "no propagation" in propagation("/var/run/netns", MOUNTINFO)
    assert "no propagation" in propagation("/tmp/x", MOUNTINFO)


def plan(states: list[dict[str, Any]], ev: Evidence, marks: dict[str, Any] | None = None,
         now: float = 0.0) -> agentplan.PassPlan:
    return agentplan.plan_pass(states, ev, "node-a", marks or {}, now, 10.0)


def test_gone_needs_two_passes_spaced_by_the_interval() -> None:
    sts = [state("a")]
    ev = Evidence(sandboxes={}, runtime_present=True)
    first = plan(sts, ev)
    assert first.release == []
    assert plan(sts, ev, first.marks, now=1.0).release == []  # too soon
    assert [k.container_id for k in plan(sts, ev, first.marks, now=10.0).release] == ["a"]
    pending = [state("a", status="pending")]
    p2 = plan(pending, ev, first.marks, now=10.0)
    assert p2.release == []  # an ADD may still be running
    assert plan(pending, ev, p2.marks, now=agentplan.PENDING_GRACE + 1).release


def test_mass_release_without_the_runtime_is_refused() -> None:
    sts = [state(c) for c in "abcdef"]
    ev = Evidence(sound_dirs=frozenset({"/var/run/netns"}))
    marks = plan(sts, ev).marks
    refused = plan(sts, ev, marks, now=20.0)
    assert refused.release == [] and "none released" in refused.reasons[-1]
    confirmed = plan(sts, Evidence(sandboxes={}, runtime_present=True), marks, now=20.0)
    assert len(confirmed.release) == 6 and confirmed.needs_confirm


def test_state_of_another_node_is_never_planned() -> None:
    sts = [state("a", origin={**REC, "node": "node-b"}), state("b", origin=REC)]
    ev = Evidence(sandboxes={}, runtime_present=True)
    p = plan(sts, ev, plan(sts, ev).marks, now=20.0)
    assert [k.container_id for k in p.release] == ["b"] and p.foreign == 1
    assert "another node" in p.reasons[0]


@pytest.mark.parametrize("bad", [{"netnsDev": "x", "netnsIno": 1}, {"netnsIno": 0}, "junk"])
def test_malformed_origin_is_ignored(bad: Any) -> None:
    st = state("a", origin=bad)
    assert judge(st, Evidence(held=frozenset({ID})), never).kind == UNKNOWN


DIR = (25, 4242)  # (st_dev, st_ino) of the runtime's netns directory, as ADD saw it


def test_a_propagated_dir_is_sound_only_when_shown_to_be_the_runtimes() -> None:
    """Propagation alone does not tell a bind of the runtime's netns directory from a
    bind of an empty one: the directory ADD saw (device and inode), or a recorded netns
    visible in it, must show it."""
    with_dir = {**REC, "netnsDirDev": DIR[0], "netnsDirIno": DIR[1]}
    d = "/var/run/netns"
    assert runtime_dir(d, [state("a", origin=with_dir)], never, lambda p: DIR) == ""
    empty_bind = runtime_dir(d, [state("a", origin=with_dir)], never, lambda p: (25, 7))
    assert "nothing shows it is the runtime's" in empty_bind
    # a record without the directory's identity (an earlier release): a live netns of
    # one of its pods, visible with its recorded identity, shows it; nothing else does
    old = [state("a", origin=REC), state("b", origin=REC)]
    assert runtime_dir(d, old, lambda p: ID if p.endswith("/p") else None,
                       lambda p: (25, 7)) == ""
    assert runtime_dir(d, old, never, lambda p: (25, 7)) != ""
    assert runtime_dir(d, [state("a")], never, lambda p: DIR) != ""
    # records of another directory say nothing of this one
    assert runtime_dir("/run/other", [state("a", origin=with_dir)], never,
                       lambda p: DIR) != ""
