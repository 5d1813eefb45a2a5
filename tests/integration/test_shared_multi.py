"""shared-multi (macvlan bridge) end to end through the built binary, chained after a
vpc-cni-shaped primary the way libcni runs a conflist. Oracle: ip -j and /proc/sys."""

from __future__ import annotations

import pytest
from cnirunner import (
    HPC_NET,
    assert_rdma_iface,
    link_detail,
    rdma_blocks,
    rule_of,
    sh,
    table_routes,
    vpc_result,
)

pytestmark = pytest.mark.root
PLUGIN_RUNNER = "binary"  # the session build: immune to edits of the tree mid-run

GW = "198.51.100.62"
HPC2 = "198.19.0.0/16"


def _two_nics(rig) -> None:
    rig.nic("rnic0", "198.51.100.1/26", GW, mtu=9000)
    rig.nic("rnic1", "198.51.100.65/26", mtu=9000, routes=[(HPC2, "198.51.100.126")])


def _pod_view(pod) -> dict:
    eth0 = link_detail(pod.name, "eth0")
    return {"eth0": {k: eth0[k] for k in ("ifname", "mtu", "address", "flags")},
            "eth0_addrs": pod.addrs("eth0"), "main": pod.routes("main")}


def test_chain_add_check_del(rig, built_binary) -> None:
    _two_nics(rig)
    pod = rig.pod()
    before = _pod_view(pod)
    chain = rig.chain("shared-multi", ["rnic0", "rnic1"], binary=built_binary)

    run = chain.add("c1", pod.path, rdma_blocks(2))
    assert run.rc == 0, run

    # the result: prevResult's entries kept as they were, ours appended (cniVersion 0.4.0)
    res = run.out
    assert res["cniVersion"] == "0.4.0"
    assert res["interfaces"][0] == {"name": "eth0", "sandbox": pod.path, "mac": "not-a-mac"}
    assert [i["name"] for i in res["interfaces"]] == ["eth0", "eth1", "eth2"]
    assert res["ips"][0]["address"] == "203.0.113.5/24"
    ours = [(ip["address"], ip["interface"], ip["version"]) for ip in res["ips"][1:]]
    assert ours == [("198.51.100.2/26", 1, "4"), ("198.51.100.66/26", 2, "4")]
    assert res["routes"] == [{"dst": "0.0.0.0/0", "gw": "203.0.113.1"}]

    # the kernel's view
    assert_rdma_iface(pod, "eth1", ip="198.51.100.2/26", table=100, mtu=9000,
                      hpc=[(HPC_NET, GW)])
    assert_rdma_iface(pod, "eth2", ip="198.51.100.66/26", table=101, mtu=9000,
                      hpc=[(HPC2, "198.51.100.126")])
    macs = {lk["ifname"]: lk["address"] for lk in pod.links().values()}
    assert [i["mac"] for i in res["interfaces"][1:]] == [macs["eth1"], macs["eth2"]]
    # no default route added anywhere, eth0 and the main table untouched
    after = _pod_view(pod)
    assert after["eth0"] == before["eth0"] and after["eth0_addrs"] == before["eth0_addrs"]
    defaults = [r for r in after["main"] if r["dst"] == "default"]
    assert defaults == [r for r in before["main"] if r["dst"] == "default"]
    for table in (100, 101):
        assert not [r for r in table_routes(pod.name, table) if r[0] == "default"]
    # macvlans live in the pod, nothing was added to the node
    assert rig.node_changes() == {}

    assert chain.check("c1").rc == 0

    run = chain.delete("c1")
    assert run.rc == 0 and run.out is None, run
    assert sorted(pod.links()) == ["eth0", "lo"]
    assert rule_of(pod.name, "198.51.100.2") == [] and rule_of(pod.name, "198.51.100.66") == []
    assert _pod_view(pod) == before


def test_repeated_add_returns_same(rig, built_binary) -> None:
    rig.nic()
    pod = rig.pod()
    chain = rig.chain("shared-multi", binary=built_binary)
    first = chain.add("c1", pod.path, rdma_blocks(2))
    assert first.rc == 0, first
    again = chain.add("c1", pod.path, rdma_blocks(2))
    assert again.rc == 0, again
    assert again.out["interfaces"] == first.out["interfaces"]
    assert again.out["ips"] == first.out["ips"]
    assert pod.addrs("eth1") == ["198.51.100.2/26"] and pod.addrs("eth2") == ["198.51.100.3/26"]
    assert len(rig.files()) == 3  # state + two reservations
    assert chain.delete("c1").rc == 0


