"""The whole allocation chain on this kernel: the real device plugin (`rdma-cni
device-plugin`, in the node netns) registers with a fake kubelet, which lists its
devices, asks for a preferred allocation, allocates, and serves the result over the
PodResources API; ADD then attaches exactly the allocated NICs. Stand-in NICs are
veth ends (device ID = netdev name), each in its own subnet, so a pod's addresses
show which NICs it got."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cnirunner import PYTHON, pod_networks, rdma_blocks, vpc_result
from kubeletlab import RESOURCE, kubelet

pytestmark = pytest.mark.root
NICS = {"rnic0": "198.51.100.1/26", "rnic1": "198.51.100.65/26", "rnic2": "198.51.100.129/26"}
FIRST = {"rnic0": "198.51.100.2/26", "rnic1": "198.51.100.66/26", "rnic2": "198.51.100.130/26"}


@pytest.fixture
def lab(rig: Any, tmp_path: Path) -> Iterator[Any]:
    for name, cidr in NICS.items():
        rig.nic(name, cidr, None)
    yield rig


def _kubelet(rig: Any, tmp: Path, mode: str) -> Any:
    argv = ["ip", "netns", "exec", rig.node.ns, str(PYTHON), "-m", "rdma_cni"]
    return kubelet(Path("/tmp") / f"rdma-dp-{rig.node.prefix}", rig.plugin(mode, list(NICS)),
                   argv, tmp / "dp.json")


def test_shared_multi_pod_gets_exactly_its_allocated_nics(lab: Any, tmp_path: Path) -> None:
    with _kubelet(lab, tmp_path, "shared-multi") as k:
        assert len(k.devices()) == 3 * 16  # 16 slots per NIC, each /26 has room for them
        ids = k.schedule("p1", 2)
        nics = sorted({i.split("@")[0] for i in ids})
        assert len(nics) == 2  # preferred allocation spreads over distinct NICs
        pod = lab.pod()
        chain = lab.chain("shared-multi", list(NICS), kubelet=k.kubelet_conf())
        run = chain.add("c1", pod.path, rdma_blocks(2), pod="p1")
        assert run.rc == 0, run
        got = sorted(pod.addrs("eth1") + pod.addrs("eth2"))
        assert got == sorted(FIRST[n] for n in nics)  # from each allocated NIC's range
        assert chain.delete("c1").rc == 0


def test_exclusive_pod_gets_the_allocated_nic_and_no_other(lab: Any, tmp_path: Path) -> None:
    with _kubelet(lab, tmp_path, "exclusive") as k:
        assert k.devices() == sorted(NICS)  # one device per NIC, ID = netdev (no PCI)
        k.client.allocate(["rnic2"])
        k.kubelet.set_pod("default", "p1", {RESOURCE: ["rnic2"]})
        pod = lab.pod()
        chain = lab.chain("exclusive", list(NICS), kubelet=k.kubelet_conf())
        run = chain.add("c1", pod.path, rdma_blocks(1), pod="p1")
        assert run.rc == 0, run
        assert pod.addrs("eth1") == [NICS["rnic2"]]
        assert {"rnic0", "rnic1"} <= set(lab.node.links()) and "rnic2" not in lab.node.links()
        assert chain.delete("c1").rc == 0
        assert "rnic2" in lab.node.links()


def test_unlisted_pod_and_short_allocation_get_101(lab: Any, tmp_path: Path) -> None:
    with _kubelet(lab, tmp_path, "exclusive") as k:
        k.kubelet.set_pod("default", "p2", {RESOURCE: ["rnic0"]})
        pod = lab.pod()
        chain = lab.chain("exclusive", list(NICS), kubelet=k.kubelet_conf())
        unlisted = chain.add("c1", pod.path, rdma_blocks(1), pod="nobody")
        assert unlisted.code == 101, unlisted
        short = chain.add("c2", pod.path, rdma_blocks(2), pod="p2")
        assert short.code == 101 and "2" in short.out["msg"] and "1" in short.out["msg"], short
        assert sorted(pod.links()) == ["eth0", "lo"]  # the rig checks node and data dir


@pytest.mark.parametrize("cni_args", ["IgnoreUnknown=1",
                                      "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME="])
def test_a_request_naming_no_pod_gets_101_where_the_kubelet_answers(
        lab: Any, tmp_path: Path, cni_args: str) -> None:
    """A caller that names no pod on a node whose kubelet lists allocations gets no NICs
    (DESIGN §8): config order is for nodes with no kubelet source at all."""
    with _kubelet(lab, tmp_path, "exclusive") as k:
        k.kubelet.set_pod("default", "p1", {RESOURCE: ["rnic0"]})
        pod = lab.pod()
        chain = lab.chain("exclusive", list(NICS), kubelet=k.kubelet_conf())
        conf = chain.conf(vpc_result(pod.path, version=chain.cni_version),
                          pod_networks(rdma_blocks(1)))
        run = chain._run("ADD", conf, "c1", pod.path, "eth0", cni_args, None)
        assert run.code == 101 and "names no pod" in run.out["msg"], run
        assert sorted(pod.links()) == ["eth0", "lo"]  # the rig checks node and data dir
