"""shared-host mode (IPVLAN L2 on every RDMA NIC, every pod at once) through the built
binary, on this VM's kernel. Oracle: ip -j and /proc/sys of the pods."""

from __future__ import annotations

import pytest
from cnirunner import ip_json, rdma_blocks
from vmrig import PodView, VmRig, assert_iface

pytestmark = [pytest.mark.vm, pytest.mark.root]

NET0, GW0 = "198.18.0.0/16", "198.51.100.14"
NET1, GW1 = "198.19.0.0/16", "198.51.100.30"


def test_every_pod_gets_every_nic(rig: VmRig) -> None:
    nic0 = rig.dummy("rdum0", "198.51.100.1/28", routes=[(NET0, GW0)])
    nic1 = rig.dummy("rdum1", "198.51.100.17/28", mtu=1450, routes=[(NET1, GW1)])
    a, b, c = rig.pod(), rig.pod("203.0.113.6/24"), rig.pod("203.0.113.7/24")
    chain = rig.chain("shared-host", [nic0, nic1])

    run_a = chain.add("ca", a.path, rdma_blocks(1), pod="pa")
    assert run_a.rc == 0, run_a
    run_b = chain.add("cb", b.path, rdma_blocks(1), pod="pb")
    assert run_b.rc == 0, run_b
    parents = tuple(ip_json(None, "link", "show", "dev", n)[0]["ifindex"] for n in (nic0, nic1))
    for pod, run, ip0, ip1 in ((a, run_a, "198.51.100.2/28", "198.51.100.18/28"),
                               (b, run_b, "198.51.100.3/28", "198.51.100.19/28")):
        assert [i["address"] for i in run.out["ips"][1:]] == [ip0, ip1], run
        view = PodView.read(pod, ["eth1", "eth2"])
        assert view.ours() == ["eth1", "eth2"]
        assert_iface(view, "eth1", ip=ip0, table=100, mtu=1500, hpc=[(NET0, GW0)],
                     kind="ipvlan")
        assert_iface(view, "eth2", ip=ip1, table=101, mtu=1450, hpc=[(NET1, GW1)],
                     kind="ipvlan")
        # eth1 is a child of rdum0, eth2 of rdum1, in both pods
        assert (view.links["eth1"]["link_index"], view.links["eth2"]["link_index"]) == parents

    # shared-host takes exactly one annotation block for this network
    files = rig.files()
    run = chain.add("cc", c.path, rdma_blocks(2), pod="pc")
    assert run.rc == 1 and run.code == 7, run
    assert PodView.read(c).ours() == [] and rig.files() == files

    for cid, pod in (("ca", a), ("cb", b)):
        run = chain.delete(cid)
        assert run.rc == 0 and run.out is None, run
        assert PodView.read(pod).ours() == []
    # the rig checks: no state left, the node netns exactly as before
