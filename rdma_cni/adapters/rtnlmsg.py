"""Reading rtnetlink answers (:class:`rdma_cni.adapters.rtnlcodec.Answer`: fixed fields
by name, attributes by ``attr``, values as pyroute2 gives them) into the port's plain
values, and the reverse for a route. Imports nothing of pyroute2."""

from __future__ import annotations

from typing import Any

from rdma_cni.datapath.port import Link, LinkStats, Route

RTNH_F_ONLINK = 4
RTPROT_STATIC = 4
RTN_UNICAST = 1
RT_TABLE_COMPAT = 252
#: the scope of a delete that matches a route of any scope (as ``ip route del`` sends)
RT_SCOPE_NOWHERE = 255


def link_of(msg: Any) -> Link:
    a = msg.attr
    info = a("IFLA_LINKINFO")
    kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
    return Link(
        index=msg["index"],
        name=a("IFLA_IFNAME"),
        mtu=a("IFLA_MTU") or 0,
        mac=(a("IFLA_ADDRESS") or "").lower(),
        kind=kind,
        up=bool(msg["flags"] & 1),
        perm_mac=(a("IFLA_PERM_ADDRESS") or None),
        parent_dev=a("IFLA_PARENT_DEV_NAME"),
        parent_bus=a("IFLA_PARENT_DEV_BUS_NAME"),
        alias=a("IFLA_IFALIAS"),
    )


def stats_of(msg: Any) -> LinkStats | None:
    st = msg.get_attr("IFLA_STATS64") or msg.get_attr("IFLA_STATS")
    if st is None:
        return None
    return LinkStats(int(st["rx_bytes"]), int(st["tx_bytes"]),
                     int(st["rx_packets"]), int(st["tx_packets"]))


def route_of(m: Any) -> Route:
    a = m.attr
    return Route(
        dst=f"{a('RTA_DST') or '0.0.0.0'}/{m['dst_len']}",
        gateway=a("RTA_GATEWAY"),
        oif=a("RTA_OIF"),
        table=a("RTA_TABLE") or m["table"],
        onlink=bool(m["flags"] & RTNH_F_ONLINK),
        scope=m["scope"],
        proto=m["proto"],
        priority=a("RTA_PRIORITY") or 0,
    )


def address_of(m: Any) -> tuple[int, str]:
    """(link index, "address/prefix length") of an RTM_NEWADDR."""
    a = m.attr
    return m["index"], f"{a('IFA_LOCAL') or a('IFA_ADDRESS')}/{m['prefixlen']}"


def rule_of(m: Any) -> tuple[int, int, str | None]:
    """(priority, table, source CIDR or None) of an RTM_NEWRULE."""
    a = m.attr
    src = a("FRA_SRC")
    return (a("FRA_PRIORITY") or 0, a("FRA_TABLE") or m["table"],
            f"{src}/{m['src_len']}" if src else None)


def header_table(table: int) -> int:
    """The header's 8-bit table field (the full number goes in the table attribute)."""
    return table if table < 256 else RT_TABLE_COMPAT


def route_request(route: Route, delete: bool = False) -> tuple[dict[str, Any], list[Any]]:
    """The header fields and attributes of an RTM_NEWROUTE (or RTM_DELROUTE: matched by
    destination, table and gateway, whatever its scope) for ``route``, as pyroute2 encodes
    them."""
    dst, _, plen = route.dst.partition("/")
    prefixlen = int(plen or 32)
    attrs: list[Any] = [("RTA_DST", dst)] if prefixlen else []
    attrs.append(("RTA_TABLE", route.table))
    if route.oif and not delete:
        attrs.append(("RTA_OIF", route.oif))
    if route.gateway:
        attrs.append(("RTA_GATEWAY", route.gateway))
    fields = {"family": 2, "dst_len": prefixlen, "table": header_table(route.table)}
    if delete:
        fields["scope"] = RT_SCOPE_NOWHERE  # scope 0 would match universe routes only
    else:
        if route.priority:
            attrs.append(("RTA_PRIORITY", route.priority))
        fields.update(proto=route.proto or RTPROT_STATIC, scope=route.scope, type=RTN_UNICAST,
                      flags=RTNH_F_ONLINK if route.onlink else 0)
    return fields, attrs
