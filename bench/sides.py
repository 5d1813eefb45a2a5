"""The two sides of every comparison, as CNI invocations for one pod.

- rdma-cni, chained after a vpc-cni-shaped primary (the primary is not run: its
  result is the ``prevResult``), one exec per pod whatever the number of RDMA
  interfaces; ``residentSocket`` is ``""`` (in-process) or the benchmark's daemon.
- Go macvlan + host-local, what a meta-plugin does: one standalone macvlan exec per
  interface (``eth1``..``ethN``), each exec'ing host-local for its address.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from cni import Invocation
from lab import Pod, nic, nic_subnet

ANNOTATION = "k8s.volcengine.com/pod-networks"
CAP_ANNOTATIONS = "io.kubernetes.cri.pod-annotations"
GO_CNI_PATH = "/usr/lib/cni"
LIST_NAME = "vpc-cni"
CNI_VERSION = "0.4.0"


def container_id(pod: Pod, side: str) -> str:
    return hashlib.sha256(f"{pod.name}/{side}".encode()).hexdigest()


def k8s_args(pod: Pod, cid: str) -> str:
    return (f"IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME={pod.name};"
            f"K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID=uid-{pod.name}")


def primary_result(pod: Pod) -> dict[str, Any]:
    """What vpc-cni returns (cniVersion 0.4.0, odd ``mac``, as in the field)."""
    ip = f"198.51.100.{2 + pod.index % 250}/24"
    return {"cniVersion": CNI_VERSION,
            "interfaces": [{"name": "eth0", "sandbox": pod.path, "mac": "not-a-mac"}],
            "ips": [{"version": "4", "address": ip, "interface": 0, "gateway": "198.51.100.1"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "198.51.100.1"}], "dns": {}}


@dataclass
class RdmaCni:
    """rdma-cni's conflist entry (shared-multi over ``n_nics`` stand-in NICs)."""

    binary: str
    data_dir: str
    n_nics: int
    socket: str = ""  # "" = in-process; else the resident daemon's socket
    name: str = "rdma-cni"
    #: the NIC ``devices`` lists first (the others follow in turn): a pod's one block gets it
    first_nic: int = 0

    def entry(self) -> dict[str, Any]:
        kubelet = os.path.join(self.data_dir, "no-kubelet")  # no kubelet source: config order
        return {"type": "rdma-cni", "mode": "shared-multi",
                "devices": [nic((self.first_nic + k) % self.n_nics)
                            for k in range(self.n_nics)],
                "dataDir": os.path.join(self.data_dir, "state"),
                "logFile": os.path.join(self.data_dir, "rdma-cni.log"),
                "metricsFile": os.path.join(self.data_dir, "metrics"),
                "kubelet": {"podResourcesSocket": f"{kubelet}/kubelet.sock",
                            "checkpointFile": f"{kubelet}/checkpoint",
                            "devicePluginDir": kubelet},
                "residentSocket": self.socket,
                "capabilities": {CAP_ANNOTATIONS: True}}

    def invocations(self, pod: Pod, blocks: list[dict[str, Any]]) -> list[Invocation]:
        conf = {**self.entry(), "name": LIST_NAME, "cniVersion": CNI_VERSION,
                "runtimeConfig": {CAP_ANNOTATIONS: {ANNOTATION: json.dumps(blocks)}},
                "prevResult": primary_result(pod)}
        cid = container_id(pod, self.name)
        env = {"RDMA_CNI_SOCKET": self.socket} if self.socket else {}
        return [Invocation([self.binary], conf, cid, pod.path, "eth0", k8s_args(pod, cid),
                           "/opt/cni/bin", env=env)]


@dataclass
class GoMacvlan:
    """Debian's containernetworking-plugins macvlan with host-local IPAM, per interface."""

    data_dir: str
    n_nics: int
    name: str = "go-macvlan"

    def conf(self, k: int) -> dict[str, Any]:
        net = nic_subnet(k % self.n_nics)
        base = net.rsplit(".", 1)[0]
        return {"cniVersion": CNI_VERSION, "name": f"rdma-{k % self.n_nics}", "type": "macvlan",
                "master": nic(k % self.n_nics), "mode": "bridge",
                "ipam": {"type": "host-local", "dataDir": os.path.join(self.data_dir, "ipam"),
                         "ranges": [[{"subnet": net, "rangeStart": f"{base}.2",
                                      "rangeEnd": f"{base}.253"}]]}}

    def invocations(self, pod: Pod, n_ifaces: int) -> list[Invocation]:
        cid = container_id(pod, self.name)
        return [Invocation([os.path.join(GO_CNI_PATH, "macvlan")], self.conf(k), cid, pod.path,
                           f"eth{k + 1}", k8s_args(pod, cid), GO_CNI_PATH)
                for k in range(n_ifaces)]


def rdma_blocks(n: int, name: str = "rdma") -> list[dict[str, Any]]:
    return [{"cniConf": {"name": name}} for _ in range(n)]


def leftover_state(data_dir: str) -> list[str]:
    """Reservation/state files still present under a side's data dir after every DEL."""
    out = []
    for root, _dirs, files in os.walk(data_dir):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), data_dir)
            if _is_reservation(rel):
                out.append(rel)
    return sorted(out)


def _is_reservation(rel: str) -> bool:
    parts = rel.split(os.sep)
    if parts[0] == "state":  # rdma-cni's store
        return len(parts) > 1 and parts[1] in ("state", "ips", "nics") and ".tmp-" not in rel
    if parts[0] == "ipam":  # host-local: one file per address, plus lock / last_reserved_ip.*
        return parts[-1] != "lock" and not parts[-1].startswith("last_reserved_ip")
    return False
