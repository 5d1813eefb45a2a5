"""A fake node over the in-memory kernel (support/fakes/netlink.py): two RDMA NICs on
the host, one pod netns, the plans the datapath tests apply and the ADD/DEL that
apply them."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface
from typing import Any

from rdma_cni import defaults
from rdma_cni.datapath import execute
from rdma_cni.datapath.plan import IfacePlan, with_address
from rdma_cni.datapath.session import Session
from rdma_cni.datapath.teardown import marker_of, teardown
from rdma_cni.store.records import HostRoute
from rdma_cni.store.state import make_state
from support.fakes.netlink import FakeKernel, FakeNetns, observe

DIGEST = "feedc0ffee0011"
MARK = marker_of(DIGEST)
POD = "/run/netns/pod1"
PRIO = defaults.RULE_PRIORITY
TABLES = (254, 100, 101)


class Node:
    """A fake node: two RDMA NICs on the host, one pod netns at POD."""

    def __init__(self) -> None:
        self.kernel = FakeKernel()
        self.host = self.kernel.host
        hp = self.kernel.port(self.host)
        self.kernel.add_nic(self.host, "rnic0", 9000, mac="02:00:00:00:00:01",
                            parent_dev="0000:03:00.0", parent_bus="pci")
        self.kernel.add_nic(self.host, "rnic1", 4200, mac="02:00:00:00:00:02")
        hp.add_address("rnic0", IPv4Interface("198.51.100.1/26"))
        hp.add_route(execute.podconfig.Route("198.19.0.0/16", "198.51.100.62",
                                             hp.require("rnic0").index, 254, proto=3))
        self.pod: FakeNetns | None = self.kernel.netns(POD, POD)
        self.kernel.add_nic(self.pod, "eth0", virtual=True)

    def session(self, required: bool = True) -> Session:
        return Session(POD, pod_required=required, ops=self.kernel)  # type: ignore[arg-type]

    def view(self) -> dict[str, Any]:
        out = {"host": observe(self.kernel.port(self.host), TABLES, PRIO)}
        if self.pod is not None and self.pod.fd in self.kernel.spaces:
            out["pod"] = observe(self.kernel.port(self.pod), TABLES, PRIO)
        return out

    def kill_pod(self) -> None:
        assert self.pod is not None
        self.kernel.remove_netns(self.pod.fd)
        self.pod = None


def sub(k: int, nic: str, mtu: int, ip: str, kind: str = "macvlan") -> IfacePlan:
    p = IfacePlan(k=k, name=f"eth{k + 1}", tmp=f"rdt{DIGEST[:9]}{k:x}", nic=nic, kind=kind,
                  mtu=mtu, table=100 + k, routes=(("198.19.0.0/16", "198.51.100.62"),))
    return with_address(p, IPv4Address(ip), 26)


EXCL = IfacePlan(k=0, name="eth1", tmp=f"rdt{DIGEST[:9]}0", nic="rnic0", kind="physical",
                 mtu=9000, table=100, addresses=(IPv4Interface("198.51.100.1/26"),),
                 routes=(("198.19.0.0/16", "198.51.100.62"),),
                 host_routes=(HostRoute("198.19.0.0/16", "198.51.100.62", 3, 0, False),),
                 identity={"pci": "0000:03:00.0", "parentDev": "0000:03:00.0",
                           "parentBus": "pci", "permMac": None, "mac": "02:00:00:00:00:01",
                           "kind": "veth", "ifindex": 2}, host_mtu=9000)
SHARED = [sub(0, "rnic0", 9000, "198.51.100.10"), sub(1, "rnic1", 1500, "198.51.100.11")]


def add(node: Node, plans: list[IfacePlan], mark: str = MARK) -> None:
    session = node.session()
    try:
        execute.apply(session.ctx(mark, PRIO), execute.steps_for(plans))
    finally:
        session.close()


def delete(node: Node, plans: list[IfacePlan]) -> None:
    session = node.session(required=False)
    try:
        teardown(session, make_state("ok", "", POD, "", "", PRIO, plans), DIGEST)
    finally:
        session.close()

