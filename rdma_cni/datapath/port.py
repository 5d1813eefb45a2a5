"""The netlink port: what the datapath, teardown, check, doctor and the exporter ask
of a network namespace, named by intent. Stdlib only.

One :class:`NetlinkPort` is bound to one netns (its ``label`` names it in errors).
The real implementation is :class:`rdma_cni.adapters.netlink.Netlink` (pyroute2);
``tests/fakes/netlink.py`` is an in-memory one, held to the same behaviour by a
contract test against the kernel. No pyroute2 name crosses this interface.

Errors are of the project's family: :class:`NetlinkFailure` (an ``IOFailure`` with the
kernel's errno) names the action and the object; what is already absent on a delete,
or already present on an add of an address, route or rule, is success.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Interface
from typing import Any, Protocol

from rdma_cni.errors import IOFailure, NicUnavailable

RT_TABLE_MAIN = 254
RT_TABLE_LOCAL = 255
SCOPE_UNIVERSE = 0
SCOPE_LINK = 253
RTN_UNICAST = 1
#: an address lifetime that never runs out (``forever``)
FOREVER = 0xFFFFFFFF
#: the destinations of a default route, IPv4 and IPv6
DEFAULT_DSTS = ("0.0.0.0/0", "::/0")


@dataclass(frozen=True)
class Link:
    index: int
    name: str
    mtu: int
    mac: str
    kind: str | None
    up: bool
    perm_mac: str | None = None
    parent_dev: str | None = None  # the parent device's name on its bus
    parent_bus: str | None = None  # that bus: "pci" (a PCI address), "virtio", ...
    alias: str | None = None
    #: IFLA_LINK: a veth's peer, a sub-link's lower device (its index in the netns
    #: ``link_netnsid`` names: the id the reading netns gives it; None: the link's own)
    iflink: int | None = None
    link_netnsid: int | None = None


@dataclass(frozen=True)
class Addr:
    """An address of any family as the kernel shows it: ``flags`` are its IFA_F_* bits,
    ``valid``/``preferred`` its remaining lifetimes in seconds (:data:`FOREVER`: none),
    ``proto`` who made it (IFA_PROTO; None when the kernel does not say)."""

    cidr: str  # "198.51.100.1/26", "2001:db8::5/64"
    flags: int = 0
    valid: int = FOREVER
    preferred: int = FOREVER
    label: str | None = None  # IPv4 only
    broadcast: str | None = None  # IPv4 only
    proto: int | None = None

    @property
    def version(self) -> int:
        return 6 if ":" in self.cidr else 4


@dataclass(frozen=True)
class Route:
    dst: str  # CIDR
    gateway: str | None
    oif: int | None
    table: int
    onlink: bool = False
    scope: int = 0
    proto: int = 0  # 0: the default (static)
    priority: int = 0  # the metric
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    prefsrc: str | None = None
    type: int = RTN_UNICAST

    @property
    def version(self) -> int:
        return 6 if ":" in self.dst else 4


@dataclass(frozen=True)
class LinkStats:
    rx_bytes: int
    tx_bytes: int
    rx_packets: int
    tx_packets: int


#: (priority, table, source CIDR or None) of an IPv4 policy rule
Rule = tuple[int, int, str | None]


class NetlinkFailure(IOFailure):
    def __init__(self, msg: str, err: int) -> None:
        super().__init__(msg)
        self.errno = err


def failure(action: str, err: int) -> NetlinkFailure:
    """The error of a kernel refusal: "failed to <action>: <strerror>"."""
    try:
        reason = os.strerror(err).lower()
    except (ValueError, OverflowError):
        reason = f"error {err}"
    return NetlinkFailure(f"failed to {action}: {reason}", err)


def not_found(action: str, name: str, label: str) -> NetlinkFailure:
    return NetlinkFailure(f"failed to {action}: {name} not found in {label}", errno.ENODEV)


class NetlinkPort(Protocol):
    """rtnetlink of one netns, by intent."""

    label: str

    def close(self) -> None: ...

    # links: reads
    def links(self) -> list[Link]: ...
    def link(self, name: str) -> Link | None: ...
    def require(self, name: str) -> Link:
        """The link named ``name``; :class:`NicUnavailable` when there is none (shared by
        every implementation that subclasses the port)."""
        link = self.link(name)
        if link is None:
            raise NicUnavailable(f"RDMA NIC {name} not found in {self.label}")
        return link

    def link_at(self, index: int, netnsid: int | None = None) -> Link | None:
        """The link ``index`` of this netns or, with ``netnsid``, of the netns this one
        knows by that id (read from here: its ``link_netnsid`` is an id of this netns);
        None when there is none. This default reads this netns only."""
        if netnsid is not None:
            return None
        return next((lk for lk in self.links() if lk.index == index), None)

    def netnsid(self, fd: int) -> int | None:
        """The id this netns gives the netns ``fd`` (None: it gives it none)."""
        return None

    def link_stats(self, names: Iterable[str]) -> dict[str, LinkStats]: ...

    # links: changes (``name`` is looked up here; ENODEV if it is not)
    def create_sublink(self, kind: str, name: str, parent: Link, target_fd: int,
                       mtu: int, mac: str | None) -> None:
        """An ipvlan (L2) or macvlan (bridge) ``name`` of ``parent`` (a link of this netns),
        made directly in the netns ``target_fd``."""

    def move_to_netns(self, name: str, target_fd: int, action: str) -> None: ...
    def rename(self, name: str, new: str, alias: str, action: str) -> None:
        """Rename and set the alias in one change ("" clears the alias)."""

    def set_up(self, name: str, action: str, mtu: int | None = None) -> None: ...
    def set_down(self, name: str, action: str) -> None: ...
    def set_mtu(self, name: str, mtu: int, action: str) -> None: ...
    def set_alias(self, name: str, alias: str, action: str) -> None: ...
    def delete_link(self, name: str) -> bool:
        """False if there was no such link."""

    def delete_links(self, names: Sequence[str]) -> None:
        """Delete these links together (the kernel adapter has the kernel tear them down
        in one batch, waiting once for all); absent ones are skipped. This default deletes
        them one by one."""
        for name in dict.fromkeys(names):
            self.delete_link(name)

    # addresses, routes, rules (IPv4)
    def addresses(self, index: int | None = None) -> list[tuple[int, IPv4Interface]]: ...

    # every family (an exclusive NIC's own configuration). These defaults serve IPv4 only,
    # through the IPv4 methods; the kernel adapter reads and writes every family.
    def addrs(self, index: int) -> list[Addr]:
        """Every address of link ``index``, of every family, in the kernel's order (the
        primary IPv4 address of a subnet before its secondaries)."""
        return [Addr(str(a)) for i, a in self.addresses(index) if i == index]

    def put_addr(self, name: str, addr: Addr) -> None:
        """Add ``addr`` to ``name`` with its flags, lifetimes, label and broadcast (present
        already: success)."""
        if addr.version != 4:
            raise failure(f"add {addr.cidr} to {name} in {self.label}", errno.EAFNOSUPPORT)
        self.add_address(name, IPv4Interface(addr.cidr))

    def routes_via(self, oif: int) -> list[Route]:
        """Every unicast route through link ``oif``, of every family, in every table but
        the kernel's ``local`` one."""
        return self.routes(RT_TABLE_MAIN, oif=oif)

    def default_routes(self, oif: int | None = None) -> list[Route]:
        """The main table's unicast default routes of every family (``0.0.0.0/0`` and
        ``::/0``), through link ``oif`` if given."""
        return [r for r in self.routes(RT_TABLE_MAIN, oif=oif) if r.dst in DEFAULT_DSTS]

    def inet6_mode(self, name: str) -> int | None:
        """The IPv6 address generation mode of ``name`` (None: unknown, or no IPv6)."""
        return None

    def set_inet6_mode(self, name: str, mode: int, action: str) -> None:
        """Set the IPv6 address generation mode of ``name``."""

    def add_address(self, name: str, iface: IPv4Interface) -> None: ...
    def del_address(self, name: str, iface: IPv4Interface) -> None: ...
    def routes(self, table: int = RT_TABLE_MAIN, oif: int | None = None) -> list[Route]: ...
    def add_route(self, route: Route) -> None: ...
    def del_route(self, route: Route) -> None: ...
    def rules(self) -> Sequence[Rule]: ...
    def add_rule(self, src: str, table: int, priority: int) -> None: ...
    def del_rule(self, src: str, table: int, priority: int) -> None: ...
