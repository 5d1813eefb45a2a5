"""The node's RDMA NICs as ADD sees them (discovery or the pinned `devices`, without the
node's own NIC), and the bounded wait for the pod interfaces' RoCE GIDs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.models.netconf import NetConf
from rdma_cni.node.discovery import discover, resolve_device_id
from rdma_cni.node.primary import keep_off, primary_nics
from rdma_cni.vocab.nic import Nic
from rdma_cni.vocab.plan import IfacePlan
from rdma_cni.vocab.ports import NetlinkPort

GID_TIMEOUT = 5.0
SYSFS_ROOT = "/"


@dataclass(frozen=True)
class NodeNics:
    sysfs: Sysfs
    nics: Sequence[Nic]

    @property
    def by_netdev(self) -> dict[str, Nic]:
        return {n.netdev: n for n in self.nics}

    def resolve(self, dev_id: str) -> Nic:
        return resolve_device_id(self.sysfs, self.nics, dev_id)


def rdma_nics(nc: NetConf, host: NetlinkPort) -> NodeNics:
    """The NICs ADD may use: discovered or pinned, never the node's own (primary.py)."""
    sysfs = Sysfs(SYSFS_ROOT)
    nics = discover(sysfs, nc.devices)
    primary = primary_nics(host, [n.netdev for n in nics], nc.nodeIPs)
    return NodeNics(sysfs, keep_off(nics, primary, nc.devices is not None))


def wait_gids(plans: Sequence[IfacePlan]) -> None:
    wanted = {p.name: (p.ibdev, p.address.ip) for p in plans
              if p.ibdev and p.address is not None}
    if not wanted:
        return
    from rdma_cni.node.gids import wait_for_gids

    wait_for_gids(Sysfs(SYSFS_ROOT), wanted, GID_TIMEOUT)


def rdma_netns(nc: NetConf, plans: list[IfacePlan]) -> list[IfacePlan]:
    """Check the RDMA netns mode against the node mode; in exclusive RDMA netns mode an
    exclusive NIC's RDMA device moves with its netdev (DESIGN section 2)."""
    if not any(p.ibdev for p in plans):
        return plans
    from rdma_cni.node.rdma_mode import check_mode, read_netns_mode

    mode = read_netns_mode()
    check_mode(nc.mode, mode)
    if nc.mode.traits.moves_rdma_device(mode):
        return [replace(p, rdma_move=True) if p.ibdev else p for p in plans]
    return plans
