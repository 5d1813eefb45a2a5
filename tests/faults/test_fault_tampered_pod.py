"""A pod with CAP_NET_ADMIN changes what ADD made: CHECK and a repeated ADD see it.

- It empties its interface's routing table and fills it with a route through eth0:
  the interface's traffic leaves through the primary, and CHECK says 105, naming the
  missing route (the table is not merely non-empty: each route ADD put there, through
  the interface).
- It renames its exclusive NIC away and makes a veth look-alike under the NIC's name,
  with our mark, the NIC's MAC and address, the rule and routes of the NIC's table:
  CHECK says 105 (the link is not the NIC under the identity ADD recorded, as DEL finds
  it), and a repeated ADD does not answer with the look-alike: it takes the record
  over, returns the NIC to the host and starts afresh, which fails with 103 (the name
  is the look-alike's), nothing left claimed or recorded.
- It deletes our rule: a repeated ADD (a runtime's retry) makes the attachment again,
  rule included, instead of answering success over it.

Each change is made by a process in the pod netns whose only capability is
CAP_NET_ADMIN. Oracle: ``ip -j`` of the node and the pod, and the store on disk.
"""

from __future__ import annotations

import pytest
from cnirunner import as_pod_process, ip_json, link_detail, rdma_blocks, rule_of, table_routes

pytestmark = pytest.mark.root


def _leaves_by(pod, dst: str, src: str) -> str:  # type: ignore[no-untyped-def]
    [route] = ip_json(pod.name, "route", "get", dst, "from", src)
    return str(route["dev"])


def test_check_finds_its_table_refilled_through_another_link(rig, faults) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0")
    pod = rig.pod()
    chain = faults.chain("shared-multi")
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    assert chain.check("c1").rc == 0
    assert _leaves_by(pod, "198.18.0.5", "198.51.100.2") == "eth1"
    as_pod_process(pod.name, "ip route flush table 100; "
                   "ip route add 192.0.2.0/24 dev eth0 table 100")
    assert _leaves_by(pod, "198.18.0.5", "198.51.100.2") == "eth0"
    run = chain.check("c1")
    assert run.code == 105, run
    assert run.out["msg"] == "route 198.51.100.0/26 dev eth1 is missing from routing table 100"
    # the connected route back, the stray one kept: still a mismatch
    as_pod_process(pod.name, "ip route add 198.51.100.0/26 dev eth1 table 100")
    run = chain.check("c1")
    assert run.code == 105, run
    assert run.out["msg"] == ("routing table 100 of eth1 holds a route to 192.0.2.0/24 "
                              "that does not lead through eth1")
    assert chain.delete("c1").rc == 0
    assert rig.files() == []


_LOOK_ALIKE = """
ip link set dev eth1 down
ip link set dev eth1 name foo
ip link add name eth1 address {mac} type veth peer name eth1peer
ip link set dev eth1 alias '{alias}'
ip addr add 198.51.100.1/26 dev eth1
ip link set dev eth1 up
ip link set dev eth1peer up
ip rule show | grep -q 'from 198.51.100.1 lookup 100' || \
    ip rule add from 198.51.100.1 lookup 100 pref 20000
ip route add 198.51.100.0/26 dev eth1 table 100
ip route add 198.18.0.0/15 via 198.51.100.62 dev eth1 onlink table 100
"""


def test_a_look_alike_of_the_exclusive_nic_is_not_taken_for_it(rig, faults) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0")
    mac = rig.node.links()["rnic0"]["address"]
    pod = rig.pod()
    chain = faults.chain("exclusive")
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    assert chain.check("c1").rc == 0
    real = link_detail(pod.name, "eth1")
    as_pod_process(pod.name, _LOOK_ALIKE.format(mac=mac, alias=real["ifalias"]))
    fake = link_detail(pod.name, "eth1")
    assert fake["linkinfo"]["info_kind"] == "veth" and fake["address"] == mac
    assert fake["ifalias"] == real["ifalias"] and "foo" in pod.links()
    run = chain.check("c1")
    assert run.code == 105, run
    assert run.out["msg"] == f"interface eth1 in {pod.path} is not ours"

    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.code == 103, run
    assert "eth1 is already in use" in run.out["msg"], run.out
    # the NIC is back on the host under its name, the look-alike left where the pod made it
    assert "foo" not in pod.links() and "eth1" in pod.links()
    host = link_detail(rig.node.ns, "rnic0")
    assert host["address"] == mac and not host.get("ifalias")
    assert [(a["local"], a["prefixlen"]) for a in ip_json(
        rig.node.ns, "-4", "addr", "show", "dev", "rnic0")[0]["addr_info"]] == \
        [("198.51.100.1", 26)]
    assert rig.files() == [], "nothing recorded nor claimed"
    assert chain.delete("c1").rc == 0
    assert rig.node_changes() == {}


def test_a_repeated_add_makes_a_deleted_rule_again(rig, faults) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0")
    pod = rig.pod()
    chain = faults.chain("shared-multi")
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    as_pod_process(pod.name, "ip rule del from 198.51.100.2 lookup 100")
    assert rule_of(pod.name, "198.51.100.2") == []
    run = chain.check("c1")
    assert run.code == 105, run
    assert run.out["msg"].startswith("rule from 198.51.100.2 lookup 100 "), run.out
    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.rc == 0, run
    assert [ip["address"] for ip in run.out["ips"][1:]] == ["198.51.100.2/26"]
    assert rule_of(pod.name, "198.51.100.2") == [(20000, "100")]
    assert table_routes(pod.name, 100)
    assert chain.check("c1").rc == 0
    assert chain.delete("c1").rc == 0
    assert sorted(pod.links()) == ["eth0", "lo"] and rig.files() == []


def test_check_finds_the_interfaces_ipv4_settings_changed(rig, faults) -> None:  # type: ignore[no-untyped-def]
    """ADD gives each interface arp_ignore 1, arp_announce 2, rp_filter 2, arp_notify 1;
    a pod that sets them back (rp_filter 0, arp_ignore 0: one NIC answers ARP for
    another's address) fails CHECK, and a repeated ADD makes the interface again."""
    rig.nic("rnic0")
    pod = rig.pod()
    chain = faults.chain("shared-multi")
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    assert chain.check("c1").rc == 0
    as_pod_process(pod.name, "echo 0 > /proc/sys/net/ipv4/conf/eth1/arp_ignore")
    run = chain.check("c1")
    assert run.code == 105, run
    assert run.out["msg"] == "arp_ignore of eth1 is 0, not 1"
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    assert pod.sysctl("eth1", "arp_ignore") == "1"
    assert chain.check("c1").rc == 0
    assert chain.delete("c1").rc == 0
    assert rig.files() == []
