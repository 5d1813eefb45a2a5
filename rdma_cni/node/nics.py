"""The node's RDMA NICs as ADD sees them (discovery or the pinned `devices`, without the
node's own NIC), and the bounded wait for the pod interfaces' RoCE GIDs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.models.netconf import NetConf
from rdma_cni.node.discovery import (
    build,
    discover,
    own_pci,
    resolve_device_id,
    strip_slot,
    uverbs_map,
)
from rdma_cni.node.primary import keep_off, primary_nics
from rdma_cni.records import replace
from rdma_cni.vocab.nic import Nic
from rdma_cni.vocab.plan import IfacePlan
from rdma_cni.vocab.ports import NetlinkPort

GID_TIMEOUT = 5.0
SYSFS_ROOT = "/"


class Named(NamedTuple):
    netdev: str


class NodeNics:
    """The NICs an ADD may use, by netdev name in order. Discovered NICs come whole; the
    pinned ones (the config's ``devices``) are read from sysfs when first asked for: an
    ADD reads the NICs it is given and those a device ID is matched against, not every
    NIC of the node."""

    def __init__(self, sysfs: Sysfs, names: Sequence[str],
                 known: Mapping[str, Nic] | None = None) -> None:
        self.sysfs = sysfs
        self.names = list(names)
        self._known = dict(known or {})
        self._uverbs: dict[str, str] | None = None
        self._pci: dict[str, str | None] = {}

    def nic(self, netdev: str) -> Nic:
        """What sysfs shows of ``netdev`` (one of :attr:`names`)."""
        found = self._known.get(netdev)
        if found is None:
            if self._uverbs is None:
                self._uverbs = uverbs_map(self.sysfs)
            found = self._known[netdev] = build(self.sysfs, netdev, self._uverbs)
        return found

    @property
    def nics(self) -> list[Nic]:
        return [self.nic(n) for n in self.names]

    @property
    def named(self) -> list[Named]:
        """The NICs by name alone (what :func:`rdma_cni.node.allocation.assign` reads of
        them), nothing read from sysfs."""
        return [Named(n) for n in self.names]

    def by_netdev(self, names: Iterable[str]) -> dict[str, Nic]:
        return {n: self.nic(n) for n in names}

    def resolve(self, dev_id: str) -> Nic:
        """:func:`resolve_device_id` over these NICs. A PCI address (how the device plugin
        names a NIC) is first matched in order against each NIC's PCI function alone, as
        the whole match would find it first (a PCI match comes before any other)."""
        key = strip_slot(dev_id).lower()
        for name in self.names:
            if self._pci_of(name) == key:
                return self.nic(name)
        return resolve_device_id(self.sysfs, self.nics, dev_id)

    def _pci_of(self, name: str) -> str | None:
        """The PCI function :meth:`nic` gives ``name``: its own device's, read alone, else
        (a bond) what the whole NIC says."""
        known = self._known.get(name)
        if known is not None:
            return known.pci
        if name not in self._pci:
            self._pci[name] = own_pci(self.sysfs, name)
        return self._pci[name] if self._pci[name] is not None else self.nic(name).pci


def rdma_nics(nc: NetConf, host: NetlinkPort) -> NodeNics:
    """The NICs ADD may use: discovered or pinned, never the node's own (primary.py)."""
    sysfs = Sysfs(SYSFS_ROOT)
    if nc.devices is not None:
        names = list(nc.devices)
        keep_off([Nic(n) for n in names], primary_nics(host, names, nc.nodeIPs), True)
        return NodeNics(sysfs, names)
    nics = discover(sysfs)
    primary = primary_nics(host, [n.netdev for n in nics], nc.nodeIPs)
    kept = keep_off(nics, primary, False)
    return NodeNics(sysfs, [n.netdev for n in kept], {n.netdev: n for n in kept})


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
