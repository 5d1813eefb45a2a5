"""A request that names a netns other than the one ADD made the attachment in: a
repeated ADD of the same container id for another netns, or a DEL naming another one.
What ADD made lives on in the recorded netns while that pod runs; releasing its
address (or its NIC) without undoing it there would give the next pod the same address
(or leave the NIC in a pod nothing tracks). The undo goes where ADD made it, while
that path still shows the very netns ADD recorded; a path that now shows another netns
is never touched.

Oracle: ``ip -j`` of both pods and of the node, and the data dir."""

from __future__ import annotations

import pytest
from cnirunner import in_ns, link_detail, rdma_blocks, sh

pytestmark = pytest.mark.root


def _added_in_a(rig, faults, mode: str, n: int = 1):  # type: ignore[no-untyped-def]
    """Two pods, and cid-a ADDed in the first."""
    rig.nic("rnic0")
    chain = faults.chain(mode)
    pod_a, pod_b = rig.pod(), rig.pod()
    assert chain.add("cid-a", pod_a.path, rdma_blocks(n)).rc == 0
    return chain, pod_a, pod_b


def test_a_repeated_add_for_another_netns_undoes_the_first_where_it_is(  # type: ignore[no-untyped-def]
        rig, faults) -> None:
    chain, pod_a, pod_b = _added_in_a(rig, faults, "shared-multi")
    assert pod_a.addrs("eth1") == ["198.51.100.2/26"]
    run = chain.add("cid-a", pod_b.path, rdma_blocks(1))
    assert run.rc == 0, run
    assert set(pod_a.links()) == {"lo", "eth0"}, "the first pod kept its interface"
    assert pod_b.addrs("eth1") == ["198.51.100.2/26"]
    assert chain.delete("cid-a", pod_b.path).rc == 0
    assert set(pod_b.links()) == {"lo", "eth0"}


def test_a_del_naming_another_netns_undoes_the_attachment_where_it_is(  # type: ignore[no-untyped-def]
        rig, faults) -> None:
    chain, pod_a, pod_b = _added_in_a(rig, faults, "shared-multi", 2)
    run = chain.delete("cid-a", pod_b.path)
    assert run.rc == 0, run
    assert set(pod_a.links()) == {"lo", "eth0"}, "the pod kept addresses DEL released"
    assert set(pod_b.links()) == {"lo", "eth0"}


def test_an_exclusive_nic_follows_a_repeated_add_to_the_other_netns(  # type: ignore[no-untyped-def]
        rig, faults) -> None:
    chain, pod_a, pod_b = _added_in_a(rig, faults, "exclusive")
    mac = link_detail(pod_a.name, "eth1")["address"]
    run = chain.add("cid-a", pod_b.path, rdma_blocks(1))
    assert run.rc == 0, run
    assert set(pod_a.links()) == {"lo", "eth0"}
    assert link_detail(pod_b.name, "eth1")["address"] == mac
    assert chain.delete("cid-a", pod_b.path).rc == 0
    assert rig.node.links()["rnic0"]["address"] == mac


def test_a_path_that_now_shows_another_netns_is_not_touched(  # type: ignore[no-untyped-def]
        rig, faults) -> None:
    chain, pod_a, pod_b = _added_in_a(rig, faults, "shared-multi")
    # pod A is gone (its sub-link with it); another netns took its path, with an eth1
    # marked as ours
    alias = link_detail(pod_a.name, "eth1")["ifalias"]
    in_ns(pod_a.name, "ip", "link", "del", "eth1")
    in_ns(pod_a.name, "true")
    sh("ip", "netns", "del", pod_a.name)
    sh("ip", "netns", "add", pod_a.name)
    in_ns(pod_a.name, "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "p1")
    in_ns(pod_a.name, "ip", "link", "set", "eth1", "alias", alias)
    for run in (chain.add("cid-a", pod_b.path, rdma_blocks(1)),
                chain.delete("cid-a", pod_b.path)):
        assert run.rc == 0, run
    assert {"eth1", "p1"} <= set(pod_a.links()), "a netns ADD never saw was changed"
    assert set(pod_b.links()) == {"lo", "eth0"}
