"""Allocation by PCI address, end to end on physical (virtio-net PCI) NICs: the real
device plugin (the built binary) advertises each NIC under its PCI address, a fake
kubelet allocates one to the pod and serves it over PodResources, and ADD (exclusive)
moves exactly that NIC into the pod, resolving the PCI address to its netdev."""

from __future__ import annotations

from pathlib import Path

import pytest
import vmkit
from cnirunner import rdma_blocks
from kubeletlab import kubelet
from vmrig import NODE, VmRig, link_by

pytestmark = [pytest.mark.vm, pytest.mark.root]


def test_allocated_pci_nic_is_the_one_moved(rig: VmRig, virtio_nics: list[str],
                                            vm_binary: list[str], tmp_path: Path) -> None:
    nics = [rig.borrow(virtio_nics[0], rename="rnic0"), rig.borrow(virtio_nics[1],
                                                                   rename="rnic1")]
    rig.configure(nics[0], "198.51.100.1/28")
    rig.configure(nics[1], "198.51.100.17/28")
    found = {n: vmkit.pci_address(n) for n in nics}
    pci = {n: a for n, a in found.items() if a}
    assert len(pci) == 2, found
    conf = rig.plugin("exclusive", nics)
    with kubelet(Path("/tmp") / f"dp-{rig.prefix}", conf, vm_binary,  # the device plugin
                 tmp_path / "dp.json") as k:
        assert k.devices() == sorted(pci.values())  # ID = the NIC's PCI address
        k.client.allocate([pci["rnic1"]])
        k.kubelet.set_pod("default", "p1", {"vke.volcengine.com/rdma": [pci["rnic1"]]})
        chain = rig.chain("exclusive", nics, kubelet=k.kubelet_conf())
        pod = rig.pod()
        run = chain.add("c1", pod.path, rdma_blocks(1), pod="p1")
        assert run.rc == 0, run
        assert run.out["ips"][1]["address"] == "198.51.100.17/28"
        assert link_by(NODE, ifname="rnic0") is not None  # the other NIC stays
        assert link_by(NODE, ifname="rnic1") is None
        assert chain.delete("c1").rc == 0
        assert link_by(NODE, ifname="rnic1") is not None
