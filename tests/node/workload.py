"""A workload pod as the kubelet makes one: ask the device plugin (GetPreferredAllocation,
Allocate) like the kubelet's device manager, publish the allocation over PodResources
(the fake kubelet), start the sandbox through containerd's CRI, then a container whose
config carries exactly the Allocate response's mounts, devices and envs."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chroot import skip_exec_under_chroot
from runtime import Containerd
from support.fakes.kubelet import PluginClient
from support.netns import ip_json

ANNOTATION = "k8s.volcengine.com/pod-networks"
NAMESPACE = "node-test"
RESOURCE = "vke.volcengine.com/rdma"
#: the rig's stand-in RDMA NICs: name -> (host address, peer)
NICS = {"rdnode0": ("203.0.113.1/28", "rdnpeer0"), "rdnode1": ("203.0.113.17/28", "rdnpeer1")}


def rdma_annotation(blocks: int = 1) -> dict[str, str]:
    return {ANNOTATION: json.dumps([{"cniConf": {"name": "rdma"}}] * blocks)}


@dataclass
class Workload:
    sandbox: str
    container: str
    allocation: Any          # the device plugin's ContainerAllocateResponse
    ids: list[str]


class Workloads:
    def __init__(self, cd: Containerd, kubelet: Any, plugin_socket: Path, image: str,
                 resource: str) -> None:
        self.cd, self.kubelet, self.image, self.resource = cd, kubelet, image, resource
        self.pb = cd.pb  # tests/support/cri.proto: sandboxes and containers
        self.plugin_socket = plugin_socket

    def call(self, method: str, request: Any, response: Any, timeout: float = 120) -> Any:
        return self.cd.call(method, request, response, timeout)

    def allocate(self, count: int) -> tuple[list[str], Any]:
        """What the kubelet's device manager does for ``resource: count``."""
        client = PluginClient(str(self.plugin_socket))
        try:
            healthy = []
            for devs in client.list_and_watch():
                healthy = sorted(d.ID for d in devs if d.health == "Healthy")
                break
            ids = client.preferred(healthy, [], count)
            return ids, client.allocate(ids).container_responses[0]
        finally:
            client.close()

    def wait_capacity(self, timeout: float = 120) -> None:
        """Until the device plugin advertises healthy devices (the scheduler would not
        place an RDMA pod on the node before)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.allocate(1)[0]:
                    return
            except Exception:  # the plugin's socket not there yet
                pass
            assert time.monotonic() < deadline, "the device plugin advertises nothing"
            time.sleep(1)

    def start(self, name: str, count: int = 1,
              allocated: tuple[list[str], Any] | None = None,
              annotations: dict[str, str] | None = None,
              command: list[str] | None = None) -> Workload:
        """A pod of ``count`` RDMA interfaces; ``allocated``: the device plugin's answer
        the kubelet got before (the pod was admitted earlier), else asked now;
        ``annotations`` and ``command`` the pod's own (default: ``count`` blocks, a sleep)."""
        ids, alloc = allocated or self.allocate(count)
        self.kubelet.set_pod(NAMESPACE, name, {self.resource: ids}, container="main")
        config = self.cd.pod_config(name, f"uid-{name}", annotations or rdma_annotation(count),
                                    NAMESPACE)
        sandbox = self.cd.run_pod(name, f"uid-{name}", config=config)
        cid = self.create(sandbox, config, alloc, command)
        return Workload(sandbox, cid, alloc, ids)

    def create(self, sandbox: str, sandbox_config: Any, alloc: Any,
               command: list[str] | None = None) -> str:
        pb = self.pb
        cfg = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="main"), image=pb.ImageSpec(image=self.image),
            command=command or ["sleep", "3600"], log_path="main.log",
            envs=[pb.KeyValue(key=k, value=v) for k, v in alloc.envs.items()],
            mounts=[pb.Mount(container_path=m.container_path, host_path=m.host_path,
                             readonly=m.read_only) for m in alloc.mounts],
            devices=[pb.Device(container_path=d.container_path, host_path=d.host_path,
                               permissions=d.permissions) for d in alloc.devices])
        req = pb.CreateContainerRequest(pod_sandbox_id=sandbox, config=cfg,
                                        sandbox_config=sandbox_config)
        cid = self.call("CreateContainer", req, pb.CreateContainerResponse).container_id
        self.call("StartContainer", pb.StartContainerRequest(container_id=cid),
                  pb.StartContainerResponse)
        return str(cid)

    def exec(self, cid: str, *cmd: str) -> tuple[int, str, str]:
        skip_exec_under_chroot()
        resp = self.call("ExecSync", self.pb.ExecSyncRequest(container_id=cid, cmd=list(cmd),
                                                             timeout=60),
                         self.pb.ExecSyncResponse)
        return int(resp.exit_code), resp.stdout.decode(), resp.stderr.decode()

    def stop(self, w: Workload) -> None:
        pb = self.pb
        self.call("StopContainer", pb.StopContainerRequest(container_id=w.container, timeout=5),
                  pb.StopContainerResponse)
        self.call("RemoveContainer", pb.RemoveContainerRequest(container_id=w.container),
                  pb.RemoveContainerResponse)
        self.cd.stop_pod(w.sandbox)
        self.cd.remove_pod(w.sandbox)


def links(netns: str) -> dict[str, dict[str, Any]]:
    return {i["ifname"]: i for i in ip_json(netns, "addr", "show")}


def v4(link: dict[str, Any]) -> list[str]:
    return [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])
            if a["family"] == "inet"]


def nic_subnet(addr: str) -> bool:
    """In a stand-in NIC's /28, not the NIC's own address."""
    import ipaddress

    ip = ipaddress.ip_interface(addr)
    nets = {ipaddress.ip_interface(a).network: a for a, _ in NICS.values()}
    return ip.network in nets and nets[ip.network] != addr


def pod_cycle(cd: Containerd, kubelet: Any, name: str, device: str,
              hold: Any = None) -> tuple[bool, str]:
    """One RDMA pod through the CRI: started, checked for eth1 (an address of its NIC's
    subnet), ``hold(name, address)`` while it runs, then stopped and removed."""
    kubelet.set_pod(NAMESPACE, name, {RESOURCE: [device]}, container="main")
    try:
        config = cd.pod_config(name, f"uid-{name}", rdma_annotation(1), NAMESPACE)
        sid = cd.run_pod(name, f"uid-{name}", config=config)
    except Exception as e:
        return False, f"RunPodSandbox: {e}"
    try:
        pod = links(cd.netns_of(sid))
        ok = "eth1" in pod and nic_subnet(v4(pod["eth1"])[0])
        if ok and hold is not None:
            hold(name, v4(pod["eth1"])[0])
        return ok, json.dumps(sorted(pod))
    finally:
        cd.stop_pod(sid)
        cd.remove_pod(sid)
