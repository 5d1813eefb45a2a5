"""Decoding of rtnetlink messages (as pyroute2 parses them) into the port's plain
values, and the reverse for a route. Imports nothing of pyroute2."""

from __future__ import annotations

from typing import Any

from rdma_cni.datapath.port import Link, LinkStats, Route

RTNH_F_ONLINK = 4


def link_of(msg: Any) -> Link:
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


def stats_of(msg: Any) -> LinkStats | None:
    st = msg.get_attr("IFLA_STATS64") or msg.get_attr("IFLA_STATS")
    if st is None:
        return None
    return LinkStats(int(st["rx_bytes"]), int(st["tx_bytes"]),
                     int(st["rx_packets"]), int(st["tx_packets"]))


def route_of(m: Any) -> Route:
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


def route_spec(route: Route) -> dict[str, Any]:
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
    return spec
