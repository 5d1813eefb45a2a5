"""Attachment state records: what ADD made, enough for DEL/CHECK/GC to work from
the saved state alone. Pure conversion between plans and JSON-able dicts.

A record holds what teardown needs, not every route of the node: a sub-interface
(shared modes) is undone by deleting the link and its rules, so its NIC's
mirrored fabric routes are not saved at all (a NIC with BGP-learned routes would
make the record grow with them); an exclusive NIC keeps its host routes (DEL puts
them back), once (``routes`` is derived from them on load). Records written with
both lists (releases up to 0.1.0) still load."""

from __future__ import annotations

from dataclasses import asdict
from ipaddress import IPv4Address, IPv4Interface
from typing import Any

from rdma_cni.datapath.plan import IfacePlan

SCHEMA = 1
PENDING = "pending"
READY = "ready"
CONF_NAME = "cniConfName"


def plan_to_dict(p: IfacePlan) -> dict[str, Any]:
    d = asdict(p)
    d["requested_ip"] = str(p.requested_ip) if p.requested_ip else None
    d["addresses"] = [str(a) for a in p.addresses]
    d["gateway"] = str(p.gateway) if p.gateway else None
    if p.kind != "physical":  # deleting the sub-interface takes its routes with it
        d["routes"], d["host_routes"] = [], []
    else:
        d["host_routes"] = [list(r) for r in p.host_routes]
        d["routes"] = [] if p.host_routes else [list(r) for r in p.routes]
    return d


def _routes_of(d: dict[str, Any], host_routes: tuple[Any, ...]) -> tuple[tuple[str, Any], ...]:
    saved = d.get("routes") or []
    if not saved and host_routes:
        return tuple((r[0], r[1]) for r in host_routes)
    return tuple((str(r[0]), r[1]) for r in saved)


def plan_from_dict(d: dict[str, Any]) -> IfacePlan:
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
    )


def make_state(status: str, mode: str, netns: str, pod: str, uid: str, priority: int,
               plans: list[IfacePlan], result: dict[str, Any] | None = None,
               origin: dict[str, Any] | None = None, *,
               conf_name: str = "") -> dict[str, Any]:
    """``origin`` (:func:`rdma_cni.node.origin.origin_of`): the node and netns identity;
    ``conf_name``: the entry's cniConfName (records of 0.1.0 have none; see
    :attr:`rdma_cni.cni.attachment.AttachmentKey.legacy`)."""
    state = {
        "schema": SCHEMA, "status": status, "mode": mode, "netns": netns, "pod": pod,
        "podUID": uid, "rulePriority": priority,
        "interfaces": [plan_to_dict(p) for p in plans], "result": result,
    }
    if origin:
        state["origin"] = origin
    if conf_name:
        state[CONF_NAME] = conf_name
    return state


def plans_of(state: dict[str, Any]) -> list[IfacePlan]:
    return [plan_from_dict(d) for d in state.get("interfaces") or []]
