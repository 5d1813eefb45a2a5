"""DEL of an exclusive NIC with several IPv4 addresses deletes the one source rule ADD
made (from its first address, in the pod), and no other rule.

ADD makes one rule, ``from <first address> lookup <table>`` at our priority; DEL deleted
one for each address of the NIC, in the pod: a rule of the pod's own for a secondary
address (same table and priority) went with it. The node's own rules of the NIC's
addresses (same table and priority: the node's policy routing while it holds the NIC)
are never touched: DEL deletes rules in the pod's netns only, and with no pod netns
(or the node's own named) none at all.

Oracle: ``ip -j rule`` of the pod and of the node (the rig compares the whole node netns,
rules of every family included, with its baseline), on both request paths."""

from __future__ import annotations

import pytest
from cnirunner import ip_json, rdma_blocks, sh

pytestmark = pytest.mark.root
PRIORITY = 20000  # rdma_cni.defaults.RULE_PRIORITY
TABLE = 100  # the first interface's table (routing.tableBase)
ADDRS = ("198.51.100.1", "198.51.100.2", "198.51.100.3")


def _rules(ns: str) -> list[tuple[int, str, str]]:
    return sorted((r["priority"], str(r.get("src")), str(r.get("table")))
                  for r in ip_json(ns, "-4", "rule", "show"))


def _add_rule(ns: str, src: str) -> None:
    sh("ip", "-n", ns, "rule", "add", "from", src, "lookup", str(TABLE),
       "priority", str(PRIORITY))


def test_del_deletes_the_one_rule_add_made(rig, faults) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0", extra_addrs=[f"{a}/26" for a in ADDRS[1:]])
    for src in ADDRS:  # the node's own rules of the NIC's addresses
        _add_rule(rig.node.ns, src)
    chain = faults.chain("exclusive")  # the node's baseline, its rules with it
    pod = rig.pod()
    before = _rules(pod.name)
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    faults.expect_served("ADD", 1)
    ours = (PRIORITY, ADDRS[0], str(TABLE))
    assert _rules(pod.name) == sorted([*before, ours])
    _add_rule(pod.name, ADDRS[1])  # the pod's own, for a secondary address
    pods_own = (PRIORITY, ADDRS[1], str(TABLE))

    run = chain.delete("c1", pod.path, blocks=rdma_blocks(1))
    assert run.rc == 0, run
    assert _rules(pod.name) == sorted([*before, pods_own])
    assert [r for r in _rules(rig.node.ns) if r[0] == PRIORITY] == \
        [(PRIORITY, a, str(TABLE)) for a in ADDRS]
    assert rig.node_changes() == {} and rig.files() == []
