"""Built-in IPAM against real NICs: which addresses pods get, what is skipped, the
error codes for bad masks, exhausted ranges and requested addresses."""

from __future__ import annotations

import pytest
from cnirunner import HPC_NET, link_detail, rdma_blocks

pytestmark = pytest.mark.root
PLUGIN_RUNNER = "binary"  # the session build: immune to edits of the tree mid-run

NET = "198.51.100.0/26"


def _nothing_in(pod) -> None:
    assert sorted(pod.links()) == ["eth0", "lo"]
    assert [r["priority"] for r in pod.rules()] == [0, 32766, 32767]


def test_skips_host_addresses_gateway_and_exclusions(rig) -> None:
    # .1 the NIC, .3 a secondary host address, .2 excluded, .4 the gateway
    rig.nic("rnic0", "198.51.100.1/26", gw=None, extra_addrs=["198.51.100.3/26"],
            routes=[(HPC_NET, "198.51.100.4")])
    # .5 held by another host interface
    rig.nic("rother", "198.51.100.5/32", gw=None)
    chain = rig.chain("shared-multi", ipam={"ranges": {NET: {"exclude": ["198.51.100.2"]}}})
    pod = rig.pod()
    run = chain.add("c1", pod.path, rdma_blocks(2))
    assert run.rc == 0, run
    assert pod.addrs("eth1") == ["198.51.100.6/26"]
    assert pod.addrs("eth2") == ["198.51.100.7/26"]
    assert run.out["ips"][1]["gateway"] == "198.51.100.4"
    assert chain.delete("c1").rc == 0


def test_range_narrowing_and_exhaustion(rig) -> None:
    rig.nic()
    ranges = {NET: {"rangeStart": "198.51.100.10", "rangeEnd": "198.51.100.12",
                    "exclude": ["198.51.100.11/32"]}}
    chain = rig.chain("shared-multi", ipam={"ranges": ranges})
    pods = [rig.pod() for _ in range(3)]
    assert chain.add("c0", pods[0].path, rdma_blocks(1)).rc == 0
    only_c0 = rig.files()
    assert chain.add("c1", pods[1].path, rdma_blocks(1)).rc == 0
    assert pods[0].addrs("eth1") == ["198.51.100.10/26"]
    assert pods[1].addrs("eth1") == ["198.51.100.12/26"]
    files = rig.files()
    run = chain.add("c2", pods[2].path, rdma_blocks(1))
    assert run.rc == 1 and run.code == 102, run
    _nothing_in(pods[2])
    assert rig.files() == files
    assert chain.delete("c2").rc == 0
    # a two-interface pod whose second address cannot be had leaves nothing either
    assert chain.delete("c1").rc == 0
    run = chain.add("c3", pods[2].path, rdma_blocks(2))
    assert run.rc == 1 and run.code == 102, run
    _nothing_in(pods[2])
    assert rig.files() == only_c0
    assert chain.delete("c3").rc == 0
    assert chain.delete("c0").rc == 0


@pytest.mark.parametrize("prefix", [30, 31, 32])
def test_long_netmask_refused_with_100(rig, prefix: int) -> None:
    rig.nic("rnic0", f"198.51.100.1/{prefix}", gw=None)
    chain = rig.chain("shared-multi")
    pod = rig.pod()
    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.rc == 1 and run.code == 100, run
    assert "rnic0" in run.out["msg"] and f"/{prefix}" in run.out["msg"]
    _nothing_in(pod)
    assert rig.files() == []
    assert chain.delete("c1").rc == 0


def test_requested_address_honoured_then_taken(rig) -> None:
    rig.nic()
    chain = rig.chain("shared-multi")
    pod1, pod2 = rig.pod(), rig.pod()
    run = chain.add("c1", pod1.path, rdma_blocks(1, ips=["198.51.100.20"]))
    assert run.rc == 0, run
    assert pod1.addrs("eth1") == ["198.51.100.20/26"]
    files = rig.files()
    run = chain.add("c2", pod2.path, rdma_blocks(1, ips=["198.51.100.20"]))
    assert run.rc == 1 and run.code == 102, run
    assert "198.51.100.20" in run.out["msg"]
    _nothing_in(pod2)
    assert rig.files() == files
    assert chain.delete("c2").rc == 0
    assert chain.delete("c1").rc == 0


