"""Security: a pod cannot make DEL delete a link of its own choosing in its netns.

A pod with CAP_NET_ADMIN reads our mark off its RDMA interface (its alias), and from
the mark the temporary name ADD gives a sub-link. It gives the name and the mark to
its primary's eth0 (a veth here; an ipvlan on the node's primary NIC under some
primaries): DEL must take a link for ours only when it is a sub-link of the planned
kind on the planned NIC, whose lower device is in the node's netns, which no pod can
make. The primary's eth0 and its peer on the node stay; our own sub-link still goes.
Oracle: ``ip -j`` of the pod and the fabric netns.
"""

from __future__ import annotations

import pytest
from cnirunner import as_pod_process, ip_json, link_detail, rdma_blocks

pytestmark = pytest.mark.root


def _eth0_peer(pod) -> str:  # type: ignore[no-untyped-def]
    return f"v{pod.name}"[-15:]


@pytest.mark.parametrize("disguise", ["final-name", "temporary-name"])
def test_del_never_deletes_the_primarys_eth0_under_our_names(  # type: ignore[no-untyped-def]
        rig, faults, disguise: str) -> None:
    rig.nic("rnic0")
    pod = rig.pod()
    chain = faults.chain("shared-multi")
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    ours = link_detail(pod.name, "eth1")
    assert ours["linkinfo"]["info_kind"] == "macvlan"
    alias = ours["ifalias"]
    if disguise == "final-name":  # ours deleted, eth0 in its place with its mark
        script = ("ip link del eth1 && ip link set eth0 down && ip link set eth0 name eth1"
                  f" && ip link set eth1 alias '{alias}' && ip link set eth1 up")
        name = "eth1"
    else:  # ours kept; eth0 under the temporary name the mark gives
        name = "rdt" + alias.split(":")[1][:9] + "0"
        script = f"ip link set eth0 down && ip link set eth0 name {name} && ip link set {name} up"
    as_pod_process(pod.name, script)
    primary = link_detail(pod.name, name)
    assert primary["linkinfo"]["info_kind"] == "veth"
    run = chain.delete("c1")
    assert run.rc == 0, run
    links = pod.links()
    assert name in links and links[name]["ifindex"] == primary["ifindex"], links
    assert "203.0.113.5/24" in pod.addrs(name)
    assert [lk for lk in ip_json(rig.node.fabric, "link", "show")
            if lk["ifname"] == _eth0_peer(pod)]
    # our sub-link went (final-name: the pod had deleted it already)
    assert not [lk for lk in links.values()
                if lk.get("link_type") == "ether" and lk["ifname"] not in (name, "lo")
                and lk["ifindex"] == ours["ifindex"]]
    assert rig.files() == []


@pytest.mark.parametrize("decoy", [False, True])
def test_a_renamed_sub_link_still_goes_with_its_address(  # type: ignore[no-untyped-def]
        rig, faults, decoy: bool) -> None:
    """The pod renames our eth1 (and, with ``decoy``, makes a macvlan on top of it named
    eth1 with our mark: the kernel gives it the NIC as its lower device). DEL found no
    link under the planned names but the decoy, released the address, and the renamed
    link kept it: the next pod got the same address. DEL finds ours by the index ADD
    recorded, whatever its name."""
    rig.nic("rnic0")
    pod = rig.pod()
    chain = faults.chain("shared-multi")
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    ours = link_detail(pod.name, "eth1")
    script = "ip link set eth1 down && ip link set eth1 name bar && ip link set bar up"
    if decoy:
        script += (" && ip link add eth1 link bar type macvlan mode bridge"
                   f" && ip link set eth1 alias '{ours['ifalias']}'")
    as_pod_process(pod.name, script)
    assert link_detail(pod.name, "bar")["ifindex"] == ours["ifindex"]
    assert chain.delete("c1").rc == 0
    assert "bar" not in pod.links() and "eth1" not in pod.links()
    assert not [a for a in pod.addrs() if a.startswith("198.51.100.")]
    assert rig.files() == []
