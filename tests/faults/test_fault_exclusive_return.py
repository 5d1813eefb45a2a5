"""Issue 14 item 6: an exclusive NIC must not be stranded under a kernel name when DEL
runs after the pod's netns path is gone but before the kernel has returned the NIC.

Model (native, veth stand-in): the pod netns loses its path (``ip netns del``) but
stays alive, held by a process, with the NIC in it: exactly the window in which a
dying pod netns still holds a physical NIC. (ADD goes through the resident server
on that path; a DEL whose netns path is gone always runs in-process.) The stand-in's
saved identity names a bus device that exists on this machine, as a physical
NIC's does (a veth has none, and a virtual device dies with its netns, so DEL
rightly does not wait for one), and says it comes back to the node with the index it
has in the pod (the kernel keeps a returning NIC's index when the node has it free:
the test checks it does); with no sysfs device of its own, a veth is then known by
that index only, as a NIC without a bus device is.
The test plays the kernel: it moves the NIC back to the node, down, under its
in-pod name. DEL waits (bounded) for it and restores it; past the wait it fails
with code 11 and keeps the state, and the retry restores it. The VM tier does the
same with a real virtio PCI NIC (tests/vm/test_vm_exclusive.py).

Oracle: the rig asserts the node netns is exactly as before (name, address, route,
MTU, up-state of rnic0) and the data dir is empty."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from cnirunner import ip_json, link_detail, rdma_blocks, sh

pytestmark = pytest.mark.root
WAIT = 10.0  # rdma_cni.datapath.teardown.RETURN_WAIT


def _bus_device() -> str:
    devices = sorted(os.listdir("/sys/bus/pci/devices")) if os.path.isdir(
        "/sys/bus/pci/devices") else []
    if not devices:
        pytest.skip("no PCI device on this machine to stand for the NIC's")
    return devices[0]


def _give_identity(rig, pod) -> int:  # type: ignore[no-untyped-def]
    """The stand-in's record: a bus device, back on the node under its pod index."""
    [path] = (Path(rig.data_dir) / "state").glob("*.json")
    state = json.loads(path.read_text())
    index = link_detail(pod.name, "eth1")["ifindex"]
    state["interfaces"][0]["identity"].update(pci=_bus_device(), ifindex=index,
                                              ifindexNetns="host")
    path.write_text(json.dumps(state))
    return int(index)


class Held:
    """The pod netns without its path, kept alive by a process (the NIC still in it)."""

    def __init__(self, rig, pod, index: int) -> None:  # type: ignore[no-untyped-def]
        self.rig, self.index = rig, index
        self.proc = subprocess.Popen(["ip", "netns", "exec", pod.name, "sleep", "600"])
        time.sleep(0.2)
        sh("ip", "netns", "del", pod.name)
        rig.node.pods.remove(pod)

    def kernel_returns(self) -> None:
        sh("nsenter", "-t", str(self.proc.pid), "-n", "ip", "link", "set", "dev", "eth1",
           "netns", self.rig.node.ns)
        # its index kept (DEL may have renamed it already)
        assert self.index in [lk["ifindex"] for lk in ip_json(self.rig.node.ns, "link", "show")]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _return_once_waiting(faults, held: Held) -> None:  # type: ignore[no-untyped-def]
    """Play the kernel 1.5 s after DEL says it waits (or after 8 s: a DEL that does not
    wait has finished by then, and the NIC comes back to a node that forgot it)."""
    deadline = time.monotonic() + 8
    while "waiting up to" not in faults.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)
    held.kernel_returns()


def _added_then_held(rig, faults):  # type: ignore[no-untyped-def]
    """An exclusive attachment whose pod netns then loses its path, the NIC still in it."""
    rig.nic("rnic0")
    chain = faults.chain("exclusive")
    pod = rig.pod()
    assert chain.add("cid-a", pod.path, rdma_blocks(1)).rc == 0
    return chain, Held(rig, pod, _give_identity(rig, pod))


def test_del_waits_for_the_kernel_to_return_the_nic(rig, faults) -> None:  # type: ignore[no-untyped-def]
    chain, held = _added_then_held(rig, faults)
    try:
        kernel = threading.Thread(target=_return_once_waiting, args=(faults, held))
        kernel.start()
        t0 = time.monotonic()
        run = chain.delete("cid-a")
        took = time.monotonic() - t0
        kernel.join()
    finally:
        held.close()
    assert run.rc == 0, run
    assert 1.5 <= took < WAIT, took
    assert "rnic0" in rig.node.links() and "eth1" not in rig.node.links()
    faults.expect_served("ADD", 1)
    assert faults.served("DEL") == 0  # no netns to hand over: in-process on both paths
    print(f"\nfaults/exclusive: NIC returned 1.5 s into DEL's wait, restored, DEL took "
          f"{took:.1f} s")


def test_del_keeps_the_state_until_the_nic_is_back(rig, faults) -> None:  # type: ignore[no-untyped-def]
    chain, held = _added_then_held(rig, faults)
    try:
        t0 = time.monotonic()
        run = chain.delete("cid-a")
        took = time.monotonic() - t0
        assert run.code == 11, run
        assert "not returned it yet" in run.out["msg"]
        assert WAIT <= took < WAIT + 8, took
        [path] = (Path(rig.data_dir) / "state").glob("*.json")
        assert "nicPendingSince" in json.loads(path.read_text())
        assert any(f.startswith("nics/") for f in rig.files()), "the NIC claim must be kept"
        held.kernel_returns()
    finally:
        held.close()
    assert "eth1" in rig.node.links()  # back under its in-pod name, as the kernel does
    run = chain.delete("cid-a")
    assert run.rc == 0, run
    assert "rnic0" in rig.node.links() and "eth1" not in rig.node.links()
    print(f"\nfaults/exclusive: NIC not back: DEL code 11 after {took:.1f} s, state kept; "
          "the retry restored it")