@pytest.mark.parametrize("ip", ["198.51.100.1", "198.51.100.62", "198.51.100.63",
                                "198.51.100.70", "198.51.100.30"],
                         ids=["host", "gateway", "broadcast", "other-subnet", "outside-range"])
def test_requested_address_unavailable_is_102(rig, ip: str) -> None:
    rig.nic()
    narrow = {"ranges": {NET: {"rangeStart": "198.51.100.2", "rangeEnd": "198.51.100.29"}}}
    chain = rig.chain("shared-multi", ipam=narrow if ip == "198.51.100.30" else {})
    pod = rig.pod()
    run = chain.add("c1", pod.path, rdma_blocks(1, ips=[ip]))
    assert run.rc == 1 and run.code == 102, run
    _nothing_in(pod)
    assert rig.files() == []
    assert chain.delete("c1").rc == 0


def test_nics_in_one_subnet_share_one_pool(rig) -> None:
    rig.nic("rnic0", "198.51.100.1/26", "198.51.100.62")
    rig.nic("rnic1", "198.51.100.2/26", None)
    chain = rig.chain("shared-multi", ["rnic0", "rnic1"])
    pod1, pod2 = rig.pod(), rig.pod()
    assert chain.add("c1", pod1.path, rdma_blocks(2)).rc == 0
    assert chain.add("c2", pod2.path, rdma_blocks(2)).rc == 0
    got = [pod1.addrs("eth1"), pod1.addrs("eth2"), pod2.addrs("eth1"), pod2.addrs("eth2")]
    assert got == [["198.51.100.3/26"], ["198.51.100.4/26"], ["198.51.100.5/26"],
                   ["198.51.100.6/26"]]
    assert link_parent(pod1, "eth2") == rig.node.links()["rnic1"]["ifindex"]
    assert chain.delete("c1").rc == 0
    assert chain.delete("c2").rc == 0


def link_parent(pod, dev: str) -> int:
    return int(link_detail(pod.name, dev)["link_index"])


def test_no_pod_gets_a_gateway_of_any_route_through_the_nic(rig) -> None:  # type: ignore[no-untyped-def]
    """Only one gateway was kept out of the pool: the main table's default route's, else
    its first gateway route's. A second router on the fabric (.60: the pod got it, and
    its ADD then failed for good, the route through its own address refused), a rail's
    default route in a table of its own (.61) and a multipath route's nexthops (.58, .59)
    went to pods."""
    from cnirunner import sh

    rig.nic("rnic0", "198.51.100.1/26")  # and HPC_NET via .62
    ns = rig.node.ns
    sh("ip", "-n", ns, "route", "add", "203.0.113.0/24", "via", "198.51.100.60", "dev", "rnic0")
    sh("ip", "-n", ns, "route", "add", "default", "via", "198.51.100.61", "dev", "rnic0",
       "table", "200")
    sh("ip", "-n", ns, "route", "add", "198.18.0.0/16", "nexthop", "via", "198.51.100.58",
       "dev", "rnic0", "nexthop", "via", "198.51.100.59", "dev", "rnic0")
    ranges = {NET: {"rangeStart": "198.51.100.57", "rangeEnd": "198.51.100.62"}}
    chain = rig.chain("shared-multi", ipam={"ranges": ranges})
    first, second = rig.pod(), rig.pod()
    assert chain.add("c0", first.path, rdma_blocks(1)).rc == 0
    assert first.addrs("eth1") == ["198.51.100.57/26"]
    run = chain.add("c1", second.path, rdma_blocks(1))
    assert run.rc == 1 and run.code == 102, run
    _nothing_in(second)
    assert chain.delete("c1").rc == 0
    assert chain.delete("c0").rc == 0
