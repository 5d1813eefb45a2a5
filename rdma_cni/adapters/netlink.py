"""rtnetlink of one netns: the one implementation of
:class:`rdma_cni.datapath.port.NetlinkPort` over the kernel.

One :class:`Netlink` is one socket bound to the netns it was created in
(:class:`rdma_cni.adapters.rtnl.Channel`); every step of an invocation in that netns
reuses it. pyroute2's message classes encode each request and decode each answer.
Links are addressed by name where the kernel allows it (set, move, delete: one
message, no lookup). Every call goes through one errno filter (:func:`_filtered`):
the errnos that mean "already so" are success, every other becomes a
:class:`NetlinkFailure` naming the action and the object.
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import os
import socket
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from rdma_cni.adapters import netns
from rdma_cni.adapters.rtnl import (
    NLM_F_CREATE,
    NLM_F_EXCL,
    RTM_DELADDR,
    RTM_DELLINK,
    RTM_DELROUTE,
    RTM_DELRULE,
    RTM_GETADDR,
    RTM_GETLINK,
    RTM_GETROUTE,
    RTM_GETRULE,
    RTM_NEWADDR,
    RTM_NEWLINK,
    RTM_NEWROUTE,
    RTM_NEWRULE,
    RTM_SETLINK,
    Channel,
    fibmsg,
    ifaddrmsg,
    ifinfmsg,
    rtmsg,
)
from rdma_cni.adapters.rtnlmsg import (
    address_of,
    header_table,
    link_of,
    route_of,
    route_request,
    rule_of,
    stats_of,
)
from rdma_cni.datapath.port import (
    RT_TABLE_MAIN,
    Link,
    LinkStats,
    NetlinkFailure,
    NetlinkPort,
    Route,
    Rule,
    failure,
    not_found,
)

AF_INET = socket.AF_INET
IPVLAN_MODE_L2 = 0
MACVLAN_MODE_BRIDGE = 4
IFF_UP = 1
FR_ACT_TO_TBL = 1
NEW = NLM_F_CREATE | NLM_F_EXCL
#: the errnos that mean "it is not there" (a delete of it is done)
ABSENT = (errno.ENODEV, errno.ENOENT, errno.ESRCH, errno.EADDRNOTAVAIL)
EXISTS = (errno.EEXIST,)
#: "address/prefix length" -> IPv4Interface (immutable; a node's addresses recur in every
#: request the resident process serves)
_interface = functools.lru_cache(maxsize=4096)(ipaddress.IPv4Interface)
__all__ = ["RT_TABLE_MAIN", "Link", "LinkStats", "Netlink", "NetlinkFailure", "Route"]


@contextmanager
def _filtered(action: str, ok: tuple[int, ...] = ()) -> Iterator[None]:
    """The one errno filter: an errno in ``ok`` ends the block as success (the caller
    reads that as "absent" or "already so"); any other is a NetlinkFailure."""
    try:
        yield
    except OSError as exc:
        if (exc.errno or 0) not in ok:
            raise failure(action, exc.errno or 0) from None


class Netlink(NetlinkPort):
    """A netlink socket in one netns: the kernel's :class:`NetlinkPort`."""

    def __init__(self, chan: Channel, label: str) -> None:
        self._nl = chan
        self.label = label
        #: links found by name, until this port changes them (a port lives for one request)
        self._known: dict[str, Link] = {}

    @classmethod
    def here(cls, label: str = "host") -> Netlink:
        return cls(Channel(), label)

    @classmethod
    def inside(cls, fd: int, home: int, label: str) -> Netlink:
        with netns.entered(fd, home):
            return cls(Channel(), label)

    def close(self) -> None:
        self._nl.close()

    # links: reads ------------------------------------------------------
    def links(self) -> list[Link]:
        out: list[Link] = []
        with _filtered(f"list links in {self.label}"):
            out = [link_of(m) for m in self._nl.dump(ifinfmsg, RTM_GETLINK)]
        return out

    def link(self, name: str) -> Link | None:
        known = self._known.get(name)
        if known is not None:
            return known
        msgs: list[Any] = []
        with _filtered(f"look up {name} in {self.label}", (errno.ENODEV,)):
            # one RTM_GETLINK by name: a dump would decode every link of the node
            msgs = self._nl.request(ifinfmsg, RTM_GETLINK, 0, [("IFLA_IFNAME", name)])
        if not msgs:
            return None
        self._known[name] = found = link_of(msgs[0])
        return found

    def link_stats(self, names: Iterable[str]) -> dict[str, LinkStats]:
        wanted, out = set(names), {}
        with _filtered(f"read link counters in {self.label}"):
            for msg in self._nl.dump(ifinfmsg, RTM_GETLINK):
                name = msg.get_attr("IFLA_IFNAME")
                st = stats_of(msg) if name in wanted else None
                if st is not None:
                    out[name] = st
        return out

    # links: changes ----------------------------------------------------
    def create_sublink(self, kind: str, name: str, parent: Link, target_fd: int,
                       mtu: int, mac: str | None) -> None:
        attrs: list[tuple[str, Any]] = [("IFLA_IFNAME", name), ("IFLA_LINK", parent.index),
                                        ("IFLA_NET_NS_FD", target_fd), ("IFLA_MTU", mtu)]
        if kind == "macvlan":
            data = [("IFLA_MACVLAN_MODE", MACVLAN_MODE_BRIDGE)]
            if mac:
                attrs.append(("IFLA_ADDRESS", mac))
        else:
            data = [("IFLA_IPVLAN_MODE", IPVLAN_MODE_L2)]
        attrs.append(("IFLA_LINKINFO", {"attrs": [("IFLA_INFO_KIND", kind),
                                                  ("IFLA_INFO_DATA", {"attrs": data})]}))
        with _filtered(f"create {kind} {name} on {parent.name}"):
            self._nl.request(ifinfmsg, RTM_NEWLINK, NEW, attrs)

    def _set(self, name: str, action: str, attrs: list[tuple[str, Any]], flags: int = 0,
             change: int = 0, **after: Any) -> None:
        """One RTM_SETLINK of the link named ``name`` (the kernel finds it by name);
        ``after``: the fields of a known link that the change sets (it is forgotten when
        there are none: e.g. a move to another netns)."""
        known = self._known.pop(name, None)
        try:
            with _filtered(action):
                self._nl.request(ifinfmsg, RTM_SETLINK, 0, [("IFLA_IFNAME", name), *attrs],
                                 flags=flags, change=change)
        except NetlinkFailure as exc:
            if exc.errno == errno.ENODEV:
                raise not_found(action, name, self.label) from None
            raise
        if known is not None and after:
            self._known[name] = replace(known, **after)

    def move_to_netns(self, name: str, target_fd: int, action: str) -> None:
        self._set(name, action, [("IFLA_NET_NS_FD", target_fd)])

    def rename(self, name: str, new: str, alias: str, action: str) -> None:
        link = self.link(name)
        if link is None:
            raise not_found(action, name, self.label)
        self._known.pop(name, None)
        self._known.pop(new, None)
        with _filtered(action):
            self._nl.request(ifinfmsg, RTM_SETLINK, 0,
                             [("IFLA_IFNAME", new), ("IFLA_IFALIAS", alias)], index=link.index)
        self._known[new] = replace(link, name=new, alias=alias or None)

    def set_up(self, name: str, action: str, mtu: int | None = None) -> None:
        self._set(name, action, [("IFLA_MTU", mtu)] if mtu else [], flags=IFF_UP, change=IFF_UP,
                  up=True, **({"mtu": mtu} if mtu else {}))

    def set_down(self, name: str, action: str) -> None:
        self._set(name, action, [], flags=0, change=IFF_UP, up=False)

    def set_mtu(self, name: str, mtu: int, action: str) -> None:
        self._set(name, action, [("IFLA_MTU", mtu)], mtu=mtu)

    def set_alias(self, name: str, alias: str, action: str) -> None:
        self._set(name, action, [("IFLA_IFALIAS", alias)], alias=alias or None)

    def delete_link(self, name: str) -> bool:
        self._known.pop(name, None)
        gone = False
        with _filtered(f"delete {name} in {self.label}", (errno.ENODEV,)):
            self._nl.request(ifinfmsg, RTM_DELLINK, 0, [("IFLA_IFNAME", name)])
            gone = True
        return gone

    def delete_links(self, names: Sequence[str]) -> None:
        """Mark the links with a link group of their own, then delete that group in one
        RTM_DELLINK: the kernel unregisters them together and waits for the network's
        grace period once, where one delete each waits once each (about 25 ms a link)."""
        wanted = list(dict.fromkeys(names))
        if len(wanted) < 2:
            return super().delete_links(wanted)
        group = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF or 1  # never group 0
        marked = []
        for name in wanted:
            try:
                self._set(name, f"mark {name} for deletion in {self.label}",
                          [("IFLA_GROUP", group)])
            except NetlinkFailure as exc:
                if exc.errno != errno.ENODEV:
                    raise
                continue  # already gone
            marked.append(name)
        if not marked:
            return None
        try:
            with _filtered(f"delete {', '.join(marked)} in {self.label}", (errno.ENODEV,)):
                self._nl.request(ifinfmsg, RTM_DELLINK, 0, [("IFLA_GROUP", group)])
        except NetlinkFailure:  # e.g. a kernel without group deletion: one by one
            super().delete_links(marked)
        return None

    # addresses ---------------------------------------------------------
    def addresses(self, index: int | None = None) -> list[tuple[int, ipaddress.IPv4Interface]]:
        msgs: Any = ()
        # the kernel filters by link (strict dumps); a link that is gone has none
        with _filtered(f"list addresses in {self.label}", (errno.ENODEV,)):
            msgs = self._nl.dump(ifaddrmsg, RTM_GETADDR, family=AF_INET, index=index or 0)
        pairs = (address_of(m) for m in msgs if not index or m["index"] == index)
        return [(i, _interface(a)) for i, a in pairs]

    def add_address(self, name: str, iface: ipaddress.IPv4Interface) -> None:
        self._addr(RTM_NEWADDR, NEW, name, iface, f"add {iface} to {name} in {self.label}",
                   EXISTS)

    def del_address(self, name: str, iface: ipaddress.IPv4Interface) -> None:
        self._addr(RTM_DELADDR, 0, name, iface,
                   f"delete {iface} from {name} in {self.label}", ABSENT)

    def _addr(self, kind: int, flags: int, name: str, iface: ipaddress.IPv4Interface,
              action: str, ok: tuple[int, ...]) -> None:
        link = self.require(name)
        ip = str(iface.ip)
        with _filtered(action, ok):
            self._nl.request(ifaddrmsg, kind, flags, [("IFA_ADDRESS", ip), ("IFA_LOCAL", ip)],
                             family=AF_INET, prefixlen=iface.network.prefixlen,
                             index=link.index)

    # routes and rules --------------------------------------------------
    def routes(self, table: int = RT_TABLE_MAIN, oif: int | None = None) -> list[Route]:
        msgs: Any = ()
        attrs = [("RTA_TABLE", table)] + ([("RTA_OIF", oif)] if oif else [])
        # filtered by the kernel (strict dumps): no such table or link means no routes
        with _filtered(f"list routes of table {table} in {self.label}",
                       (errno.ENOENT, errno.ENODEV)):
            msgs = self._nl.dump(rtmsg, RTM_GETROUTE, attrs, family=AF_INET,
                                 table=header_table(table))
        out = [route_of(m) for m in msgs]
        return [r for r in out if r.table == table and (oif is None or r.oif == oif)]

    def route_oif(self, dst: str, src: str) -> int | None:
        """The link the kernel routes ``src -> dst`` through (``ip route get dst from
        src``: rules and tables as a socket bound to ``src`` sees them); None without
        a route."""
        msgs: Any = ()
        with _filtered(f"look up the route from {src} to {dst} in {self.label}",
                       (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EINVAL)):
            msgs = self._nl.request(rtmsg, RTM_GETROUTE, 0, [("RTA_DST", dst), ("RTA_SRC", src)],
                                    family=AF_INET, dst_len=32, src_len=32)
        return route_of(msgs[0]).oif if msgs else None

    def add_route(self, route: Route) -> None:
        fields, attrs = route_request(route)
        with _filtered(f"add route {route.dst} to table {route.table} in {self.label}", EXISTS):
            self._nl.request(rtmsg, RTM_NEWROUTE, NEW, attrs, **fields)

    def del_route(self, route: Route) -> None:
        fields, attrs = route_request(route, delete=True)
        with _filtered(f"delete route {route.dst} from table {route.table}", ABSENT):
            self._nl.request(rtmsg, RTM_DELROUTE, 0, attrs, **fields)

    def rules(self) -> list[Rule]:
        """(priority, table, source CIDR) of every IPv4 rule."""
        msgs: Any = ()
        with _filtered(f"list rules in {self.label}"):
            msgs = self._nl.dump(fibmsg, RTM_GETRULE, family=AF_INET)
        return [rule_of(m) for m in msgs]

    def add_rule(self, src: str, table: int, priority: int) -> None:
        self._rule(RTM_NEWRULE, NEW, src, table, priority,
                   f"add rule from {src} lookup {table} in {self.label}", EXISTS)

    def del_rule(self, src: str, table: int, priority: int) -> None:
        self._rule(RTM_DELRULE, 0, src, table, priority,
                   f"delete rule from {src} lookup {table}", ABSENT)

    def _rule(self, kind: int, flags: int, src: str, table: int, priority: int, action: str,
              ok: tuple[int, ...]) -> None:
        with _filtered(action, ok):
            self._nl.request(fibmsg, kind, flags,
                             [("FRA_SRC", src), ("FRA_TABLE", table), ("FRA_PRIORITY", priority)],
                             family=AF_INET, src_len=32, table=header_table(table),
                             action=FR_ACT_TO_TBL)
