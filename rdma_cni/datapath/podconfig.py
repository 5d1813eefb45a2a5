"""The pod side of an interface: sysctls, addresses, link up with its MTU, the routes
of its own table (and, for an exclusive NIC, its gateway routes in main), and the
source rule that selects that table."""

from __future__ import annotations

from ipaddress import IPv4Interface

from rdma_cni.datapath.context import Ctx
from rdma_cni.datapath.plan import SYSCTLS, IfacePlan, pod_routes
from rdma_cni.datapath.port import RT_TABLE_MAIN, SCOPE_LINK, SCOPE_UNIVERSE, Route


def sysctls(ctx: Ctx, p: IfacePlan) -> None:
    ctx.ops.write_sysctls(ctx.pod_fd, ctx.host_fd, p.name, SYSCTLS)


def addresses(ctx: Ctx, p: IfacePlan) -> None:
    for addr in p.addresses:
        ctx.pod.add_address(p.name, IPv4Interface(addr))


def up(ctx: Ctx, p: IfacePlan) -> None:
    ctx.pod.set_up(p.name, f"bring {p.name} up in {ctx.pod_path}", mtu=p.mtu)


def routes(ctx: Ctx, p: IfacePlan) -> None:
    link = ctx.pod.require(p.name)
    for dst, gw, onlink in pod_routes(p):
        scope = SCOPE_LINK if gw is None else SCOPE_UNIVERSE  # the connected route: link
        ctx.pod.add_route(Route(dst=dst, gateway=gw, oif=link.index, table=p.table,
                                onlink=onlink, scope=scope))
        if p.kind == "physical" and gw is not None:
            ctx.pod.add_route(Route(dst=dst, gateway=gw, oif=link.index,
                                    table=RT_TABLE_MAIN, onlink=True))


def rule(ctx: Ctx, p: IfacePlan) -> None:
    if p.address is not None:
        ctx.pod.add_rule(str(p.address.ip), p.table, ctx.priority)


def unrule(ctx: Ctx, p: IfacePlan) -> None:
    if p.address is not None:
        ctx.pod.del_rule(str(p.address.ip), p.table, ctx.priority)
