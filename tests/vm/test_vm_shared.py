"""shared mode (IPVLAN L2, one pod per NIC) through the built binary, on this VM's
kernel (the host kernel has no ipvlan). Oracle: ip -j and /proc/sys of the pod."""

from __future__ import annotations

import pytest
from cnirunner import HPC_NET, rdma_blocks
from vmrig import NODE, PodView, VmRig, assert_iface, link_by

pytestmark = [pytest.mark.vm, pytest.mark.root]

GW = "198.51.100.14"
NIC_CIDR = "198.51.100.1/28"
HPC = [(HPC_NET, GW)]
# execute.steps_for, one shared interface: 0 check name, 1 create ipvlan, 2 rename,
# 3 sysctls, 4 addresses, 5 up, 6 routes, 7 rule; 8 = after the last step
FAIL_AT = {2: "ipvlan made under its temporary name", 5: "addressed, still down",
           8: "every step applied"}


def _nic(rig: VmRig) -> str:
    return rig.dummy("rdum0", NIC_CIDR, mtu=1400, routes=HPC)


def _untouched(view: PodView, fresh: PodView) -> None:
    """The pod shows exactly what it showed before our ADD (links, addresses, rules,
    routes of every table)."""
    assert view.ours() == [], view.links
    assert (view.ipv4, view.rules) == (fresh.ipv4, fresh.rules)
    assert view.route_keys() == fresh.route_keys()


def test_one_pod_per_nic(rig: VmRig) -> None:
    nic = _nic(rig)
    a, b = rig.pod(), rig.pod("203.0.113.6/24")
    fresh_b = PodView.read(b)
    chain = rig.chain("shared", [nic])

    run = chain.add("ca", a.path, rdma_blocks(1), pod="pa")
    assert run.rc == 0, run
    assert run.out["ips"][1] == {"version": "4", "address": "198.51.100.2/28", "interface": 1,
                                 "gateway": GW}
    view = PodView.read(a, ["eth1"])
    assert view.ours() == ["eth1"]
    assert_iface(view, "eth1", ip="198.51.100.2/28", table=100, mtu=1400, hpc=HPC,
                 kind="ipvlan")
    parent = link_by(NODE, ifname=nic)
    assert parent is not None
    link = view.links["eth1"]
    assert link.get("link_index") == parent["ifindex"], link  # a child of rdum0
    assert link["address"] == parent["address"]  # ipvlan shares the parent's MAC

    # the single NIC serves pod A: pod B is refused and left untouched
    files = rig.files()
    run = chain.add("cb", b.path, rdma_blocks(1), pod="pb")
    assert run.rc == 1 and run.code == 104, run
    assert nic in run.out["msg"], run
    _untouched(PodView.read(b), fresh_b)
    assert rig.files() == files
    assert chain.delete("cb").rc == 0  # the runtime's DEL after the failed ADD
    assert PodView.read(a).ipv4["eth1"] == ["198.51.100.2/28"] and rig.files() == files

    run = chain.delete("ca")
    assert run.rc == 0 and run.out is None, run
    view = PodView.read(a)
    assert view.ours() == [] and view.rule_of("198.51.100.2") == [] and view.table(100) == set()
    assert rig.files() == []

    # freed: pod B gets it now (and the address A had)
    run = chain.add("cb", b.path, rdma_blocks(1), pod="pb")
    assert run.rc == 0, run
    assert_iface(PodView.read(b, ["eth1"]), "eth1", ip="198.51.100.2/28", table=100,
                 mtu=1400, hpc=HPC, kind="ipvlan")
    assert chain.delete("cb").rc == 0
    _untouched(PodView.read(b), fresh_b)


def test_slash30_nic_is_refused(rig: VmRig) -> None:
    nic = rig.dummy("rdum1", "198.51.100.33/30")
    pod = rig.pod()
    fresh = PodView.read(pod)
    chain = rig.chain("shared", [nic])
    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.rc == 1 and run.code == 100, run
    assert nic in run.out["msg"] and "/30" in run.out["msg"], run
    _untouched(PodView.read(pod), fresh)
    assert rig.files() == []
    assert chain.delete("c1").rc == 0


def test_failed_add_rolls_back(rig: VmRig) -> None:
    nic = _nic(rig)
    pod = rig.pod()
    fresh = PodView.read(pod)
    chain = rig.chain("shared", [nic])
    for k, what in FAIL_AT.items():
        run = chain.add(f"c{k}", pod.path, rdma_blocks(1),
                        env={"RDMA_CNI_TEST_FAIL_AT_STEP": str(k)})
        assert run.rc == 1 and run.code == 5, (what, run)
        assert f"step {k}" in run.out["msg"], (what, run)
        _untouched(PodView.read(pod), fresh)
        assert rig.files() == [], (what, rig.files())
        assert rig.settled_changes() == {}, what
    run = chain.delete(f"c{k}", netns=pod.path)  # the runtime's DEL after a failed ADD
    assert run.rc == 0 and run.out is None, run


def test_del_is_idempotent_and_survives_a_vanished_netns(rig: VmRig) -> None:
    nic = _nic(rig)
    pod = rig.pod()
    chain = rig.chain("shared", [nic])

    # CNI_NETNS="": the state, claim and reservation go; the link dies with the netns
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    run = chain.delete("c1", netns="")
    assert run.rc == 0 and run.out is None, run
    assert rig.files() == []
    rig.delete_pod(pod)

    # the pod netns is gone before DEL, then DEL comes twice. The dead pod's ipvlan may
    # hold .2 until the kernel's async netns cleanup ran (ipvlan refuses a duplicate
    # address), so this pod asks for .5
    pod2 = rig.pod("203.0.113.6/24")
    run = chain.add("c2", pod2.path, rdma_blocks(1, ips=["198.51.100.5"]))
    assert run.rc == 0 and run.out["ips"][1]["address"] == "198.51.100.5/28", run
    rig.delete_pod(pod2)
    for _ in range(2):
        run = chain.delete("c2", netns=pod2.path)
        assert run.rc == 0 and run.out is None, run
        assert rig.files() == []
