"""The planner's records: one pod interface as ADD planned it (:class:`IfacePlan`), the
host configuration an exclusive NIC keeps (:class:`HostRoute`, :class:`HostAddr`) and
what the host shows of one RDMA NIC before planning (:class:`NicFacts`). Stdlib only:
:mod:`rdma_cni.datapath.plan` builds plans, :mod:`rdma_cni.store.records` is their JSON
form and :mod:`rdma_cni.store.state` keeps them.

A record holds what teardown needs, not every route of the node: a sub-interface
(shared modes) is undone by deleting the link and its rules, so its NIC's
mirrored fabric routes are not saved at all; an exclusive NIC keeps its host
configuration (DEL puts it back): every address of every family in the kernel's
order with its flags and lifetimes (``host_addrs``), every route through it in every
table (``host_routes``), its IPv6 address generation mode and its own settings
(``host_link``: link flags, queue length, alias, IPv4 and IPv6 settings). Keys a release does
not know (a newer release wrote them) are kept in :attr:`IfacePlan.extra`."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface
from typing import Any, NamedTuple

from rdma_cni.records import field, record
from rdma_cni.vocab.netlink import RT_TABLE_MAIN


class HostRoute(NamedTuple):
    """A route through an exclusive NIC, to restore exactly (any family, any table)."""

    dst: str  # CIDR
    gateway: str | None
    proto: int
    metric: int
    onlink: bool
    table: int = RT_TABLE_MAIN
    prefsrc: str | None = None

    def saved(self) -> list[Any]:
        """The record's form: the five fields of earlier releases when the rest is default."""
        out = list(self)
        return out if self.table != RT_TABLE_MAIN or self.prefsrc else out[:5]


class HostAddr(NamedTuple):
    """An address of an exclusive NIC, to restore exactly: its IFA_F_* flags, label,
    broadcast, and when its lifetimes end (CLOCK_BOOTTIME seconds; None: forever)."""

    cidr: str
    flags: int = 0
    valid_until: float | None = None
    preferred_until: float | None = None
    label: str | None = None
    broadcast: str | None = None


@record
class IfacePlan:
    k: int
    name: str
    tmp: str
    nic: str
    kind: str
    mtu: int
    table: int
    mac: str | None = None
    requested_ip: IPv4Address | None = None
    addresses: tuple[IPv4Interface, ...] = ()
    gateway: IPv4Address | None = None
    routes: tuple[tuple[str, str | None], ...] = ()
    ibdev: str | None = None
    identity: dict[str, Any] = field(default_factory=dict)
    host_mtu: int = 0
    host_up: bool = True
    host_routes: tuple[HostRoute, ...] = ()
    rdma_move: bool = False  # exclusive NIC under RDMA netns mode "exclusive"
    host_addrs: tuple[HostAddr, ...] = ()  # exclusive: every address, in the kernel's order
    inet6_mode: int | None = None  # exclusive: IFLA_INET6_ADDR_GEN_MODE on the host
    #: exclusive: the NIC's own settings on the host (:meth:`LinkConf.saved
    #: <rdma_cni.vocab.netlink.LinkConf.saved>`: flags, txqlen, alias, ipv4, ipv6); a
    #: record without them (an earlier release's) restores none of them
    host_link: dict[str, Any] = field(default_factory=dict)
    #: keys of the saved entry this release does not know, written back unchanged
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def address(self) -> IPv4Interface | None:
        return self.addresses[0] if self.addresses else None


@record
class NicFacts:
    """What the host shows of one RDMA NIC (netdev), read before planning."""

    name: str
    index: int
    mtu: int
    mac: str
    up: bool = True
    addresses: tuple[IPv4Interface, ...] = ()
    gateway: IPv4Address | None = None
    routes: tuple[tuple[str, str | None], ...] = ()  # (dst CIDR, gateway) through this NIC
    host_routes: tuple[HostRoute, ...] = ()  # the same routes as the host has them
    pci: str | None = None
    parent_dev: str | None = None  # IFLA_PARENT_DEV_NAME (the PCI address on the pci bus)
    parent_bus: str | None = None  # IFLA_PARENT_DEV_BUS_NAME
    kind: str | None = None  # the link's kind (None: a device's own driver)
    perm_mac: str | None = None
    ibdev: str | None = None
    host_addrs: tuple[HostAddr, ...] = ()  # every family, kernel order (exclusive only)
    inet6_mode: int | None = None  # IPv6 address generation mode (exclusive only)
    iflink: int | None = None  # a veth's peer: its index (IFLA_LINK) ...
    link_netnsid: int | None = None  # ... in the netns of this id (None: the NIC's own)
    #: every IPv4 gateway reached through the NIC, in any table (kept out of its pool)
    gateways: tuple[IPv4Address, ...] = ()
    host_link: dict[str, Any] = field(default_factory=dict)  # its settings (exclusive only)
    altnames: tuple[str, ...] = ()  # its alternative names (IFLA_ALT_IFNAME)
