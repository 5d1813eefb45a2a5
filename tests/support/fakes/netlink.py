"""An in-memory kernel behind the netlink port (rdma_cni.vocab.ports.NetlinkPort):
links per netns, IPv4 addresses, routes and rules, with the kernel's errors for the
cases the plugin handles. Held to the real adapter's behaviour by
tests/integration/test_netlink_contract.py, which runs the same operations on both.

Modelled: EEXIST (name taken, in the target netns too), ENODEV (no such link),
EINVAL (sub-link MTU above its parent's),
ENETDOWN (route through a link that is down), ENETUNREACH (gateway outside every
connected subnet, not onlink); a move to another netns sets the link down and drops
its addresses and routes; setting a link down flushes its routes; deleting a link
deletes its sub-links; the main table shows the connected route of every address on
a link that is up (proto kernel); a rename of a link that is up is allowed (6.x); a
route lookup (``route_match``) follows the default rules: an address's local route,
then the main table.
"""

from __future__ import annotations

import errno
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Interface, ip_address, ip_network
from typing import Any

from rdma_cni.adapters.netns import NetnsGone
from rdma_cni.records import replace
from rdma_cni.vocab.netlink import (
    RT_TABLE_LOCAL,
    RT_TABLE_MAIN,
    RTN_LOCAL,
    SCOPE_LINK,
    Link,
    LinkStats,
    Route,
    Rule,
    failure,
    not_found,
)
from rdma_cni.vocab.ports import NetlinkPort

RTPROT_KERNEL = 2
SCOPE_HOST = 254
DEFAULT_RULES: tuple[Rule, ...] = ((0, 255, None), (32766, 254, None), (32767, 253, None))


@dataclass
class FakeNetns:
    fd: int
    label: str
    links: dict[int, Link] = field(default_factory=dict)
    parents: dict[int, int] = field(default_factory=dict)  # sub-link index -> parent index
    addrs: list[tuple[int, IPv4Interface]] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=lambda: list(DEFAULT_RULES))
    #: a rule was ever added: IPv4's local table has a trie of its own from then on
    unmerged: bool = False

    def by_name(self, name: str) -> Link | None:
        """The link of that name or alternative name (the kernel looks up both)."""
        return next((lk for lk in self.links.values()
                     if lk.name == name or name in lk.altnames), None)


class FakeKernel:
    """Every netns of the fake node; also the datapath's NetnsOps (opening a pod netns by
    its path, ports into each netns, private netns); ``sysctls``: the IPv4 settings
    its ports set."""

    def __init__(self) -> None:
        self._fds = itertools.count(1000)
        self._indexes = itertools.count(2)
        self._macs = itertools.count(0x10)
        self.spaces: dict[int, FakeNetns] = {}
        self.sysctls: dict[tuple[int, str, str], int] = {}  # (netns fd, link, key): value
        self.released: list[int] = []
        self.paths: dict[str, int] = {}
        self.hardware: set[int] = set()  # indexes of physical NICs (they outlive a netns)
        self.host = self.netns("the host")

    def netns(self, label: str, path: str | None = None) -> FakeNetns:
        """A new netns, with its loopback (down, as the kernel makes it)."""
        ns = FakeNetns(next(self._fds), label)
        if path is not None:
            self.paths[path] = ns.fd
        lo = Link(index=1, name="lo", mtu=65536, mac="00:00:00:00:00:00", kind=None, up=False)
        ns.links[1] = lo
        self.spaces[ns.fd] = ns
        return ns

    def port(self, ns: FakeNetns, label: str | None = None) -> FakeNetlink:
        return FakeNetlink(self, ns, label or ns.label)

    def new_index(self) -> int:
        return next(self._indexes)

    def new_mac(self) -> str:
        return f"02:fa:00:00:00:{next(self._macs) % 256:02x}"

    def add_nic(self, ns: FakeNetns, name: str, mtu: int = 1500, up: bool = True,
                virtual: bool = False, **kw: str | None) -> Link:
        """A physical NIC (shown as a veth, its stand-in in the real tests) or, with
        ``virtual``, a veth; ``kw``: mac, perm_mac, parent_dev, parent_bus."""
        link = Link(index=self.new_index(), name=name, mtu=mtu,
                    mac=kw.pop("mac", None) or self.new_mac(), kind="veth", up=up, **kw)
        ns.links[link.index] = link
        if not virtual:
            self.hardware.add(link.index)
        return link

    def remove_netns(self, fd: int) -> None:
        """The pod netns dies: its virtual links with it; physical NICs return to the host,
        down and unconfigured, under their name (``dev<index>`` if the host has it)."""
        ns = self.spaces.pop(fd)
        self.paths = {p: f for p, f in self.paths.items() if f != fd}
        for index, link in ns.links.items():
            if index in self.hardware:
                name = link.name if self.host.by_name(link.name) is None else f"dev{index}"
                self.host.links[index] = replace(link, name=name, up=False)

    # NetnsOps
    def host_fd(self) -> int:
        return self.host.fd

    def open(self, path: str, given_fd: int | None) -> int:
        if given_fd is not None:
            return given_fd
        if path not in self.paths:
            raise NetnsGone(path)
        return self.paths[path]

    def same(self, fd_a: int, fd_b: int) -> bool:
        return fd_a == fd_b

    def here(self, label: str) -> FakeNetlink:
        return self.port(self.host, label)

    def inside(self, fd: int, home: int, label: str) -> FakeNetlink:
        return self.port(self.spaces[fd], label)

    def private(self, host_fd: int) -> tuple[int, FakeNetlink]:
        ns = self.netns("a private netns")
        return ns.fd, self.port(ns)

    def release(self, fd: int) -> None:
        self.released.append(fd)


