"""rtnetlink of one netns, layer 3: addresses, routes and rules of the netns a
:class:`rdma_cni.adapters.netlink.Netlink` is bound to (its base class). The IPv4
methods serve every mode; ``addrs``, ``put_addr`` and ``routes_via`` read and write
every family (an exclusive NIC's own configuration)."""

from __future__ import annotations

import errno
import functools
import ipaddress
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rdma_cni.adapters.rtnl import (
    NLM_F_CREATE,
    NLM_F_EXCL,
    RTM_DELADDR,
    RTM_DELROUTE,
    RTM_DELRULE,
    RTM_GETADDR,
    RTM_GETROUTE,
    RTM_GETRULE,
    RTM_NEWADDR,
    RTM_NEWROUTE,
    RTM_NEWRULE,
    Channel,
    fibmsg,
    ifaddrmsg,
    rtmsg,
)
from rdma_cni.adapters.rtnlmsg import (
    addr_of,
    addr_request,
    address_of,
    header_table,
    route_of,
    route_request,
    rule_of,
)
from rdma_cni.vocab.netlink import (
    DEFAULT_DSTS,
    RT_TABLE_LOCAL,
    RT_TABLE_MAIN,
    RTN_UNICAST,
    Addr,
    Route,
    Rule,
    failure,
)
from rdma_cni.vocab.ports import NetlinkPort

AF_INET = socket.AF_INET
AF_INET6 = socket.AF_INET6
FR_ACT_TO_TBL = 1
#: rtm_flags of a route lookup: answer with the FIB entry matched (not the cached route
#: made from it; Linux >= 4.13), and name the table it is in (IPv4; an IPv6 entry names
#: its table itself, and the kernel refuses the flag there)
RTM_F_LOOKUP_TABLE = 0x1000
RTM_F_FIB_MATCH = 0x2000
NEW = NLM_F_CREATE | NLM_F_EXCL
#: the errnos that mean "it is not there" (a delete of it is done)
ABSENT = (errno.ENODEV, errno.ENOENT, errno.ESRCH, errno.EADDRNOTAVAIL)
EXISTS = (errno.EEXIST,)
#: "address/prefix length" -> IPv4Interface (immutable; a node's addresses recur in every
#: request the resident process serves)
_interface = functools.lru_cache(maxsize=4096)(ipaddress.IPv4Interface)


@contextmanager
def filtered(action: str, ok: tuple[int, ...] = ()) -> Iterator[None]:
    """The one errno filter: an errno in ``ok`` ends the block as success (the caller
    reads that as "absent" or "already so"); any other is a NetlinkFailure."""
    try:
        yield
    except OSError as exc:
        if (exc.errno or 0) not in ok:
            raise failure(action, exc.errno or 0) from None


