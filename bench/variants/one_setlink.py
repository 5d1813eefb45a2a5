"""bench/ab.py variant: a sub-link's rename, marker, MTU, IPv4 settings and link up in one
RTM_SETLINK instead of three (the link then comes up before its address is added, and
the kernel applies the IPv4 settings after the link is up within that one request);
what two rtnetlink requests and their steps cost an ADD."""

from collections.abc import Sequence
from typing import Any

from rdma_cni.adapters.rtnl import RTM_SETLINK, ifinfmsg
from rdma_cni.adapters.rtnlmsg import ipv4_conf_attrs
from rdma_cni.cni.commands import add
from rdma_cni.datapath import execute, podconfig, sublinks
from rdma_cni.datapath.context import Ctx
from rdma_cni.datapath.plan import SYSCTLS
from rdma_cni.records import replace
from rdma_cni.vocab.kinds import LinkKind
from rdma_cni.vocab.netlink import IPV4_DEVCONF
from rdma_cni.vocab.plan import IfacePlan

_real = add.steps_for
IFF_UP = 1


def configure(ctx: Ctx, p: IfacePlan) -> None:
    pod = ctx.pod
    link = pod.require(p.tmp)
    attrs: list[tuple[str, Any]] = [("IFLA_IFNAME", p.name), ("IFLA_IFALIAS", ctx.marker)]
    if p.mtu:
        attrs.append(("IFLA_MTU", p.mtu))
    attrs += ipv4_conf_attrs([(IPV4_DEVCONF[k], v) for k, v in SYSCTLS])
    known = pod._known  # type: ignore[attr-defined]
    known.pop(p.tmp, None)
    pod._nl.request(ifinfmsg, RTM_SETLINK, 0, attrs,  # type: ignore[attr-defined]
                    index=link.index, flags=IFF_UP, change=IFF_UP)
    known[p.name] = replace(link, name=p.name, alias=ctx.marker, up=True,
                            mtu=p.mtu or link.mtu)


def steps_for(plans: Sequence[IfacePlan]) -> list[execute.Step]:
    if any(p.kind == LinkKind.PHYSICAL for p in plans):
        return _real(plans)
    out: list[execute.Step] = []
    for p in plans:
        out += [execute.Step("check name", p, sublinks.check_name),
                execute.Step("create", p, sublinks.create, sublinks.delete),
                execute.Step("configure", p, configure),
                execute.Step("addresses", p, podconfig.addresses),
                execute.Step("routes", p, podconfig.routes),
                execute.Step("rule", p, podconfig.rule, podconfig.unrule)]
    return out


def apply() -> None:
    add.steps_for = steps_for


def revert() -> None:
    add.steps_for = _real