class FakeNetlink(NetlinkPort):
    """The port into one FakeNetns."""

    def __init__(self, kernel: FakeKernel, ns: FakeNetns, label: str) -> None:
        self.kernel, self.ns, self.label = kernel, ns, label
        self.closed = False

    def close(self) -> None:
        self.closed = True

    # links: reads
    def links(self) -> list[Link]:
        return sorted(map(self._shown, self.ns.links.values()), key=lambda lk: lk.index)

    def link(self, name: str) -> Link | None:
        link = self.ns.by_name(name)
        return None if link is None else self._shown(link)

    def _shown(self, link: Link) -> Link:
        """A sub-link as the kernel shows it: its lower device (IFLA_LINK), in the
        host's netns (the id this netns gives it: :meth:`netnsid`; None: its own)."""
        parent = self.ns.parents.get(link.index)
        if parent is None:
            return link
        return replace(link, iflink=parent, link_netnsid=self.netnsid(self.kernel.host.fd))

    def netnsid(self, fd: int) -> int | None:
        """The id this netns gives the netns ``fd``: here its fd (None: its own)."""
        return None if fd == self.ns.fd or fd not in self.kernel.spaces else fd

    def link_stats(self, names: Iterable[str]) -> dict[str, LinkStats]:
        wanted = set(names)
        return {lk.name: LinkStats(0, 0, 0, 0) for lk in self.links() if lk.name in wanted}

    # links: changes
    def create_sublink(self, kind: str, name: str, parent: Link, target_fd: int,
                       mtu: int, mac: str | None) -> None:
        action = f"create {kind} {name} on {parent.name}"
        target = self.kernel.spaces.get(target_fd)
        lower = self.ns.links.get(parent.index)
        if lower is None:
            raise failure(action, errno.ENODEV)
        if target is None:
            raise failure(action, errno.EBADF)
        if target.by_name(name) is not None:
            raise failure(action, errno.EEXIST)
        if mtu > lower.mtu:
            raise failure(action, errno.EINVAL)
        link = Link(index=self.kernel.new_index(), name=name, mtu=mtu,
                    mac=(mac if kind == "macvlan" and mac else None) or
                    (self.kernel.new_mac() if kind == "macvlan" else lower.mac),
                    kind=kind, up=False)
        target.links[link.index] = link
        target.parents[link.index] = lower.index

    def _get(self, name: str, action: str) -> Link:
        link = self.link(name)
        if link is None:
            raise not_found(action, name, self.label)
        return link

    def _drop_config(self, index: int) -> None:
        self.ns.addrs = [(i, a) for i, a in self.ns.addrs if i != index]
        self.ns.routes = [r for r in self.ns.routes if r.oif != index]

    def move_to_netns(self, name: str, target_fd: int, action: str) -> None:
        link = self._get(name, action)
        target = self.kernel.spaces.get(target_fd)
        if target is None:
            raise failure(action, errno.EBADF)
        if target is self.ns:
            return
        if target.by_name(name) is not None:
            raise failure(action, errno.EEXIST)
        self._drop_config(link.index)
        del self.ns.links[link.index]
        target.links[link.index] = replace(link, up=False)
        if link.index in self.ns.parents:
            target.parents[link.index] = self.ns.parents.pop(link.index)

    def rename(self, name: str, new: str, alias: str, action: str) -> None:
        link = self._get(name, action)
        if new != name and self.link(new) is not None:
            raise failure(action, errno.EEXIST)
        self.ns.links[link.index] = replace(link, name=new, alias=alias or None)

    def set_up(self, name: str, action: str, mtu: int | None = None) -> None:
        link = self._get(name, action)
        self.ns.links[link.index] = replace(link, up=True, mtu=mtu or link.mtu)

    def set_down(self, name: str, action: str) -> None:
        link = self._get(name, action)
        self.ns.links[link.index] = replace(link, up=False)
        self.ns.routes = [r for r in self.ns.routes if r.oif != link.index]  # flushed

    def set_mtu(self, name: str, mtu: int, action: str) -> None:
        link = self._get(name, action)
        self.ns.links[link.index] = replace(link, mtu=mtu)

    def set_alias(self, name: str, alias: str, action: str) -> None:
        link = self._get(name, action)
        self.ns.links[link.index] = replace(link, alias=alias or None)

    def set_mac(self, name: str, mac: str, action: str) -> None:
        link = self._get(name, action)
        self.ns.links[link.index] = replace(link, mac=mac)

    def add_altname(self, name: str, altname: str, action: str) -> None:
        link = self._get(name, action)
        if self.link(altname) is not None:
            raise failure(action, errno.EEXIST)
        self.ns.links[link.index] = replace(link, altnames=(*link.altnames, altname))

    def del_altname(self, name: str, altname: str, action: str) -> None:
        link = self._get(name, action)
        self.ns.links[link.index] = replace(
            link, altnames=tuple(a for a in link.altnames if a != altname))

    def set_ipv4_conf(self, name: str, values: Sequence[tuple[str, int]], action: str) -> None:
        self._get(name, action)
        for key, value in values:
            self.kernel.sysctls[(self.ns.fd, name, key)] = value

    def delete_link_at(self, index: int) -> bool:
        link = self.ns.links.get(index)
        return link is not None and self.delete_link(link.name)

    def delete_link(self, name: str) -> bool:
        link = self.link(name)
        if link is None:
            return False
        self._drop_config(link.index)
        del self.ns.links[link.index]
        self.ns.parents.pop(link.index, None)
        for ns in self.kernel.spaces.values():  # its sub-links, wherever they are
            for child in [i for i, p in ns.parents.items() if p == link.index]:
                FakeNetlink(self.kernel, ns, ns.label).delete_link(ns.links[child].name)
        return True

    # addresses
    def addresses(self, index: int | None = None) -> list[tuple[int, IPv4Interface]]:
        return [(i, a) for i, a in self.ns.addrs if index is None or i == index]

    def add_address(self, name: str, iface: IPv4Interface) -> None:
        link = self.require(name)
        if (link.index, iface) not in self.ns.addrs:
            self.ns.addrs.append((link.index, iface))

    def del_address(self, name: str, iface: IPv4Interface) -> None:
        link = self.require(name)
        if (link.index, iface) in self.ns.addrs:
            self.ns.addrs.remove((link.index, iface))

    # routes and rules
    def _connected(self) -> list[Route]:
        return [Route(dst=str(a.network), gateway=None, oif=i, table=RT_TABLE_MAIN,
                      scope=SCOPE_LINK, proto=RTPROT_KERNEL)
                for i, a in self.ns.addrs if self.ns.links[i].up]

    def routes(self, table: int = RT_TABLE_MAIN, oif: int | None = None) -> list[Route]:
        every = (self._connected() if table == RT_TABLE_MAIN else []) + self.ns.routes
        return [r for r in every if r.table == table and (oif is None or r.oif == oif)]

    def routes_through(self, oif: int) -> list[Route]:
        every = self._connected() + self.ns.routes
        return [r for r in every if oif in r.devices and r.table != RT_TABLE_LOCAL]

    def route_match(self, dst: str) -> Route | None:
        """The kernel's lookup under the default rules (local, then main): an address's
        local route (the link holding it; in the table IPv4 names for it: main until a
        rule is added, the two tables sharing one trie), else main's longest prefix
        covering ``dst``, of the lowest metric, the first added of equals; None when
        nothing covers it."""
        ip = ip_address(dst)
        local = RT_TABLE_LOCAL if self.ns.unmerged else RT_TABLE_MAIN
        for i, a in self.ns.addrs:
            if a.ip == ip:
                return Route(dst=f"{ip}/32", gateway=None, oif=i, table=local,
                             scope=SCOPE_HOST, proto=RTPROT_KERNEL, prefsrc=str(ip),
                             type=RTN_LOCAL)
        covering = [r for r in self.routes() if ip in ip_network(r.dst)]
        if not covering:
            return None
        return min(covering, key=lambda r: (-ip_network(r.dst).prefixlen, r.priority))

    def add_route(self, route: Route) -> None:
        action = f"add route {route.dst} to table {route.table} in {self.label}"
        link = self.ns.links.get(route.oif or 0)
        if link is None:
            raise failure(action, errno.ENODEV)
        if not link.up:
            raise failure(action, errno.ENETDOWN)
        if route.gateway and not route.onlink and not any(
                IPv4Address(route.gateway) in a.network for i, a in self.ns.addrs
                if i == link.index):
            raise failure(action, errno.ENETUNREACH)
        if any((r.dst, r.table, r.priority) == (route.dst, route.table, route.priority)
               for r in self.ns.routes):
            return  # EEXIST: already so
        self.ns.routes.append(route)

    def del_route(self, route: Route) -> None:
        self.ns.routes = [r for r in self.ns.routes if not (
            r.dst == route.dst and r.table == route.table and
            (route.gateway is None or r.gateway == route.gateway))]

    def rules(self) -> list[Rule]:
        return sorted(self.ns.rules, key=lambda r: r[0])

    def add_rule(self, src: str, table: int, priority: int) -> None:
        rule = (priority, table, f"{src}/32")
        self.ns.unmerged = True
        if rule not in self.ns.rules:
            self.ns.rules.append(rule)

    def del_rule(self, src: str, table: int, priority: int) -> None:
        rule = (priority, table, f"{src}/32")
        if rule in self.ns.rules:
            self.ns.rules.remove(rule)


def observe(nl: NetlinkPort, tables: Sequence[int] = (RT_TABLE_MAIN,), priority: int | None = None
            ) -> dict[str, list[Any]]:
    """What a netns shows through any port (the fake or the kernel), comparable: links
    but lo (name, kind, MTU, up, alias), addresses, routes of ``tables``, rules (at
    ``priority`` if given)."""
    links = {lk.index: lk for lk in nl.links() if lk.name != "lo"}
    return {
        "links": sorted((lk.name, lk.kind, lk.mtu, lk.up, lk.alias) for lk in links.values()),
        "addrs": sorted((links[i].name, str(a)) for i, a in nl.addresses() if i in links),
        "routes": sorted((r.table, r.dst, r.gateway, links[r.oif].name, r.scope, r.onlink)
                         for table in tables for r in nl.routes(table)
                         if r.oif in links and not r.dst.startswith("fe80")),
        "rules": sorted(r for r in nl.rules() if priority is None or r[0] == priority),
    }
