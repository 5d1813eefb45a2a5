"""rtnetlink through pyroute2: the only module that imports it, and the one
implementation of :class:`rdma_cni.datapath.port.NetlinkPort` over the kernel.

One :class:`Netlink` is one socket bound to the netns it was created in; every
step of an invocation in that netns reuses it. Every call goes through one errno
filter (:func:`_filtered`): the errnos that mean "already so" are success, every
other becomes a :class:`NetlinkFailure` naming the action and the object.
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import ipaddress
import socket
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from rdma_cni.adapters import netns
from rdma_cni.adapters.rtnlmsg import link_of, route_of, route_spec, stats_of
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


def _light_package() -> None:
    """Import pyroute2's modules without its package ``__init__``, which imports every
    netlink family it has (NDB, IPDB, conntrack, nftables, wireless, ...: about half
    the in-process plugin's start-up). The package module stands in with its real
    ``__path__``; the first attribute asked of it that is not a submodule runs the real
    ``__init__`` into it, so any other user of ``pyroute2`` still sees all of it."""
    if "pyroute2" in sys.modules:
        return
    spec = importlib.util.find_spec("pyroute2")
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return
    pkg = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def complete(name: str) -> Any:
        if not name.startswith("__") and importlib.util.find_spec(f"pyroute2.{name}"):
            return importlib.import_module(f"pyroute2.{name}")  # `from pyroute2 import config`
        del pkg.__dict__["__getattr__"]
        loader.exec_module(pkg)
        return getattr(pkg, name)

    pkg.__dict__["__getattr__"] = complete
    sys.modules["pyroute2"] = pkg


_light_package()
from pyroute2.iproute.linux import IPRoute  # noqa: E402
from pyroute2.netlink.exceptions import NetlinkError  # noqa: E402

AF_INET = socket.AF_INET
IPVLAN_MODE_L2 = 0
#: the errnos that mean "it is not there" (a delete of it is done)
ABSENT = (errno.ENODEV, errno.ENOENT, errno.ESRCH, errno.EADDRNOTAVAIL)
EXISTS = (errno.EEXIST,)
__all__ = ["RT_TABLE_MAIN", "Link", "LinkStats", "Netlink", "NetlinkFailure", "Route"]


@contextmanager
def _filtered(action: str, ok: tuple[int, ...] = ()) -> Iterator[None]:
    """The one errno filter: an errno in ``ok`` ends the block as success (the caller
    reads that as "absent" or "already so"); any other is a NetlinkFailure."""
    try:
        yield
    except NetlinkError as exc:
        if exc.code not in ok:
            raise failure(action, exc.code) from None
    except OSError as exc:
        if (exc.errno or 0) not in ok:
            raise failure(action, exc.errno or 0) from None


def _socket() -> IPRoute:
    """A request socket in no multicast group: pyroute2 subscribes to link, address and
    route events by default, and would parse every broadcast of a busy node and of our
    own changes. (Not ``strict_check``: with it, execs hung at exit holding the store
    lock under the 64-pod load test.)"""
    return IPRoute(groups=0)


class Netlink(NetlinkPort):
    """A netlink socket in one netns: the kernel's :class:`NetlinkPort`."""

    def __init__(self, ipr: IPRoute, label: str) -> None:
        self._ipr = ipr
        self.label = label

    @classmethod
    def here(cls, label: str = "host") -> Netlink:
        return cls(_socket(), label)

    @classmethod
    def inside(cls, fd: int, home: int, label: str) -> Netlink:
        with netns.entered(fd, home):
            return cls(_socket(), label)

    def close(self) -> None:
        self._ipr.close()

    # links: reads ------------------------------------------------------
    def links(self) -> list[Link]:
        out: list[Link] = []
        with _filtered(f"list links in {self.label}"):
            out = [link_of(m) for m in self._ipr.get_links()]
        return out

    def link(self, name: str) -> Link | None:
        msgs: list[Any] = []
        with _filtered(f"look up {name} in {self.label}", (errno.ENODEV,)):
            # one RTM_GETLINK by name (link_lookup + get_links would be two)
            msgs = list(self._ipr.link("get", ifname=name))
        return link_of(msgs[0]) if msgs else None

    def link_stats(self, names: Iterable[str]) -> dict[str, LinkStats]:
        wanted, out = set(names), {}
        with _filtered(f"read link counters in {self.label}"):
            for msg in self._ipr.get_links():
                name = msg.get_attr("IFLA_IFNAME")
                st = stats_of(msg) if name in wanted else None
                if st is not None:
                    out[name] = st
        return out

    # links: changes ----------------------------------------------------
    def create_sublink(self, kind: str, name: str, parent: Link, target_fd: int,
                       mtu: int, mac: str | None) -> None:
        spec: dict[str, Any] = {"ifname": name, "kind": kind, "link": parent.index,
                                "net_ns_fd": target_fd, "mtu": mtu}
        if kind == "macvlan":
            spec["macvlan_mode"] = "bridge"
            if mac:
                spec["address"] = mac
        else:
            spec["ipvlan_mode"] = IPVLAN_MODE_L2
        with _filtered(f"create {kind} {name} on {parent.name}"):
            self._ipr.link("add", **spec)

    def _set(self, name: str, action: str, **kw: Any) -> None:
        link = self.link(name)
        if link is None:
            raise not_found(action, name, self.label)
        with _filtered(action):
            self._ipr.link("set", index=link.index, **kw)

    def move_to_netns(self, name: str, target_fd: int, action: str) -> None:
        self._set(name, action, net_ns_fd=target_fd)

    def rename(self, name: str, new: str, alias: str, action: str) -> None:
        self._set(name, action, ifname=new, ifalias=alias)

    def set_up(self, name: str, action: str, mtu: int | None = None) -> None:
        self._set(name, action, state="up", **({"mtu": mtu} if mtu else {}))

    def set_down(self, name: str, action: str) -> None:
        self._set(name, action, state="down")

    def set_mtu(self, name: str, mtu: int, action: str) -> None:
        self._set(name, action, mtu=mtu)

    def set_alias(self, name: str, alias: str, action: str) -> None:
        self._set(name, action, ifalias=alias)

    def delete_link(self, name: str) -> bool:
        link = self.link(name)
        if link is None:
            return False
        gone = False
        with _filtered(f"delete {name} in {self.label}", (errno.ENODEV,)):
            self._ipr.link("del", index=link.index)
            gone = True
        return gone

    # addresses ---------------------------------------------------------
    def addresses(self, index: int | None = None) -> list[tuple[int, ipaddress.IPv4Interface]]:
        msgs: Any = ()
        with _filtered(f"list addresses in {self.label}"):
            msgs = self._ipr.get_addr(family=AF_INET, index=index) if index else \
                self._ipr.get_addr(family=AF_INET)
        out = []
        for m in msgs:
            addr = m.get_attr("IFA_LOCAL") or m.get_attr("IFA_ADDRESS")
            out.append((m["index"], ipaddress.IPv4Interface(f"{addr}/{m['prefixlen']}")))
        return out

    def add_address(self, name: str, iface: ipaddress.IPv4Interface) -> None:
        self._addr("add", name, iface, f"add {iface} to {name} in {self.label}", EXISTS)

    def del_address(self, name: str, iface: ipaddress.IPv4Interface) -> None:
        self._addr("del", name, iface, f"delete {iface} from {name} in {self.label}", ABSENT)

    def _addr(self, cmd: str, name: str, iface: ipaddress.IPv4Interface, action: str,
              ok: tuple[int, ...]) -> None:
        link = self.require(name)
        with _filtered(action, ok):
            self._ipr.addr(cmd, index=link.index, address=str(iface.ip),
                           prefixlen=iface.network.prefixlen)

    # routes and rules --------------------------------------------------
    def routes(self, table: int = RT_TABLE_MAIN, oif: int | None = None) -> list[Route]:
        msgs: Any = ()
        with _filtered(f"list routes of table {table} in {self.label}"):
            msgs = self._ipr.get_routes(family=AF_INET, table=table)
        out = [route_of(m) for m in msgs]
        return [r for r in out if oif is None or r.oif == oif]

    def add_route(self, route: Route) -> None:
        with _filtered(f"add route {route.dst} to table {route.table} in {self.label}", EXISTS):
            self._ipr.route("add", **route_spec(route))

    def del_route(self, route: Route) -> None:
        spec: dict[str, Any] = {"dst": route.dst, "table": route.table}
        if route.gateway:
            spec["gateway"] = route.gateway
        with _filtered(f"delete route {route.dst} from table {route.table}", ABSENT):
            self._ipr.route("del", **spec)

    def rules(self) -> list[Rule]:
        """(priority, table, source CIDR) of every IPv4 rule."""
        msgs: Any = ()
        with _filtered(f"list rules in {self.label}"):
            msgs = self._ipr.get_rules(family=AF_INET)
        out: list[Rule] = []
        for m in msgs:
            src = m.get_attr("FRA_SRC")
            table = m.get_attr("FRA_TABLE") or m["table"]
            out.append((m.get_attr("FRA_PRIORITY") or 0, table,
                        f"{src}/{m['src_len']}" if src else None))
        return out

    def add_rule(self, src: str, table: int, priority: int) -> None:
        self._rule("add", src, table, priority, f"add rule from {src} lookup {table} in "
                   f"{self.label}", EXISTS)

    def del_rule(self, src: str, table: int, priority: int) -> None:
        self._rule("del", src, table, priority, f"delete rule from {src} lookup {table}",
                   ABSENT)

    def _rule(self, cmd: str, src: str, table: int, priority: int, action: str,
              ok: tuple[int, ...]) -> None:
        with _filtered(action, ok):
            self._ipr.rule(cmd, family=AF_INET, src=src, src_len=32, table=table,
                           priority=priority)
