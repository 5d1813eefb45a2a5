"""exclusive mode with a physical (virtio-net PCI) NIC, through the built binary.

Unlike the veth stand-ins of the native tier, a physical NIC survives its pod: when
the pod netns dies the kernel moves it back to the root netns under its in-pod name,
down and without addresses or routes. DEL must then find it (by its bus device,
IFLA_PARENT_DEV_NAME) and restore name, address, routes, MTU and up-state.
"""

from __future__ import annotations

import json
import os

import pytest
import vmkit
from cnirunner import HPC_NET, hide_and_spoof, ip_json, link_detail, rdma_blocks
from support.proc import wait_for
from vmrig import NODE, SETTLE, PodView, VmRig, assert_iface, link_by

pytestmark = [pytest.mark.vm, pytest.mark.root]

GW = "198.51.100.14"
CIDR = "198.51.100.1/28"


def _ipv4(dev: str) -> list[str]:
    links = ip_json(None, "-4", "addr", "show", "dev", dev)
    return [f"{a['local']}/{a['prefixlen']}" for lk in links for a in lk.get("addr_info", [])]


def _assert_in_pod(pod_name: str, parent: str, mac: str) -> None:
    view = PodView.read(pod_name, ["eth1"])
    assert view.ours() == ["eth1"]
    assert_iface(view, "eth1", ip=CIDR, table=100, mtu=1400, hpc=[(HPC_NET, GW)], kind=None)
    link = view.links["eth1"]
    assert link.get("parentdev") == parent and link["address"] == mac, link
    # the fabric route is also in the pod's main table (the NIC is the pod's own)
    assert (HPC_NET, GW, "eth1", True) in view.table("main")


def test_virtio_nic_returns_after_its_pod_dies(rig: VmRig, virtio_nics: list[str]) -> None:
    nic = rig.borrow(virtio_nics[-1], rename="rnic0")  # in the pod it becomes eth1
    rig.configure(nic, CIDR, mtu=1400, routes=[(HPC_NET, GW)])
    host = link_detail("", nic)
    parent, mac = host["parentdev"], host["address"]
    pci = vmkit.pci_address(nic)
    assert pci is not None
    chain = rig.chain("exclusive", [nic])

    # a plain ADD/DEL first: DEL moves it out of the live pod
    pod = rig.pod()
    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.rc == 0, run
    _assert_in_pod(pod.name, parent, mac)
    assert link_by(NODE, parentdev=parent) is None
    assert chain.delete("c1").rc == 0
    assert PodView.read(pod).ours() == []
    assert rig.settled_changes() == {}

    # then the pod netns dies before DEL
    pod2 = rig.pod("203.0.113.6/24")
    run = chain.add("c2", pod2.path, rdma_blocks(1))
    assert run.rc == 0, run
    assert "pciID" not in json.dumps(run.out), run.out
    assert run.out["interfaces"][1] == {"name": "eth1", "mac": mac, "sandbox": pod2.path}, run
    assert run.out["ips"][1] == {"version": "4", "address": CIDR, "interface": 1,
                                 "gateway": GW}, run
    _assert_in_pod(pod2.name, parent, mac)
    # DEL will look for it by its bus device (IFLA_PARENT_DEV_NAME) first; for virtio-net
    # that is the virtio device above the PCI function, not the PCI address itself
    [state] = [json.loads(f.read_text()) for f in (rig.data_dir / "state").glob("*.json")]
    identity = state["interfaces"][0]["identity"]
    assert identity["parentDev"] == parent, state  # IFLA_PARENT_DEV_NAME, e.g. virtio10
    assert identity["pci"] == pci, state  # the PCI function above it
    rig.delete_pod(pod2)
    back = wait_for(lambda: link_by(NODE, parentdev=parent), timeout=SETTLE)
    assert back is not None, "the kernel did not return the NIC to the root netns"
    # the kernel's own return: the in-pod name, down, no IPv4 address, no routes
    assert back["ifname"] != nic and "UP" not in back["flags"], back
    assert _ipv4(back["ifname"]) == [], back
    assert not [r for r in ip_json(None, "-4", "route", "show", "table", "all")
                if r.get("dev") == back["ifname"]]

    run = chain.delete("c2")
    assert run.rc == 0 and run.out is None, run
    now = link_detail("", nic)
    assert (now["parentdev"], now["address"], now["mtu"]) == (parent, mac, 1400), now
    assert "UP" in now["flags"] and _ipv4(nic) == [CIDR], now
    assert vmkit.pci_address(nic) == pci  # the same PCI function, back under its name
    assert rig.files() == []
    # name, address, every route, MTU and up-state: the rig compares the whole root netns


