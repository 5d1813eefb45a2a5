"""Security: what a pod stacks on or names onto the exclusive NIC it was given stays
with the pod, and the NIC goes home as it came, never stranded or standing for another.

- A link the pod stacks on the NIC (a macvlan: its lower device is the NIC) outlived
  DEL and kept sending through the NIC, on the host and then in the next pod that got
  it, with the first pod's address: DEL deletes it before the NIC goes home.
- An alternative name the pod gives the NIC went home with it: another NIC's host
  name made the host (and the next ADD) find this NIC under that name; its own host
  name made the rename home fail (code 5) and the NIC die with the private netns it
  passed through. DEL deletes every alternative name ADD did not record and puts back
  the recorded ones the pod deleted.
- A NIC that cannot go on to the host (every name it could take there is taken) goes
  back into the pod: DEL answers 11 and keeps the state, and the retry returns it.

The pod's changes are made by a process in the pod netns with only CAP_NET_ADMIN.
Oracle: ``ip -j`` of the node and the pods (the rig compares the whole node netns,
alternative names too, with how it was before), and the store on disk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cnirunner import as_pod_process, ip_json, link_detail, rdma_blocks, sh

pytestmark = pytest.mark.root

STACK = ("ip link set eth1 down; ip link set eth1 name foo; ip link set foo up; "
         "ip link add link foo name mv0 type macvlan mode bridge; "
         "ip addr add 198.51.100.40/26 dev mv0; ip link set mv0 up")


def _links(ns: str) -> dict[str, dict[str, Any]]:
    return {lk["ifname"]: lk for lk in ip_json(ns, "-d", "link", "show")}


def _on_node(rig, name: str) -> dict[str, Any] | None:  # type: ignore[no-untyped-def]
    """``ip link show <name>`` on the node (the kernel resolves alternative names)."""
    out = sh("ip", "-n", rig.node.ns, "-j", "link", "show", "dev", name, check=False)
    return json.loads(out)[0] if out.strip().startswith("[") else None


def test_del_deletes_the_links_a_pod_stacked_on_the_nic(rig, faults) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0")
    mac = rig.node.links()["rnic0"]["address"]
    pod, other = rig.pod(), rig.pod("203.0.113.6/24")
    chain = faults.chain("exclusive")
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    as_pod_process(pod.name, STACK)
    mv0 = link_detail(pod.name, "mv0")
    assert mv0["linkinfo"]["info_kind"] == "macvlan" and mv0["link"] == "foo"

    run = chain.delete("c1")
    assert run.rc == 0, run
    # nothing of the pod's rides on the NIC: no link left on it, the address gone
    assert sorted(_links(pod.name)) == ["eth0", "lo"], _links(pod.name)
    assert not ip_json(pod.name, "-4", "addr", "show", "to", "198.51.100.40")
    assert rig.node.links()["rnic0"]["address"] == mac
    # the next pod gets the NIC, and the first pod has nothing on it
    assert chain.add("c2", other.path, rdma_blocks(1)).rc == 0
    assert "eth1" in other.links() and sorted(_links(pod.name)) == ["eth0", "lo"]
    assert chain.delete("c2").rc == 0
    assert rig.files() == []


def _two_nics(rig, faults):  # type: ignore[no-untyped-def]
    rig.nic("rnic0")
    rig.nic("rnic1", "198.51.100.65/26", routes=[])
    # an alternative name of the host's own (as udev gives a NIC): it must come back
    sh("ip", "-n", rig.node.ns, "link", "property", "add", "dev", "rnic0", "altname", "rail0")
    macs = {n: rig.node.links()[n]["address"] for n in ("rnic0", "rnic1")}
    return faults.chain("exclusive", ("rnic0", "rnic1")), macs


def test_an_alternative_name_a_pod_gives_the_nic_stays_behind(rig, faults) -> None:  # type: ignore[no-untyped-def]
    chain, macs = _two_nics(rig, faults)
    a, b, c = rig.pod(), rig.pod("203.0.113.6/24"), rig.pod("203.0.113.7/24")
    assert chain.add("c1", a.path, rdma_blocks(1)).rc == 0
    assert chain.add("c2", b.path, rdma_blocks(1)).rc == 0
    assert link_detail(a.name, "eth1")["address"] == macs["rnic0"]
    assert link_detail(a.name, "eth1")["altnames"] == ["rail0"]
    as_pod_process(a.name, "ip link property del dev eth1 altname rail0; "
                           "ip link property add dev eth1 altname rnic1")
    assert link_detail(a.name, "eth1")["altnames"] == ["rnic1"]

    run = chain.delete("c1")
    assert run.rc == 0, run
    # rnic0 back with the host's alternative name only; no rnic1 on the node
    assert link_detail(rig.node.ns, "rnic0").get("altnames") == ["rail0"]
    assert _on_node(rig, "rnic1") is None
    run = chain.delete("c2")
    assert run.rc == 0, run
    assert rig.node.links()["rnic1"]["address"] == macs["rnic1"]
    assert "is taken" not in faults.log_text()
    # rnic1 is rnic1 again: the next pod given it gets it, not rnic0
    chain1 = faults.chain("exclusive", ("rnic1",))
    assert chain1.add("c3", c.path, rdma_blocks(1)).rc == 0
    assert link_detail(c.name, "eth1")["address"] == macs["rnic1"]
    assert "rnic0" in rig.node.links()
    assert chain1.delete("c3").rc == 0
    assert rig.files() == []


def test_a_recorded_alternative_name_the_host_took_meanwhile(rig, faults) -> None:  # type: ignore[no-untyped-def]
    """The NIC's own altname rail0, recorded by ADD, is given to another host link while
    the NIC is in the pod: the kernel refuses the move home (EEXIST), and DEL answered
    11 for as long as the host kept the name. It comes home without it."""
    chain, macs = _two_nics(rig, faults)
    pod = rig.pod()
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    sh("ip", "-n", rig.node.ns, "link", "add", "rail0", "type", "veth", "peer", "name", "rail0p")
    try:
        run = chain.delete("c1")
        assert run.rc == 0, run
        assert rig.node.links()["rnic0"]["address"] == macs["rnic0"]
        assert "altnames" not in link_detail(rig.node.ns, "rnic0")
        assert "without the alternative name rail0: the host has given another link" \
            in faults.log_text()
    finally:
        sh("ip", "-n", rig.node.ns, "link", "del", "rail0")
    # the node as it was (the rig compares it): the operator gives the name back
    sh("ip", "-n", rig.node.ns, "link", "property", "add", "dev", "rnic0", "altname", "rail0")
    assert rig.files() == []


def test_an_alternative_name_of_the_nic_s_own_host_name(rig, faults) -> None:  # type: ignore[no-untyped-def]
    """The pod names the NIC after its host name: the rename home failed (EEXIST, code 5)
    and the NIC died with the private netns."""
    rig.nic("rnic0")
    mac = rig.node.links()["rnic0"]["address"]
    pod = rig.pod()
    chain = faults.chain("exclusive")
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    as_pod_process(pod.name, "ip link property add dev eth1 altname rnic0")
    run = chain.delete("c1")
    assert run.rc == 0, run
    assert rig.node.links()["rnic0"]["address"] == mac
    assert "altnames" not in link_detail(rig.node.ns, "rnic0")
    assert rig.files() == []


def _fallback(mac: str) -> str:  # rdma_cni.datapath.physical.fallback_name of a veth
    return "rdma" + mac.replace(":", "")[-11:]


def test_a_nic_with_every_host_name_taken_goes_back_into_the_pod(rig, faults) -> None:  # type: ignore[no-untyped-def]
    """Its name, its fallback and ``rdmaif<index>`` are all taken on the node: DEL failed
    with 5 and the NIC was left in the private netns, destroyed with it. It goes back
    into the pod under its name there: 11, the state kept; the retry returns it."""
    rig.nic("rnic0")
    mac = rig.node.links()["rnic0"]["address"]
    pod = rig.pod()
    chain = faults.chain("exclusive")
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    before = link_detail(pod.name, "eth1")
    blockers = ["rnic0", _fallback(mac), f"rdmaif{before['ifindex']}"]
    for name in blockers:
        sh("ip", "-n", rig.node.ns, "link", "add", name, "type", "ifb")

    run = chain.delete("c1")
    assert run.code == 11, run
    assert "back in the pod as eth1" in run.out["msg"], run.out
    back = link_detail(pod.name, "eth1")
    assert (back["address"], back["ifindex"], back["ifalias"]) == (
        mac, before["ifindex"], before["ifalias"])
    assert not [lk for lk in ip_json(rig.node.ns, "link", "show") if lk["address"] == mac]
    [state] = (Path(rig.data_dir) / "state").glob("*.json")
    assert "nicPendingSince" in json.loads(state.read_text())
    assert "nics/rnic0" in rig.files()

    sh("ip", "-n", rig.node.ns, "link", "del", blockers[0])
    run = chain.delete("c1")
    assert run.rc == 0, run
    for name in blockers[1:]:
        sh("ip", "-n", rig.node.ns, "link", "del", name)
    assert rig.node.links()["rnic0"]["address"] == mac
    assert sorted(pod.links()) == ["eth0", "lo"]
    assert rig.files() == []
