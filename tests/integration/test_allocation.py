"""The whole allocation chain on this kernel: the real device plugin (`rdma-cni
device-plugin`, in the node netns) registers with a fake kubelet, which lists its
devices, asks for a preferred allocation, allocates, and serves the result over the
PodResources API; ADD then attaches exactly the allocated NICs. Stand-in NICs are
veth ends (device ID = netdev name), each in its own subnet, so a pod's addresses
show which NICs it got."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cnirunner import PYTHON, rdma_blocks
from fakekubelet import FakeKubelet, PluginClient

from rdma_cni.deviceplugin.server import socket_name

pytestmark = pytest.mark.root
RESOURCE = "vke.volcengine.com/rdma"
NICS = {"rnic0": "198.51.100.1/26", "rnic1": "198.51.100.65/26", "rnic2": "198.51.100.129/26"}
FIRST = {"rnic0": "198.51.100.2/26", "rnic1": "198.51.100.66/26", "rnic2": "198.51.100.130/26"}


class Kubelet:
    """A fake kubelet driving the real device plugin like the kubelet does."""

    def __init__(self, rig: Any, tmp: Path, mode: str) -> None:
        self.dir = Path("/tmp") / f"rdma-dp-{rig.node.prefix}"  # unix socket paths are short
        self.dir.mkdir()
        self.kubelet = FakeKubelet(str(self.dir / "kubelet.sock"), str(self.dir / "pr.sock"))
        self.kubelet.start()
        conf = rig.plugin(mode, list(NICS), kubelet=self.kubelet_conf())
        conf_file = tmp / "dp.json"
        conf_file.write_text(json.dumps({**conf, "cniVersion": "1.0.0", "name": "rdma"}))
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", rig.node.ns, str(PYTHON), "-m", "rdma_cni",
             "device-plugin", "--config", str(conf_file), "--nccl-env", "", "--poll", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.kubelet.wait_registrations(1, timeout=60)
        self.client = PluginClient(str(self.dir / socket_name(RESOURCE)))

    def kubelet_conf(self) -> dict[str, str]:
        return {"podResourcesSocket": str(self.dir / "pr.sock"),
                "checkpointFile": str(self.dir / "no-checkpoint"),
                "devicePluginDir": str(self.dir)}

    def devices(self) -> list[str]:
        for devs in self.client.list_and_watch():
            return sorted(d.ID for d in devs if d.health == "Healthy")
        return []

    def schedule(self, pod: str, count: int) -> list[str]:
        """What the kubelet does for `vke.volcengine.com/rdma: count`."""
        ids = self.client.preferred(self.devices(), [], count)
        self.client.allocate(ids)
        self.kubelet.set_pod("default", pod, {RESOURCE: ids})
        return ids

    def close(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)
        self.kubelet.stop()
        for f in self.dir.iterdir():
            f.unlink()
        self.dir.rmdir()


@pytest.fixture
def lab(rig: Any, tmp_path: Path) -> Iterator[Any]:
    for name, cidr in NICS.items():
        rig.nic(name, cidr, None)
    yield rig


@contextmanager
def _kubelet(rig: Any, tmp: Path, mode: str) -> Iterator[Kubelet]:
    k = Kubelet(rig, tmp, mode)
    try:
        yield k
    finally:
        k.close()


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
