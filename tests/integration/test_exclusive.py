"""exclusive: the NIC itself moves into the pod and comes back on DEL, end to end
through the built binary in a libcni-like chain. Oracle: ip -j and /proc/sys."""

from __future__ import annotations

import pytest
from cnirunner import HPC_NET, assert_rdma_iface, link_detail, rdma_blocks, sh

pytestmark = pytest.mark.root
PLUGIN_RUNNER = "binary"  # the session build: immune to edits of the tree mid-run

GW = "198.51.100.62"
HPC2 = "198.19.0.0/16"


def _nic(rig) -> str:
    return rig.nic("rnic0", "198.51.100.1/26", GW, mtu=1400)


def test_nic_moves_in_and_comes_back(rig, built_binary) -> None:
    _nic(rig)
    # a second fabric route as a routing daemon would own it: metric and protocol come back
    sh("ip", "-n", rig.node.ns, "route", "add", HPC2, "via", GW, "dev", "rnic0",
       "metric", "50", "proto", "bird")
    mac = rig.node.links()["rnic0"]["address"]
    pod = rig.pod()
    chain = rig.chain("exclusive", binary=built_binary)

    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.rc == 0, run
    assert [i["name"] for i in run.out["interfaces"]] == ["eth0", "eth1"]
    assert run.out["ips"][1] == {"version": "4", "address": "198.51.100.1/26", "interface": 1,
                                 "gateway": GW}

    # gone from the node (with its routes), in the pod with its address and HPC routes
    assert "rnic0" not in rig.node.links()
    assert not [r for r in rig.node.snapshot()["routes"] if "rnic0" in r]
    assert link_detail(pod.name, "eth1")["address"] == mac
    assert_rdma_iface(pod, "eth1", ip="198.51.100.1/26", table=100, mtu=1400,
                      hpc=[(HPC_NET, GW), (HPC2, GW)], kind="veth")
    assert any(r["dst"] == HPC_NET and r.get("gateway") == GW and r["dev"] == "eth1"
               for r in pod.routes("main"))
    assert chain.check("c1").rc == 0

    run = chain.delete("c1")
    assert run.rc == 0 and run.out is None, run
    assert sorted(pod.links()) == ["eth0", "lo"]
    # name, address, routes, MTU and up-state: the fixture compares the whole node netns
    assert rig.node_changes() == {}


def test_device_route_through_the_nic_comes_back(rig, built_binary) -> None:
    """A route without a gateway (``dev rnic0``) is not rebuilt by the kernel from the
    addresses: the plugin saves it, mirrors it into the pod and restores it on DEL."""
    _nic(rig)
    sh("ip", "-n", rig.node.ns, "route", "add", "203.0.113.128/25", "dev", "rnic0")
    pod = rig.pod()
    chain = rig.chain("exclusive", binary=built_binary)
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    assert any(r["dst"] == "203.0.113.128/25" and r["dev"] == "eth1" and "gateway" not in r
               for r in pod.routes(100))
    assert chain.delete("c1").rc == 0
    assert rig.node_changes() == {}


def test_down_nic_with_two_addresses_comes_back_as_it_was(rig, built_binary) -> None:
    rig.nic("rnic0", "198.51.100.1/26", None, up=False, extra_addrs=["198.51.100.3/26"])
    pod = rig.pod()
    chain = rig.chain("exclusive", binary=built_binary)
    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.rc == 0, run
    link = link_detail(pod.name, "eth1")
    assert "UP" in link["flags"]
    assert pod.addrs("eth1") == ["198.51.100.1/26", "198.51.100.3/26"]
    assert chain.delete("c1").rc == 0
    assert "UP" not in rig.node.links()["rnic0"]["flags"]
    assert rig.node_changes() == {}


def _added(rig, built_binary):  # type: ignore[no-untyped-def]
    """The NIC's MAC, the pod and the chain, once ADD moved the NIC into the pod."""
    _nic(rig)
    mac = rig.node.links()["rnic0"]["address"]
    pod = rig.pod()
    chain = rig.chain("exclusive", binary=built_binary)
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    return mac, pod, chain


def test_host_name_taken_meanwhile_uses_fallback(rig, built_binary) -> None:
    mac, pod, chain = _added(rig, built_binary)
    # something else takes the name rnic0 on the node
    sh("ip", "-n", rig.node.ns, "link", "add", "name", "rnic0", "type", "veth",
       "peer", "name", "squat")

    run = chain.delete("c1")
    assert run.rc == 0, run
    back = [lk for lk in rig.node.links().values() if lk["address"] == mac]
    assert len(back) == 1 and back[0]["ifname"] != "rnic0", back
    name = back[0]["ifname"]
    assert "UP" in back[0]["flags"] and back[0]["mtu"] == 1400
    assert sh("ip", "-n", rig.node.ns, "-4", "-br", "addr", "show", "dev", name).split()[2:] == \
        ["198.51.100.1/26"]
    assert sorted(pod.links()) == ["eth0", "lo"]
    # give the node back its shape: drop the squatter, rename the NIC
    sh("ip", "-n", rig.node.ns, "link", "del", "dev", "rnic0")
    sh("ip", "-n", rig.node.ns, "link", "set", "dev", name, "down")
    sh("ip", "-n", rig.node.ns, "link", "set", "dev", name, "name", "rnic0")
    sh("ip", "-n", rig.node.ns, "link", "set", "dev", "rnic0", "up")
    sh("ip", "-n", rig.node.ns, "route", "replace", HPC_NET, "via", GW, "dev", "rnic0")


