"""One pod interface as ADD planned it and the state record saves it: the typed
:class:`IfacePlan` and its JSON form. Stdlib only (DEL loads it; no planner, no
pydantic): :mod:`rdma_cni.datapath.plan` builds these, :mod:`rdma_cni.store.state`
keeps them.

A record holds what teardown needs, not every route of the node: a sub-interface
(shared modes) is undone by deleting the link and its rules, so its NIC's
mirrored fabric routes are not saved at all (a NIC with BGP-learned routes would
make the record grow with them); an exclusive NIC keeps its host routes (DEL puts
them back), once (``routes`` is derived from them on load). Records written with
both lists (releases up to 0.1.0) still load. Keys this release does not know (a
newer release wrote them) are kept in :attr:`IfacePlan.extra` and written back."""

from __future__ import annotations

from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Interface
from typing import Any

#: (dst CIDR, gateway, protocol, metric, onlink): a host route to restore exactly
HostRoute = tuple[str, str | None, int, int, bool]
PHYSICAL = "physical"


@dataclass(frozen=True)
class IfacePlan:
    k: int
    name: str
    tmp: str
    nic: str
    kind: str
    mtu: int
    table: int
    mac: str | None = None
    requested_ip: IPv4Address | None = None
    addresses: tuple[IPv4Interface, ...] = ()
    gateway: IPv4Address | None = None
    routes: tuple[tuple[str, str | None], ...] = ()
    ibdev: str | None = None
    identity: dict[str, str | None] = field(default_factory=dict)
    host_mtu: int = 0
    host_up: bool = True
    host_routes: tuple[HostRoute, ...] = ()
    rdma_move: bool = False  # exclusive NIC under RDMA netns mode "exclusive"
    #: keys of the saved entry this release does not know, written back unchanged
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def address(self) -> IPv4Interface | None:
        return self.addresses[0] if self.addresses else None


#: the saved fields, in declaration order
_SAVED = tuple(f for f in IfacePlan.__dataclass_fields__ if f != "extra")
_FIELDS = frozenset(_SAVED)


def plan_to_dict(p: IfacePlan) -> dict[str, Any]:
    d = {name: getattr(p, name) for name in _SAVED}
    d["identity"] = dict(p.identity)
    d["requested_ip"] = str(p.requested_ip) if p.requested_ip else None
    d["addresses"] = [str(a) for a in p.addresses]
    d["gateway"] = str(p.gateway) if p.gateway else None
    if p.kind != PHYSICAL:  # deleting the sub-interface takes its routes with it
        d["routes"], d["host_routes"] = [], []
    else:
        d["host_routes"] = [list(r) for r in p.host_routes]
        d["routes"] = [] if p.host_routes else [list(r) for r in p.routes]
    return {**p.extra, **d}


def _routes_of(d: dict[str, Any], host_routes: tuple[Any, ...]) -> tuple[tuple[str, Any], ...]:
    saved = d.get("routes") or []
    if not saved and host_routes:
        return tuple((r[0], r[1]) for r in host_routes)
    return tuple((str(r[0]), r[1]) for r in saved)


def plan_from_dict(d: dict[str, Any]) -> IfacePlan:
    """Raises KeyError, ValueError, TypeError, IndexError or AttributeError on an
    entry teardown cannot use."""
    host_routes = tuple((str(r[0]), r[1], int(r[2]), int(r[3]), bool(r[4]))
                        for r in d.get("host_routes") or [])
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
        extra={k: v for k, v in d.items() if k not in _FIELDS},
    )
