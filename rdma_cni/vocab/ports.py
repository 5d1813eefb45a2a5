"""The netlink port: what the datapath, teardown, check, doctor and the exporter ask
of a network namespace, named by intent and split by it. Stdlib only.

One port is bound to one netns (its ``label`` names it in errors). Five protocols of
at most ten methods each: :class:`Bound` (the binding), :class:`LinkView` and
:class:`LinkChanges` (links read and changed), :class:`L3View` and :class:`L3Changes`
(addresses, routes and rules read and changed). :class:`NetlinkPort` is all five: the
real implementation is :class:`rdma_cni.adapters.netlink.Netlink` (pyroute2) and
``tests/support/fakes/netlink.py`` is an in-memory one, held to the same behaviour by a
contract test against the kernel. A consumer annotates with the narrowest protocol it
uses. The records, constants and errors are in :mod:`rdma_cni.vocab.netlink`.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable, Sequence
from ipaddress import IPv4Interface
from typing import Protocol

from rdma_cni.errors import NicUnavailable
from rdma_cni.vocab.netlink import (
    DEFAULT_DSTS,
    RT_TABLE_MAIN,
    Addr,
    Link,
    LinkConf,
    LinkStats,
    Route,
    Rule,
    failure,
)


class Bound(Protocol):
    """A port bound to one netns."""

    label: str

    def close(self) -> None: ...


class LinkView(Bound, Protocol):
    """Links: reads."""

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
    def link_conf(self, name: str) -> LinkConf | None:
        """The settings of ``name`` (:class:`LinkConf`; None: no such link, or unknown)."""
        return None


class LinkChanges(Bound, Protocol):
    """Links: changes (``name`` is looked up here; ENODEV if it is not)."""

    def create_sublink(self, kind: str, name: str, parent: Link, target_fd: int,
                       mtu: int, mac: str | None) -> None:
        """An ipvlan (L2) or macvlan (bridge) ``name`` of ``parent`` (a link of this netns),
        made directly in the netns ``target_fd``."""

    def move_to_netns(self, name: str, target_fd: int, action: str) -> None: ...
    def rename(self, name: str, new: str, alias: str, action: str) -> None:
        """Rename and set the alias in one change ("" clears the alias)."""

    def set_up(self, name: str, action: str, mtu: int | None = None) -> None: ...
    def set_down(self, name: str, action: str) -> None: ...
    def set_alias(self, name: str, alias: str, action: str) -> None: ...
    def delete_link(self, name: str) -> bool:
        """False if there was no such link."""

    def delete_link_at(self, index: int) -> bool:
        """Delete the link ``index`` of this netns (a name can change under a lookup);
        False if there was no such link."""

    def delete_links(self, names: Sequence[str]) -> None:
        """Delete these links together (the kernel adapter has the kernel tear them down
        in one batch, waiting once for all); absent ones are skipped. This default deletes
        them one by one."""
        for name in dict.fromkeys(names):
            self.delete_link(name)


class LinkSettings(Bound, Protocol):
    """A link's own settings an exclusive NIC gets back on the host."""

    def set_mtu(self, name: str, mtu: int, action: str) -> None: ...
    def set_mac(self, name: str, mac: str, action: str) -> None: ...
    def set_flags(self, name: str, flags: int, mask: int, action: str) -> None:
        """Set the link flags (ifi_flags) of ``mask`` to those of ``flags``."""

    def set_txqlen(self, name: str, txqlen: int, action: str) -> None: ...
    def set_ipv6_conf(self, name: str, values: Sequence[tuple[str, int]], action: str) -> None:
        """Set IPv6 settings of ``name`` (keys of :data:`~rdma_cni.vocab.netlink.IPV6_DEVCONF`,
        as ``/proc/sys/net/ipv6/conf/<name>/<key>`` names them), in order."""

    def add_altname(self, name: str, altname: str, action: str) -> None:
        """Give ``name`` the alternative name ``altname`` (IFLA_ALT_IFNAME)."""

    def del_altname(self, name: str, altname: str, action: str) -> None:
        """Take the alternative name ``altname`` from ``name`` (absent: success)."""


class L3View(Bound, Protocol):
    """Addresses, routes and rules: reads. The IPv4 methods serve the pod side; the
    ones of every family an exclusive NIC's own configuration, with defaults that
    serve IPv4 only through the IPv4 methods (the kernel adapter reads every family)."""

    def addresses(self, index: int | None = None) -> list[tuple[int, IPv4Interface]]: ...
    def addrs(self, index: int) -> list[Addr]:
        """Every address of link ``index``, of every family, in the kernel's order (the
        primary IPv4 address of a subnet before its secondaries)."""
        return [Addr(str(a)) for i, a in self.addresses(index) if i == index]

    def routes(self, table: int = RT_TABLE_MAIN, oif: int | None = None) -> list[Route]: ...
    def routes_via(self, oif: int) -> list[Route]:
        """Every unicast route through link ``oif``, of every family, in every table but
        the kernel's ``local`` one."""
        return self.routes(RT_TABLE_MAIN, oif=oif)

    def routes_through(self, oif: int) -> list[Route]:
        """Every IPv4 unicast route that leads through link ``oif`` (its own link, or a
        multipath route's nexthop), in every table but ``local``: one dump."""
        return [r for r in self.routes(RT_TABLE_MAIN) if oif in r.devices]

    def default_routes(self, oif: int | None = None) -> list[Route]:
        """The main table's unicast default routes of every family (``0.0.0.0/0`` and
        ``::/0``), through link ``oif`` if given."""
        return [r for r in self.routes(RT_TABLE_MAIN, oif=oif) if r.dst in DEFAULT_DSTS]

    def route_match(self, dst: str) -> Route | None:
        """The route the kernel's lookup of ``dst`` matches (``ip route get fibmatch``):
        the table entry itself (table, prefix, type, metric, every nexthop's link); None
        when nothing routes ``dst``; a reject route: a NetlinkFailure."""
        ...

    def rules(self) -> Sequence[Rule]: ...

class L3Changes(Bound, Protocol):
    """Addresses, routes and rules: changes (present already on an add, or absent on a
    delete: success)."""

    def add_address(self, name: str, iface: IPv4Interface) -> None: ...
    def del_address(self, name: str, iface: IPv4Interface) -> None: ...
    def put_addr(self, name: str, addr: Addr) -> None:
        """Add ``addr`` to ``name`` with its flags, lifetimes, label and broadcast (present
        already: success)."""
        if addr.version != 4:
            raise failure(f"add {addr.cidr} to {name} in {self.label}", errno.EAFNOSUPPORT)
        self.add_address(name, IPv4Interface(addr.cidr))

    def add_route(self, route: Route) -> None: ...
    def del_route(self, route: Route) -> None: ...
    def add_rule(self, src: str, table: int, priority: int) -> None: ...
    def del_rule(self, src: str, table: int, priority: int) -> None: ...
    def set_inet6_mode(self, name: str, mode: int, action: str) -> None:
        """Set the IPv6 address generation mode of ``name``."""
    def set_ipv4_conf(self, name: str, values: Sequence[tuple[str, int]], action: str) -> None:
        """Set IPv4 settings of ``name`` (keys of :data:`~rdma_cni.vocab.netlink.IPV4_DEVCONF`,
        as ``/proc/sys/net/ipv4/conf/<name>/<key>`` names them) in one request."""


class NetlinkPort(LinkView, LinkChanges, LinkSettings, L3View, L3Changes, Protocol):
    """rtnetlink of one netns: every intent."""