class Layer3(NetlinkPort):
    """Addresses, routes and rules over the channel ``_nl`` of this netns."""

    _nl: Channel
    label: str

    # addresses ---------------------------------------------------------
    def addresses(self, index: int | None = None) -> list[tuple[int, ipaddress.IPv4Interface]]:
        msgs: Any = ()
        # the kernel filters by link (strict dumps); a link that is gone has none
        with filtered(f"list addresses in {self.label}", (errno.ENODEV,)):
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
        with filtered(action, ok):
            self._nl.request(ifaddrmsg, kind, flags, [("IFA_ADDRESS", ip), ("IFA_LOCAL", ip)],
                             family=AF_INET, prefixlen=iface.network.prefixlen,
                             index=link.index)

    # every family: an exclusive NIC's own configuration -------------------------
    def addrs(self, index: int) -> list[Addr]:
        msgs: Any = ()
        with filtered(f"list addresses in {self.label}", (errno.ENODEV,)):
            msgs = self._nl.dump(ifaddrmsg, RTM_GETADDR, family=0, index=index)
        return [a for i, a in (addr_of(m) for m in msgs) if i == index]

    def put_addr(self, name: str, addr: Addr) -> None:
        fields, attrs = addr_request(addr, self.require(name).index)
        with filtered(f"add {addr.cidr} to {name} in {self.label}", EXISTS):
            self._nl.request(ifaddrmsg, RTM_NEWADDR, NEW, attrs, **fields)

    def routes_via(self, oif: int) -> list[Route]:
        out: list[Route] = []
        for family in (AF_INET, AF_INET6):
            msgs: Any = ()
            # every table (0), filtered to the link by the kernel; a kernel without IPv6
            # has no IPv6 routes
            with filtered(f"list routes through link {oif} in {self.label}",
                           (errno.ENODEV, errno.ENOENT, errno.EAFNOSUPPORT)):
                msgs = self._nl.dump(rtmsg, RTM_GETROUTE, [("RTA_OIF", oif)], family=family)
            out += [r for r in (route_of(m) for m in msgs)
                    if r.oif == oif and r.table != RT_TABLE_LOCAL and r.type == RTN_UNICAST]
        return out

    def routes_through(self, oif: int) -> list[Route]:
        msgs: Any = ()
        # every table (0), filtered to the link by the kernel (a multipath route passes
        # when one of its nexthops is on it)
        with filtered(f"list routes through link {oif} in {self.label}",
                      (errno.ENODEV, errno.ENOENT)):
            msgs = self._nl.dump(rtmsg, RTM_GETROUTE, [("RTA_OIF", oif)], family=AF_INET)
        return [r for r in (route_of(m) for m in msgs)
                if oif in r.devices and r.table != RT_TABLE_LOCAL and r.type == RTN_UNICAST]

    # routes and rules --------------------------------------------------
    def routes(self, table: int = RT_TABLE_MAIN, oif: int | None = None) -> list[Route]:
        msgs: Any = ()
        attrs = [("RTA_TABLE", table)] + ([("RTA_OIF", oif)] if oif else [])
        # filtered by the kernel (strict dumps): no such table or link means no routes
        with filtered(f"list routes of table {table} in {self.label}",
                       (errno.ENOENT, errno.ENODEV)):
            msgs = self._nl.dump(rtmsg, RTM_GETROUTE, attrs, family=AF_INET,
                                 table=header_table(table))
        out = [route_of(m) for m in msgs]
        return [r for r in out if r.table == table and (oif is None or r.oif == oif)]

    def default_routes(self, oif: int | None = None) -> list[Route]:
        out: list[Route] = []
        attrs = [("RTA_TABLE", RT_TABLE_MAIN)] + ([("RTA_OIF", oif)] if oif else [])
        for family in (AF_INET, AF_INET6):
            msgs: Any = ()
            # filtered by the kernel (strict dumps); a kernel without IPv6 has no IPv6 routes
            with filtered(f"list the default routes in {self.label}",
                          (errno.ENOENT, errno.ENODEV, errno.EAFNOSUPPORT)):
                msgs = self._nl.dump(rtmsg, RTM_GETROUTE, attrs, family=family,
                                     table=RT_TABLE_MAIN)
            out += [r for r in (route_of(m) for m in msgs)
                    if r.dst in DEFAULT_DSTS and r.table == RT_TABLE_MAIN
                    and r.type == RTN_UNICAST and (oif is None or oif in r.devices)]
        return out

    def route_match(self, dst: str) -> Route | None:
        """The route the kernel's lookup of ``dst`` matches (``ip route get fibmatch
        dst``), through the policy rules as this process's packets see them: the FIB
        entry with its table, prefix, type, metric and every nexthop's link; None when
        nothing routes ``dst`` (or the kernel has no IPv6). A reject route (unreachable,
        prohibit, blackhole) is the kernel's refusal: a NetlinkFailure."""
        v6 = ":" in dst
        msgs: Any = ()
        with filtered(f"look up the route to {dst} in {self.label}",
                      (errno.ENETUNREACH, errno.EAFNOSUPPORT)):
            msgs = self._nl.request(
                rtmsg, RTM_GETROUTE, 0, [("RTA_DST", dst)], family=AF_INET6 if v6 else AF_INET,
                dst_len=128 if v6 else 32,
                flags=RTM_F_FIB_MATCH if v6 else RTM_F_FIB_MATCH | RTM_F_LOOKUP_TABLE)
        return route_of(msgs[0]) if msgs else None

    def route_oif(self, dst: str, src: str) -> int | None:
        """The link the kernel routes ``src -> dst`` through (``ip route get dst from
        src``: rules and tables as a socket bound to ``src`` sees them); None without
        a route."""
        msgs: Any = ()
        with filtered(f"look up the route from {src} to {dst} in {self.label}",
                      (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EINVAL)):
            msgs = self._nl.request(rtmsg, RTM_GETROUTE, 0, [("RTA_DST", dst), ("RTA_SRC", src)],
                                    family=AF_INET, dst_len=32, src_len=32)
        return route_of(msgs[0]).oif if msgs else None

    def add_route(self, route: Route) -> None:
        fields, attrs = route_request(route)
        with filtered(f"add route {route.dst} to table {route.table} in {self.label}", EXISTS):
            self._nl.request(rtmsg, RTM_NEWROUTE, NEW, attrs, **fields)

    def del_route(self, route: Route) -> None:
        fields, attrs = route_request(route, delete=True)
        with filtered(f"delete route {route.dst} from table {route.table}", ABSENT):
            self._nl.request(rtmsg, RTM_DELROUTE, 0, attrs, **fields)

    def rules(self) -> list[Rule]:
        """(priority, table, source CIDR) of every IPv4 rule."""
        msgs: Any = ()
        with filtered(f"list rules in {self.label}"):
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
        with filtered(action, ok):
            self._nl.request(fibmsg, kind, flags,
                             [("FRA_SRC", src), ("FRA_TABLE", table), ("FRA_PRIORITY", priority)],
                             family=AF_INET, src_len=32, table=header_table(table),
                             action=FR_ACT_TO_TBL)
