"""rtnetlink through pyroute2: the only module that imports it.

One :class:`Netlink` is one socket bound to the netns it was created in; every
step of an invocation in that netns reuses it. Errors become CniError-family
exceptions naming the action and the object.
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import ipaddress
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rdma_cni.adapters import netns
from rdma_cni.errors import CniError, IOFailure, NicUnavailable


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
RT_TABLE_MAIN = 254
RTNH_F_ONLINK = 4
IPVLAN_MODE_L2 = 0


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


@dataclass(frozen=True)
class Route:
    dst: str  # CIDR
    gateway: str | None
    oif: int | None
    table: int
    onlink: bool = False
    scope: int = 0
    proto: int = 0  # 0: pyroute2's default (static)
    priority: int = 0  # the metric
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


class NetlinkFailure(IOFailure):
    def __init__(self, msg: str, err: int) -> None:
        super().__init__(msg)
        self.errno = err


def _fail(action: str, exc: NetlinkError | OSError) -> CniError:
    err = exc.code if isinstance(exc, NetlinkError) else (exc.errno or 0)
    reason = os_strerror(err)
    return NetlinkFailure(f"failed to {action}: {reason}", err)


def os_strerror(err: int) -> str:
    import os

    try:
        return os.strerror(err).lower()
    except (ValueError, OverflowError):
        return f"error {err}"


def _socket() -> IPRoute:
    """A request socket in no multicast group: pyroute2 subscribes to link, address and
    route events by default, and would parse every broadcast of a busy node and of our
    own changes. (Not ``strict_check``: with it, execs hung at exit holding the store
    lock under the 64-pod load test.)"""
    return IPRoute(groups=0)


def _link(msg: Any) -> Link:
    info = msg.get_attr("IFLA_LINKINFO")
    kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
    return Link(
        index=msg["index"],
        name=msg.get_attr("IFLA_IFNAME"),
        mtu=msg.get_attr("IFLA_MTU") or 0,
        mac=(msg.get_attr("IFLA_ADDRESS") or "").lower(),
        kind=kind,
        up=bool(msg["flags"] & 1),
        perm_mac=(msg.get_attr("IFLA_PERM_ADDRESS") or None),
        parent_dev=msg.get_attr("IFLA_PARENT_DEV_NAME"),
        parent_bus=msg.get_attr("IFLA_PARENT_DEV_BUS_NAME"),
        alias=msg.get_attr("IFLA_IFALIAS"),
    )


class Netlink:
    """A netlink socket in one netns."""

    def __init__(self, ipr: IPRoute, label: str) -> None:
        self.ipr = ipr
        self.label = label

    @classmethod
    def here(cls, label: str = "host") -> Netlink:
        return cls(_socket(), label)

    @classmethod
    def inside(cls, fd: int, home: int, label: str) -> Netlink:
        with netns.entered(fd, home):
            return cls(_socket(), label)

    def close(self) -> None:
        self.ipr.close()

    # links -------------------------------------------------------------
    def links(self) -> list[Link]:
        try:
            return [_link(m) for m in self.ipr.get_links()]
        except NetlinkError as exc:
            raise _fail(f"list links in {self.label}", exc) from None

    def link(self, name: str) -> Link | None:
        try:  # one RTM_GETLINK by name (link_lookup + get_links would be two)
            msgs = list(self.ipr.link("get", ifname=name))
            return _link(msgs[0]) if msgs else None
        except NetlinkError as exc:
            if exc.code == errno.ENODEV:
                return None
            raise _fail(f"look up {name} in {self.label}", exc) from None

    def require(self, name: str) -> Link:
        link = self.link(name)
        if link is None:
            raise NicUnavailable(f"RDMA NIC {name} not found in {self.label}")
        return link

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
        try:
            self.ipr.link("add", **spec)
        except NetlinkError as exc:
            raise _fail(f"create {kind} {name} on {parent.name}", exc) from None

    def set_link(self, name: str, action: str, **kw: Any) -> None:
        link = self.link(name)
        if link is None:
            raise NetlinkFailure(f"failed to {action}: {name} not found in {self.label}",
                                 errno.ENODEV)
        try:
            self.ipr.link("set", index=link.index, **kw)
        except NetlinkError as exc:
            raise _fail(action, exc) from None

    def delete_link(self, name: str) -> bool:
        link = self.link(name)
        if link is None:
            return False
        try:
            self.ipr.link("del", index=link.index)
        except NetlinkError as exc:
            if exc.code == errno.ENODEV:
                return False
            raise _fail(f"delete {name} in {self.label}", exc) from None
        return True

    # addresses ---------------------------------------------------------
    def addresses(self, index: int | None = None) -> list[tuple[int, ipaddress.IPv4Interface]]:
        try:
            msgs = self.ipr.get_addr(family=AF_INET, index=index) if index else \
                self.ipr.get_addr(family=AF_INET)
        except NetlinkError as exc:
            raise _fail(f"list addresses in {self.label}", exc) from None
        out = []
        for m in msgs:
            addr = m.get_attr("IFA_LOCAL") or m.get_attr("IFA_ADDRESS")
            out.append((m["index"], ipaddress.IPv4Interface(f"{addr}/{m['prefixlen']}")))
        return out

    def add_address(self, name: str, iface: ipaddress.IPv4Interface) -> None:
        link = self.require(name)
        try:
            self.ipr.addr("add", index=link.index, address=str(iface.ip),
                          prefixlen=iface.network.prefixlen)
        except NetlinkError as exc:
            if exc.code != errno.EEXIST:
                raise _fail(f"add {iface} to {name} in {self.label}", exc) from None

    # routes and rules --------------------------------------------------
    def routes(self, table: int = RT_TABLE_MAIN, oif: int | None = None) -> list[Route]:
        try:
            msgs = self.ipr.get_routes(family=AF_INET, table=table)
        except NetlinkError as exc:
            raise _fail(f"list routes of table {table} in {self.label}", exc) from None
        out = [_route(m) for m in msgs]
        return [r for r in out if oif is None or r.oif == oif]

    def add_route(self, route: Route) -> None:
        spec: dict[str, Any] = {"dst": route.dst, "table": route.table, "oif": route.oif,
                                "scope": route.scope}
        if route.gateway:
            spec["gateway"] = route.gateway
        if route.onlink:
            spec["flags"] = RTNH_F_ONLINK
        if route.proto:
            spec["proto"] = route.proto
        if route.priority:
            spec["priority"] = route.priority
        try:
            self.ipr.route("add", **spec)
        except NetlinkError as exc:
            if exc.code != errno.EEXIST:
                raise _fail(f"add route {route.dst} to table {route.table} in {self.label}",
                            exc) from None

    def del_route(self, route: Route) -> None:
        spec: dict[str, Any] = {"dst": route.dst, "table": route.table}
        if route.gateway:
            spec["gateway"] = route.gateway
        try:
            self.ipr.route("del", **spec)
        except NetlinkError as exc:
            if exc.code not in (errno.ESRCH, errno.ENOENT, errno.ENODEV):
                raise _fail(f"delete route {route.dst} from table {route.table}", exc) from None

    def rules(self) -> Iterator[tuple[int, int, str | None]]:
        """(priority, table, source CIDR) of every IPv4 rule."""
        try:
            msgs = self.ipr.get_rules(family=AF_INET)
        except NetlinkError as exc:
            raise _fail(f"list rules in {self.label}", exc) from None
        for m in msgs:
            src = m.get_attr("FRA_SRC")
            table = m.get_attr("FRA_TABLE") or m["table"]
            yield (m.get_attr("FRA_PRIORITY") or 0, table,
                   f"{src}/{m['src_len']}" if src else None)

    def add_rule(self, src: str, table: int, priority: int) -> None:
        try:
            self.ipr.rule("add", family=AF_INET, src=src, src_len=32, table=table,
                          priority=priority)
        except NetlinkError as exc:
            if exc.code != errno.EEXIST:
                raise _fail(f"add rule from {src} lookup {table} in {self.label}", exc) from None

    def del_rule(self, src: str, table: int, priority: int) -> None:
        try:
            self.ipr.rule("del", family=AF_INET, src=src, src_len=32, table=table,
                          priority=priority)
        except NetlinkError as exc:
            if exc.code not in (errno.ENOENT, errno.ESRCH):
                raise _fail(f"delete rule from {src} lookup {table}", exc) from None


def _route(m: Any) -> Route:
    dst = m.get_attr("RTA_DST") or "0.0.0.0"
    return Route(
        dst=f"{dst}/{m['dst_len']}",
        gateway=m.get_attr("RTA_GATEWAY"),
        oif=m.get_attr("RTA_OIF"),
        table=m.get_attr("RTA_TABLE") or m["table"],
        onlink=bool(m["flags"] & RTNH_F_ONLINK),
        scope=m["scope"],
        proto=m["proto"],
        priority=m.get_attr("RTA_PRIORITY") or 0,
    )
