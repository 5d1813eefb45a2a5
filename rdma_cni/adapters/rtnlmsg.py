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


RTPROT_STATIC = 4
RTN_UNICAST = 1
RT_TABLE_COMPAT = 252


def header_table(table: int) -> int:
    """The header's 8-bit table field (the full number goes in the table attribute)."""
    return table if table < 256 else RT_TABLE_COMPAT


def route_request(route: Route, delete: bool = False) -> tuple[dict[str, Any], list[Any]]:
    """The header fields and attributes of an RTM_NEWROUTE (or RTM_DELROUTE: matched by
    destination, table and gateway) for ``route``, as pyroute2 encodes them."""
    dst, _, plen = route.dst.partition("/")
    prefixlen = int(plen or 32)
    attrs: list[Any] = [("RTA_DST", dst)] if prefixlen else []
    attrs.append(("RTA_TABLE", route.table))
    if route.oif and not delete:
        attrs.append(("RTA_OIF", route.oif))
    if route.gateway:
        attrs.append(("RTA_GATEWAY", route.gateway))
    fields = {"family": 2, "dst_len": prefixlen, "table": header_table(route.table)}
    if not delete:
        if route.priority:
            attrs.append(("RTA_PRIORITY", route.priority))
        fields.update(proto=route.proto or RTPROT_STATIC, scope=route.scope, type=RTN_UNICAST,
                      flags=RTNH_F_ONLINK if route.onlink else 0)
    return fields, attrs