def test_names_follow_annotation_positions(rig, built_binary) -> None:
    rig.nic()
    pod = rig.pod()
    chain = rig.chain("shared-multi", binary=built_binary)
    other = {"cniConf": {"name": "other-net"}}
    blocks = [other, {"cniConf": {"name": "rdma"}}, other,
              {"cniConf": {"name": "rdma"}, "deviceConf": {"ifName": "roce7"}},
              {"cniConf": {"name": "rdma"}}]
    run = chain.add("c1", pod.path, blocks)
    assert run.rc == 0, run
    assert [i["name"] for i in run.out["interfaces"]] == ["eth0", "eth2", "roce7", "eth5"]
    assert sorted(pod.links()) == ["eth0", "eth2", "eth5", "lo", "roce7"]
    # k-th interface (creation order) uses table 100+k
    assert rule_of(pod.name, "198.51.100.2") == [(20000, "100")]
    assert rule_of(pod.name, "198.51.100.3") == [(20000, "101")]
    assert rule_of(pod.name, "198.51.100.4") == [(20000, "102")]
    assert chain.delete("c1").rc == 0
    assert sorted(pod.links()) == ["eth0", "lo"]


def test_name_in_use_is_103_and_leaves_nothing(rig, built_binary) -> None:
    rig.nic()
    pod = rig.pod()
    # something else already holds eth2 in the pod
    sh("ip", "-n", pod.name, "link", "add", "name", "eth2", "type", "veth", "peer", "name", "x2")
    before = pod.links()
    before_rules = pod.rules()
    chain = rig.chain("shared-multi", binary=built_binary)
    run = chain.add("c1", pod.path, rdma_blocks(2))
    assert run.rc == 1 and run.code == 103, run
    assert "eth2" in run.out["msg"]
    assert sorted(pod.links()) == sorted(before)
    assert pod.rules() == before_rules
    assert pod.addrs("eth2") == []
    assert rig.files() == []
    # the runtime follows a failed ADD with DEL: it succeeds and removes nothing of others'
    assert chain.delete("c1").rc == 0
    assert sorted(pod.links()) == sorted(before)


def test_mtu_parent_lower_and_higher(rig, built_binary) -> None:
    rig.nic(mtu=9000)
    pod = rig.pod()
    chain = rig.chain("shared-multi", binary=built_binary, mtu=4000)
    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.rc == 0, run
    assert link_detail(pod.name, "eth1")["mtu"] == 4000
    assert run.out["interfaces"][1].get("mtu", 4000) == 4000
    assert chain.delete("c1").rc == 0

    high = rig.chain("shared-multi", binary=built_binary, mtu=9100)
    run = high.add("c2", pod.path, rdma_blocks(1))
    assert run.rc == 1 and run.code == 7, run
    assert "9100" in run.out["msg"] and "rnic0" in run.out["msg"]
    assert sorted(pod.links()) == ["eth0", "lo"] and rig.files() == []
    assert high.delete("c2").rc == 0


def test_device_conf_mac_honoured(rig, built_binary) -> None:
    rig.nic()
    pod = rig.pod()
    chain = rig.chain("shared-multi", binary=built_binary)
    run = chain.add("c1", pod.path, rdma_blocks(1, mac="02:00:5e:10:20:30"))
    assert run.rc == 0, run
    assert link_detail(pod.name, "eth1")["address"] == "02:00:5e:10:20:30"
    assert run.out["interfaces"][1]["mac"] == "02:00:5e:10:20:30"
    assert chain.delete("c1").rc == 0


def test_pod_without_our_blocks_passes_through(rig, built_binary) -> None:
    rig.nic()
    pod = rig.pod()
    chain = rig.chain("shared-multi", binary=built_binary)
    prev = vpc_result(pod.path)
    run = chain.add("c1", pod.path, [{"cniConf": {"name": "other-net"}}], prev=prev)
    assert run.rc == 0, run
    assert run.out == prev
    assert sorted(pod.links()) == ["eth0", "lo"] and rig.files() == []
    assert chain.delete("c1").rc == 0


@pytest.mark.parametrize("version", ["1.0.0", "1.1.0"])
def test_newer_list_versions(rig, built_binary, version: str) -> None:
    rig.nic()
    pod = rig.pod()
    chain = rig.chain("shared-multi", binary=built_binary, cni_version=version)
    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.rc == 0, run
    assert run.out["cniVersion"] == version
    assert run.out["ips"][1] == {"address": "198.51.100.2/26", "interface": 1,
                                 "gateway": GW}
    assert chain.check("c1").rc == 0
    assert chain.delete("c1").rc == 0


def test_host_netns_as_pod_is_refused(rig) -> None:
    rig.nic()
    chain = rig.chain("shared-multi")
    run = chain.add("c1", rig.node.path, rdma_blocks(1))
    assert run.rc == 1 and run.code == 4, run
    assert rig.files() == []
    assert chain.delete("c1", netns=rig.node.path, blocks=rdma_blocks(1)).rc == 0
