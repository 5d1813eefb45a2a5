"""The pod side of an interface: sysctls, addresses, link up with its MTU, the routes
of its own table (and, for an exclusive NIC, its gateway routes in main), and the
source rule that selects that table."""

from __future__ import annotations

import errno
import logging
from ipaddress import IPv4Interface

from rdma_cni.datapath.context import Ctx
from rdma_cni.datapath.hostconfig import add_routes, put_addrs, route_of, set_mode
from rdma_cni.datapath.plan import SYSCTLS, pod_routes
from rdma_cni.vocab.kinds import LinkKind
from rdma_cni.vocab.netlink import RT_TABLE_MAIN, SCOPE_LINK, SCOPE_UNIVERSE, NetlinkFailure, Route
from rdma_cni.vocab.plan import HostRoute, IfacePlan

log = logging.getLogger("rdma_cni")


def sysctls(ctx: Ctx, p: IfacePlan) -> None:
    settings = " ".join(f"{key}={value}" for key, value in SYSCTLS)
    ctx.pod.set_ipv4_conf(p.name, SYSCTLS, f"set {settings} on {p.name} in {ctx.pod_path}")


def addresses(ctx: Ctx, p: IfacePlan) -> None:
    if p.host_addrs:  # an exclusive NIC: its own addresses, as the host had them (IPv6
        set_mode(ctx.pod, p.name, p.inet6_mode)  # ones once it is up)
        put_addrs(ctx.pod, p.name, p.host_addrs, family=4)
        return
    for addr in p.addresses:
        ctx.pod.add_address(p.name, IPv4Interface(addr))


def up(ctx: Ctx, p: IfacePlan) -> None:
    ctx.pod.set_up(p.name, f"bring {p.name} up in {ctx.pod_path}", mtu=p.mtu)
    if p.host_addrs:
        put_addrs(ctx.pod, p.name, p.host_addrs, family=6)


def routes(ctx: Ctx, p: IfacePlan) -> None:
    link = ctx.pod.require(p.name)
    for dst, gw, onlink in pod_routes(p):
        scope = SCOPE_LINK if gw is None else SCOPE_UNIVERSE  # the connected route: link
        ctx.pod.add_route(Route(dst=dst, gateway=gw, oif=link.index, table=p.table,
                                onlink=onlink, scope=scope))
        if p.kind == LinkKind.PHYSICAL and gw is not None:
            ctx.pod.add_route(Route(dst=dst, gateway=gw, oif=link.index,
                                    table=RT_TABLE_MAIN, onlink=True))
    if p.kind == LinkKind.PHYSICAL:  # its IPv6 routes of the host's main table, but a default
        v6 = [route_of(HostRoute(*r), link.index, RT_TABLE_MAIN) for r in p.host_routes
              if _mirrored6(HostRoute(*r))]
        try:
            add_routes(ctx.pod, p.name, v6)
        except NetlinkFailure as exc:
            if exc.errno not in NO_IPV6 or any(a.version == 6 for a in ctx.pod.addrs(
                    link.index)):
                raise
            log.warning("%s in %s: IPv6 is disabled there: its IPv6 routes not added (%s)",
                        p.name, ctx.pod_path, exc.msg)


#: what adding an IPv6 route through a link with IPv6 disabled gets
NO_IPV6 = (errno.EACCES, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EAFNOSUPPORT)


def _mirrored6(r: HostRoute) -> bool:
    return ":" in r.dst and r.table == RT_TABLE_MAIN and r.dst != "::/0"


def rule(ctx: Ctx, p: IfacePlan) -> None:
    if p.address is not None:
        ctx.pod.add_rule(str(p.address.ip), p.table, ctx.priority)


def unrule(ctx: Ctx, p: IfacePlan) -> None:
    if p.address is not None:
        ctx.pod.del_rule(str(p.address.ip), p.table, ctx.priority)
