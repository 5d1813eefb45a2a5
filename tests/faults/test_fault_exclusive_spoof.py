"""Security: a pod cannot make DEL take a link of its own making for the exclusive NIC.

A pod with CAP_NET_ADMIN (RDMA workloads often have it) hides the NIC it was given in
a netns of its own and makes a veth with the NIC's name, MAC and our mark (and even
the index the NIC had in the pod), carrying the NIC's address. DEL must find the NIC
only under the identity ADD recorded (bus device, permanent MAC, kind, and for a veth
stand-in such as the ones here, its peer in the node's fabric netns, which must point
back at it): it does not take the look-alike to the host, fails with code 11 and
keeps the state (the NIC claim too) for a retry. A NIC with no bus device and no such
peer is refused at ADD. The stand-in
is virtual: it dies with the pod's netns, and then DEL releases the attachment with
nothing taken from the pod. (A physical NIC comes back to the host when those netns
die, and DEL restores it: tests/vm/test_vm_exclusive.py.)

The spoof is made by a process in the pod netns whose only capability is
CAP_NET_ADMIN (``setpriv --bounding-set``), its hiding place a netns in a user
namespace of its own (no other capability needed). Oracle: ``ip -j`` of the node and
the pod, and the store on disk.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from chroot import USERNS_REASON, under_chroot
from cnirunner import hide_and_spoof, ip_json, link_detail, rdma_blocks

pytestmark = pytest.mark.root

def _spoof(pod, same_index: bool = False) -> int:  # type: ignore[no-untyped-def]
    """The pod hides eth1 and makes a look-alike (with ``same_index``, under the index
    the NIC had in the pod); the PID holding the hiding place."""
    real = link_detail(pod.name, "eth1")
    hideout = hide_and_spoof(pod.name, "eth1", "198.51.100.1/26", same_index)
    fake = link_detail(pod.name, "eth1")
    assert fake["linkinfo"]["info_kind"] == "veth"
    assert (fake["ifindex"] == real["ifindex"]) is same_index
    assert (fake["address"], fake["ifalias"]) == (real["address"], real["ifalias"])
    return hideout


needs_userns = pytest.mark.skipif(under_chroot(), reason=USERNS_REASON)


@needs_userns
def test_del_never_takes_a_look_alike_of_the_nic(rig, faults) -> None:  # type: ignore[no-untyped-def]
    _del_refuses_the_look_alike(rig, faults, same_index=False)


@needs_userns
def test_del_never_takes_a_look_alike_with_the_nic_s_own_index(rig, faults) -> None:  # type: ignore[no-untyped-def]
    """The hiding place frees the NIC's index in the pod, and the look-alike takes it:
    kind, name, MAC, mark and index all match. The stand-in has no bus device; what
    the pod cannot forge is its veth peer, which stays in the node's fabric netns and
    points back at the NIC."""
    _del_refuses_the_look_alike(rig, faults, same_index=True)


def _del_refuses_the_look_alike(rig, faults, same_index: bool) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0")
    mac = rig.node.links()["rnic0"]["address"]
    pod = rig.pod()
    chain = faults.chain("exclusive")
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    hideout = _spoof(pod, same_index)
    try:
        run = chain.delete("c1")
        assert run.code == 11, run
        assert "only looks like it" in run.out["msg"], run.out
        # nothing of the pod's came to the host; the look-alike is where the pod made it
        assert not [lk for lk in ip_json(rig.node.ns, "link", "show")
                    if lk["address"] == mac or lk["ifname"] == "rnic0"]
        assert not ip_json(rig.node.ns, "-4", "addr", "show", "to", "198.51.100.1")
        assert "eth1" in pod.links()
        [state] = (Path(rig.data_dir) / "state").glob("*.json")
        assert "nicPendingSince" in json.loads(state.read_text())
        assert "nics/rnic0" in rig.files(), "the NIC claim must be kept"
        assert chain.delete("c1").code == 11  # the retry: the same, still nothing taken
    finally:
        os.kill(hideout, signal.SIGKILL)
    # the pod goes (and the stand-in with its hiding place: a virtual NIC dies with its
    # netns): DEL releases the attachment, the look-alike gone with the pod
    rig.node.delete_pod(pod)
    rig.gone.add("rnic0")
    run = chain.delete("c1")
    assert run.rc == 0, run
    assert rig.files() == []
    assert not [lk for lk in ip_json(rig.node.ns, "link", "show") if lk["address"] == mac]


def test_a_nic_with_no_bus_device_and_no_peer_is_refused_at_add(rig, faults) -> None:  # type: ignore[no-untyped-def]
    """An ifb has nothing a pod cannot copy (kind, name, MAC, index): exclusive ADD
    refuses it (code 104, one line) and leaves the node and the store as they were."""
    rig.nic("rnic0", kind="ifb")
    pod = rig.pod()
    chain = faults.chain("exclusive")
    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.code == 104, run
    assert run.out["msg"] == ("exclusive mode cannot take RDMA NIC rnic0: it is a link of "
                              "kind ifb with no bus device, which a pod could copy (kind, "
                              "name, MAC and index) for DEL to take back in its place"), run.out
    assert "\n" not in run.err.strip() and "Traceback" not in run.err
    assert "rnic0" in rig.node.links() and "eth1" not in pod.links()
    assert rig.files() == []
    assert chain.delete("c1").rc == 0