def test_renamed_in_pod_is_found_by_mac(rig, built_binary) -> None:
    _nic(rig)
    pod = rig.pod()
    chain = rig.chain("exclusive", binary=built_binary)
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    sh("ip", "-n", pod.name, "link", "set", "dev", "eth1", "down")
    sh("ip", "-n", pod.name, "link", "set", "dev", "eth1", "name", "weird0", "alias", "")
    run = chain.delete("c1")
    assert run.rc == 0, run
    assert sorted(pod.links()) == ["eth0", "lo"]
    assert rig.node_changes() == {}


def test_a_mac_the_pod_set_does_not_come_back_to_the_host(rig, built_binary) -> None:
    mac, pod, chain = _added(rig, built_binary)
    sh("ip", "-n", pod.name, "link", "set", "dev", "eth1", "address", "02:00:5e:00:53:99")
    run = chain.delete("c1")
    assert run.rc == 0, run
    assert rig.node.links()["rnic0"]["address"] == mac
    assert rig.node_changes() == {}


def test_second_pod_gets_104_and_nothing(rig, built_binary) -> None:
    _nic(rig)
    pod1, pod2 = rig.pod(), rig.pod("203.0.113.6/24")
    chain = rig.chain("exclusive", binary=built_binary)
    assert chain.add("c1", pod1.path, rdma_blocks(1)).rc == 0
    files = rig.files()
    run = chain.add("c2", pod2.path, rdma_blocks(1), pod="p2")
    assert run.rc == 1 and run.code == 104, run
    assert "rnic0" in run.out["msg"]
    assert sorted(pod2.links()) == ["eth0", "lo"]
    assert rig.files() == files
    # the runtime's DEL after the failed ADD must not touch the first pod's NIC
    assert chain.delete("c2").rc == 0
    assert "eth1" in pod1.links() and rig.files() == files
    assert chain.check("c1").rc == 0
    assert chain.delete("c1").rc == 0


def test_second_pod_asking_by_device_id_gets_104(rig, built_binary) -> None:
    _nic(rig)
    pod1, pod2 = rig.pod(), rig.pod("203.0.113.6/24")
    chain = rig.chain("exclusive", binary=built_binary)
    assert chain.add("c1", pod1.path, rdma_blocks(1)).rc == 0
    files = rig.files()
    chain.plugin["runtimeConfig"] = {"deviceID": "rnic0"}
    run = chain.add("c2", pod2.path, rdma_blocks(1), pod="p2")
    assert run.rc == 1 and run.code == 104, run
    assert sorted(pod2.links()) == ["eth0", "lo"] and rig.files() == files
    assert chain.delete("c2").rc == 0
    assert chain.delete("c1").rc == 0


@pytest.mark.parametrize("device_conf", [{"mac": "02:00:5e:10:20:30"},
                                         {"ips": ["198.51.100.9"]}])
def test_mac_and_ips_unsupported(rig, built_binary, device_conf) -> None:
    _nic(rig)
    pod = rig.pod()
    chain = rig.chain("exclusive", binary=built_binary)
    run = chain.add("c1", pod.path, rdma_blocks(1, **device_conf))
    assert run.rc == 1 and run.code == 2, run
    assert sorted(pod.links()) == ["eth0", "lo"] and rig.files() == []
    assert chain.delete("c1").rc == 0


def test_repeated_add_returns_same(rig, built_binary) -> None:
    _nic(rig)
    pod = rig.pod()
    chain = rig.chain("exclusive", binary=built_binary)
    first = chain.add("c1", pod.path, rdma_blocks(1))
    assert first.rc == 0, first
    again = chain.add("c1", pod.path, rdma_blocks(1))
    assert again.rc == 0, again
    assert again.out == first.out
    assert pod.addrs("eth1") == ["198.51.100.1/26"]
    assert chain.delete("c1").rc == 0


def test_gc_returns_the_nic(rig) -> None:
    _nic(rig)
    pod = rig.pod()
    chain = rig.chain("exclusive", cni_version="1.1.0")
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    assert "rnic0" not in rig.node.links()
    run = chain.gc([])
    assert run.rc == 0, run
    assert sorted(pod.links()) == ["eth0", "lo"]
    assert rig.node_changes() == {} and rig.files() == []
