"""The JSON form of one pod interface as ADD planned it and the state record saves it
(:class:`rdma_cni.vocab.plan.IfacePlan`). Stdlib only (DEL loads it; no planner, no
pydantic): :mod:`rdma_cni.datapath.plan` builds plans, :mod:`rdma_cni.store.state`
keeps them.

A record holds what teardown needs, not every route of the node: a sub-interface
(shared modes) is undone by deleting the link and its rules, so its NIC's
mirrored fabric routes are not saved at all (a NIC with BGP-learned routes would
make the record grow with them); an exclusive NIC keeps its host configuration
(DEL puts it back): every address of every family in the kernel's order with its
flags and lifetimes (``host_addrs``), every route through it in every table
(``host_routes``; ``routes`` is derived from them on load), its IPv6 address
generation mode and its own settings (``host_link``: link flags, queue length, alias,
IPv4 and IPv6 settings; absent in earlier releases' records, which restore none).
Records written with both lists (releases up to 0.1.0), or with IPv4 addresses only
(``host_addrs`` absent: ``addresses`` are restored), still load. Keys this release
does not know (a newer release wrote them) are kept in :attr:`IfacePlan.extra` and
written back."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface
from typing import Any

from rdma_cni.records import fields, replace
from rdma_cni.vocab.kinds import LinkKind
from rdma_cni.vocab.netlink import RT_TABLE_MAIN
from rdma_cni.vocab.plan import HostAddr, HostRoute, IfacePlan

#: the saved fields, in declaration order
_SAVED = tuple(f for f in fields(IfacePlan) if f != "extra")
_FIELDS = frozenset(_SAVED)


def plan_to_dict(p: IfacePlan) -> dict[str, Any]:
    d = {name: getattr(p, name) for name in _SAVED}
    d["identity"] = dict(p.identity)
    d["requested_ip"] = str(p.requested_ip) if p.requested_ip else None
    d["addresses"] = [str(a) for a in p.addresses]
    d["gateway"] = str(p.gateway) if p.gateway else None
    del d["host_addrs"], d["inet6_mode"], d["host_link"]
    if p.kind != LinkKind.PHYSICAL:  # deleting the sub-interface takes its routes with it
        d["routes"], d["host_routes"] = [], []
    else:
        d["host_routes"] = [HostRoute(*r).saved() for r in p.host_routes]
        d["routes"] = [] if p.host_routes else [list(r) for r in p.routes]
        if p.host_addrs:
            d["host_addrs"] = [list(a) for a in p.host_addrs]
            d["inet6_mode"] = p.inet6_mode
        if p.host_link:
            d["host_link"] = p.host_link
    return {**p.extra, **d}


#: the most host routes a NIC claim keeps (:func:`claim_plan`)
CLAIM_ROUTES = 1024


def claim_plan(p: IfacePlan) -> dict[str, Any]:
    """``p`` as a NIC claim keeps it (:mod:`rdma_cni.store.nics`): its saved form, with
    no host routes when it has more than :data:`CLAIM_ROUTES` (``hostRoutesLeft``), so
    that a NIC with a routing table of its own never makes its claim a large record."""
    if len(p.host_routes) <= CLAIM_ROUTES:
        return plan_to_dict(p)
    return {**plan_to_dict(replace(p, host_routes=())), "hostRoutesLeft": True}


def mirrored(host_routes: tuple[HostRoute, ...]) -> tuple[tuple[str, str | None], ...]:
    """(dst, gateway) of the IPv4 main-table routes: the ones a pod mirrors (DESIGN §2)."""
    return tuple((r.dst, r.gateway) for r in host_routes
                 if r.table == RT_TABLE_MAIN and ":" not in r.dst)


def _routes_of(d: dict[str, Any], host_routes: tuple[HostRoute, ...]
               ) -> tuple[tuple[str, Any], ...]:
    saved = d.get("routes") or []
    if not saved and host_routes:
        return mirrored(host_routes)
    return tuple((str(r[0]), r[1]) for r in saved)


def _host_route(r: list[Any]) -> HostRoute:
    return HostRoute(str(r[0]), r[1], int(r[2]), int(r[3]), bool(r[4]),
                     int(r[5]) if len(r) > 5 else RT_TABLE_MAIN, r[6] if len(r) > 6 else None)


def _host_addr(a: list[Any]) -> HostAddr:
    def until(v: Any) -> float | None:
        return None if v is None else float(v)

    return HostAddr(str(a[0]), int(a[1]), until(a[2]), until(a[3]), a[4], a[5])


def _host_link(saved: Any) -> dict[str, Any]:
    """The NIC's saved settings, checked for their types (absent: none)."""
    if not saved:
        return {}
    alias = saved.get("alias")
    return {"flags": int(saved["flags"]), "txqlen": int(saved["txqlen"]),
            "alias": str(alias) if alias is not None else None,
            **{f: {str(k): int(v) for k, v in saved[f].items()} for f in ("ipv4", "ipv6")}}


def plan_from_dict(d: dict[str, Any]) -> IfacePlan:
    """Raises KeyError, ValueError, TypeError, IndexError or AttributeError on an
    entry teardown cannot use."""
    host_routes = tuple(_host_route(r) for r in d.get("host_routes") or [])
    mode = d.get("inet6_mode")
    return IfacePlan(
        k=int(d["k"]), name=str(d["name"]), tmp=str(d["tmp"]), nic=str(d["nic"]),
        kind=str(d["kind"]), mtu=int(d["mtu"]), table=int(d["table"]), mac=d.get("mac"),
        requested_ip=IPv4Address(d["requested_ip"]) if d.get("requested_ip") else None,
        addresses=tuple(IPv4Interface(a) for a in d.get("addresses", [])),
        gateway=IPv4Address(d["gateway"]) if d.get("gateway") else None,
        routes=_routes_of(d, host_routes),
        ibdev=d.get("ibdev"), identity=dict(d.get("identity") or {}),
        host_mtu=int(d.get("host_mtu") or 0), host_up=bool(d.get("host_up", True)),
        rdma_move=bool(d.get("rdma_move", False)),
        host_routes=host_routes,
        host_addrs=tuple(_host_addr(a) for a in d.get("host_addrs") or []),
        inet6_mode=int(mode) if mode is not None else None,
        host_link=_host_link(d.get("host_link")),
        extra={k: v for k, v in d.items() if k not in _FIELDS},
    )