def test_del_before_the_kernel_returns_the_nic_keeps_the_state(
        rig: VmRig, virtio_nics: list[str]) -> None:
    """Issue 14 item 6 on a real PCI NIC: the pod netns has lost its path but is still
    alive (held by a process), the NIC in it. DEL must not purge (that strands the NIC
    under its in-pod name): it waits, then fails with code 11 keeping the state; once
    the netns dies the kernel returns the NIC and the retried DEL restores it."""
    import subprocess

    nic = rig.borrow(virtio_nics[-1], rename="rnic0")
    rig.configure(nic, CIDR, mtu=1400, routes=[(HPC_NET, GW)])
    parent = link_detail("", nic)["parentdev"]
    chain = rig.chain("exclusive", [nic])
    pod = rig.pod()
    assert chain.add("c3", pod.path, rdma_blocks(1)).rc == 0
    holder = subprocess.Popen(["ip", "netns", "exec", pod.name, "sleep", "600"])
    try:
        # holding the netns means being in it, not only running: `ip netns exec` may
        # not have entered it yet when the path goes
        assert wait_for(lambda: holder.poll() is None and _in_netns(holder.pid, pod.path),
                        timeout=SETTLE)
        rig.delete_pod(pod)  # the path goes; the netns (and the NIC in it) stays
        run = chain.delete("c3")
        assert run.code == 11, run
        assert rig.files(), "the state must be kept for the retry"
        assert link_by(NODE, parentdev=parent) is None
    finally:
        holder.kill()
        holder.wait()
    assert wait_for(lambda: link_by(NODE, parentdev=parent), timeout=SETTLE) is not None
    run = chain.delete("c3")
    assert run.rc == 0 and run.out is None, run
    assert _ipv4(nic) == [CIDR]
    assert rig.files() == []


def _in_netns(pid: int, path: str) -> bool:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(path).st_ino
    except OSError:
        return False


def test_a_look_alike_is_never_taken_for_the_pci_nic(rig: VmRig, virtio_nics: list[str]
                                                     ) -> None:
    """Security: a pod with only CAP_NET_ADMIN hides the virtio NIC in a netns of its own
    and makes a veth with its name, MAC, our mark and address. DEL takes nothing of the
    pod's (code 11, state kept); once the hiding place dies the kernel returns the NIC
    to the root netns and DEL finds it by its bus device and restores it."""
    import signal

    nic = rig.borrow(virtio_nics[-1], rename="rnic0")
    rig.configure(nic, CIDR, mtu=1400, routes=[(HPC_NET, GW)])
    host = link_detail("", nic)
    parent, mac = host["parentdev"], host["address"]
    chain = rig.chain("exclusive", [nic])
    pod = rig.pod()
    assert chain.add("c4", pod.path, rdma_blocks(1)).rc == 0
    hideout = hide_and_spoof(pod.name, "eth1", CIDR)
    try:
        run = chain.delete("c4")
        assert run.code == 11 and "only looks like it" in run.out["msg"], run
        assert link_by(NODE, parentdev=parent) is None and link_by(NODE, address=mac) is None
        assert rig.files(), "the state must be kept for the retry"
    finally:
        os.kill(hideout, signal.SIGKILL)
    assert wait_for(lambda: link_by(NODE, parentdev=parent), timeout=SETTLE) is not None
    run = chain.delete("c4")
    assert run.rc == 0 and run.out is None, run
    now = link_detail("", nic)
    assert (now["parentdev"], now["address"]) == (parent, mac) and _ipv4(nic) == [CIDR]
    assert link_detail(pod.name, "eth1")["linkinfo"]["info_kind"] == "veth"  # not taken
    assert rig.files() == []
