"""Read what the host shows of its RDMA NICs into plain facts for the planner.

An exclusive NIC leaves the host whole (``whole=True``): its own configuration is read
in full so that the pod gets it and DEL gives it back as it was: every address of
every family in the kernel's order (the primary IPv4 address of a subnet before its
secondaries) with flags, label, broadcast and the end of its lifetimes, every route
through it in every table, its IPv6 address generation mode, and its own settings: the
link flags a user sets (NOARP, MULTICAST, PROMISC, ALLMULTI), its queue length, its
alias and its IPv4 and IPv6 settings (``/proc/sys/net/ipv{4,6}/conf/<nic>``, which the
kernel makes again from the ``default`` of every netns the NIC enters). What the kernel
makes by itself is left to the kernel: connected and prefix routes, routes learned
from router advertisements or redirects, SLAAC and temporary addresses, and the IPv6
link-local address it generates (it is made again from the restored mode).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv4Interface, ip_interface

from rdma_cni.errors import NicUnavailable
from rdma_cni.records import replace
from rdma_cni.vocab.netlink import FOREVER, RT_TABLE_MAIN, Addr, Link, Route
from rdma_cni.vocab.nic import Nic
from rdma_cni.vocab.plan import HostAddr, HostRoute, NicFacts
from rdma_cni.vocab.ports import NetlinkPort

RTPROT_REDIRECT, RTPROT_KERNEL, RTPROT_RA = 1, 2, 9
IFA_F_TEMPORARY = 0x01  # IPv6 (the same bit is IFA_F_SECONDARY in IPv4)
IFA_PROTO_KERNEL = (1, 2, 3)  # loopback, router advertisement (SLAAC), link-local
IN6_ADDR_GEN_MODE_NONE = 1


def nic_facts(nl: NetlinkPort, names: Iterable[str], rdma: dict[str, Nic], *,
              whole: bool = False, present_only: bool = False
              ) -> tuple[dict[str, NicFacts], set[IPv4Address]]:
    """The planner's facts of each named NIC, and every IPv4 address of the host (one
    address dump serves both); ``whole``: with the NIC's own configuration in full. A
    NIC not found is NicUnavailable, or (``present_only``) left out."""
    # one RTM_GETLINK per NIC: a dump would decode every link of the node (pod veths too)
    found = {n: nl.link(n) for n in dict.fromkeys(names)}
    links = {n: link for n, link in found.items() if link is not None}
    missing = [n for n in found if n not in links]
    if missing and not present_only:
        raise NicUnavailable(f"RDMA NIC {', '.join(missing)} not found on the host")
    wanted = list(links)
    addrs = nl.addresses()
    out = {}
    for name in wanted:
        link = links[name]
        own = tuple(sorted((a for i, a in addrs if i == link.index), key=lambda a: a.ip))
        # the routes through the NIC, of every table (the kernel filters the dump): the
        # main table's, but not the connected ones the kernel makes from its addresses,
        # are the NIC's own; every gateway of any is kept out of the pool
        every = nl.routes_through(link.index)
        through = [r for r in every if r.table == RT_TABLE_MAIN and r.oif == link.index
                   and _configured(r)]
        facts = _facts(link, own, through, rdma.get(name), _gateways(every, link.index))
        out[name] = _whole(nl, facts, link) if whole else facts
    return out, {a.ip for _, a in addrs}


def _gateways(routes: Sequence[Route], oif: int) -> tuple[IPv4Address, ...]:
    """Every IPv4 gateway reached through link ``oif`` (a second router on the fabric, a
    rail's default route in a table of its own, a multipath route's nexthop): a pod given
    one would hold a router's address, and a route through its own address fails."""
    found = dict.fromkeys(g for r in routes for g in r.gateways_via(oif) if ":" not in g)
    return tuple(IPv4Address(g) for g in found)


def _configured(r: Route) -> bool:
    """A route someone configured (not one the kernel made or learned)."""
    if r.proto in (RTPROT_REDIRECT, RTPROT_RA):
        return False
    return r.gateway is not None or r.proto != RTPROT_KERNEL


def _facts(link: Link, addresses: tuple[IPv4Interface, ...], via: Sequence[Route],
           nic: Nic | None, gateways: tuple[IPv4Address, ...] = ()) -> NicFacts:
    gws = [r for r in via if r.gateway]
    default = [r.gateway for r in gws if r.dst == "0.0.0.0/0"]
    gateway = default[0] if default else (gws[0].gateway if gws else None)
    return NicFacts(
        name=link.name, index=link.index, mtu=link.mtu, mac=link.mac, up=link.up,
        addresses=addresses, gateway=IPv4Address(gateway) if gateway else None,
        routes=tuple((r.dst, r.gateway) for r in via),
        host_routes=tuple(host_route(r) for r in via),
        pci=link.parent_dev if link.parent_bus == "pci" else (nic.pci if nic else None),
        parent_dev=link.parent_dev, parent_bus=link.parent_bus, kind=link.kind,
        perm_mac=link.perm_mac, ibdev=nic.ibdev if nic else None,
        iflink=link.iflink, link_netnsid=link.link_netnsid, gateways=gateways,
        altnames=link.altnames,
    )


def host_route(r: Route) -> HostRoute:
    return HostRoute(r.dst, r.gateway, r.proto, r.priority, r.onlink, r.table, r.prefsrc)


def _whole(nl: NetlinkPort, facts: NicFacts, link: Link) -> NicFacts:
    """``facts`` with the NIC's own configuration of every family (see the module doc)."""
    conf = nl.link_conf(link.name)
    mode = conf.inet6_mode if conf is not None else None
    mine = configured_addrs(nl.addrs(link.index), mode)
    v4 = tuple(IPv4Interface(a.cidr) for a in mine if a.version == 4)
    now = time.clock_gettime(time.CLOCK_BOOTTIME)
    routes = tuple(host_route(r) for r in nl.routes_via(link.index) if _configured(r))
    return replace(facts, addresses=v4, host_addrs=tuple(host_addr(a, now) for a in mine),
                   host_routes=routes, inet6_mode=mode,
                   host_link=conf.saved() if conf is not None else {})


def configured_addrs(addrs: Sequence[Addr], mode: int | None) -> list[Addr]:
    """The addresses someone configured, in the kernel's order (see the module doc). An
    IPv6 link-local address is the kernel's when the kernel says so (IFA_PROTO); a
    kernel that says nothing of any address (before 6.3) made it unless the NIC's mode
    generates none."""
    says = any(a.proto is not None for a in addrs)
    return [a for a in addrs if not _kernels(a, says, mode)]


def _kernels(a: Addr, says: bool, mode: int | None) -> bool:
    if a.proto in IFA_PROTO_KERNEL:
        return True
    if a.version == 4:
        return False
    if a.flags & IFA_F_TEMPORARY:
        return True
    link_local = ip_interface(a.cidr).ip.is_link_local
    return link_local and not says and mode != IN6_ADDR_GEN_MODE_NONE


def host_addr(a: Addr, now: float) -> HostAddr:
    """``a`` with its lifetimes as the (CLOCK_BOOTTIME) times they end."""
    def until(left: int) -> float | None:
        return None if left == FOREVER else round(now + left, 3)

    return HostAddr(a.cidr, a.flags, until(a.valid), until(a.preferred), a.label, a.broadcast)
