"""Reading rtnetlink answers (:class:`rdma_cni.adapters.rtnlanswer.Answer`: fixed fields
by name, attributes by ``attr``, values as pyroute2 gives them) into the port's plain
values, and the reverse for a route. Imports nothing of pyroute2."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from rdma_cni.vocab.netlink import (
    FOREVER,
    IPV4_DEVCONF,
    IPV6_DEVCONF,
    Addr,
    Link,
    LinkConf,
    LinkStats,
    Route,
)

RTNH_F_ONLINK = 4
RTPROT_STATIC = 4
RTN_UNICAST = 1
RT_TABLE_COMPAT = 252
#: the scope of a delete that matches a route of any scope (as ``ip route del`` sends)
RT_SCOPE_NOWHERE = 255
AF_INET, AF_INET6 = 2, 10
#: struct rtnexthop: length (with its attributes), flags, hops, link index
_RTNH = struct.Struct("=HBBi")
#: struct rtattr: length (with its header), type
_RTA = struct.Struct("=HH")
_RTA_GATEWAY = 5
#: IFLA_AF_SPEC's families, and in them the settings arrays (u32 / s32 each)
_IFLA_INET_CONF, _IFLA_INET6_CONF, _IFLA_INET6_ADDR_GEN_MODE = 1, 2, 8
_NLA_TYPE = 0x3FFF


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
        iflink=a("IFLA_LINK") or None,
        link_netnsid=_nsid(a("IFLA_LINK_NETNSID")),
        altnames=_altnames(a("IFLA_PROP_LIST")),
    )


def _altnames(props: Any) -> tuple[str, ...]:
    return () if props is None else tuple(v for k, v in props.items()
                                         if k == "IFLA_ALT_IFNAME" and isinstance(v, str))


def _nsid(value: int | None) -> int | None:
    """A netns id as the kernel sends it (negative, or its uint32 form: none assigned)."""
    return None if value is None or value < 0 or value >= 0x80000000 else int(value)


def nsid_of(msg: Any) -> int | None:
    """NETNSA_NSID of an RTM_NEWNSID (None: the netns has no id here)."""
    return _nsid(msg.attr("NETNSA_NSID"))


def stats_of(msg: Any) -> LinkStats | None:
    st = msg.get_attr("IFLA_STATS64") or msg.get_attr("IFLA_STATS")
    if st is None:
        return None
    return LinkStats(int(st["rx_bytes"]), int(st["tx_bytes"]),
                     int(st["rx_packets"]), int(st["tx_packets"]))


def route_of(m: Any) -> Route:
    a = m.attr
    anywhere = "::" if m["family"] == AF_INET6 else "0.0.0.0"
    return Route(
        dst=f"{a('RTA_DST') or anywhere}/{m['dst_len']}",
        gateway=a("RTA_GATEWAY"),
        oif=a("RTA_OIF"),
        table=a("RTA_TABLE") or m["table"],
        onlink=bool(m["flags"] & RTNH_F_ONLINK),
        scope=m["scope"],
        proto=m["proto"],
        priority=a("RTA_PRIORITY") or 0,
        prefsrc=a("RTA_PREFSRC"),
        type=m["type"],
        **_multipath(m.payload("RTA_MULTIPATH")),
    )


def _multipath(data: bytes | None) -> dict[str, Any]:
    if not data:
        return {}
    hops = nexthops_of(data)
    return {"nexthops": tuple(i for i, _ in hops), "via": tuple(g for _, g in hops)}


def nexthops_of(data: bytes | None) -> list[tuple[int, str | None]]:
    """(link, IPv4 gateway or None) of every nexthop in an RTA_MULTIPATH payload
    (whatever its flags: dead, linkdown), in the kernel's order."""
    out: list[tuple[int, str | None]] = []
    off = 0
    while data and off + _RTNH.size <= len(data):
        length, _flags, _hops, index = _RTNH.unpack_from(data, off)
        if length < _RTNH.size or off + length > len(data):
            break
        out.append((index, _gateway_in(data[off + _RTNH.size:off + length])))
        off += (length + 3) & ~3
    return out


def _gateway_in(attrs: bytes) -> str | None:
    """The IPv4 RTA_GATEWAY among a nexthop's attributes."""
    off = 0
    while off + _RTA.size <= len(attrs):
        length, kind = _RTA.unpack_from(attrs, off)
        if length < _RTA.size:
            return None
        if kind == _RTA_GATEWAY and length == _RTA.size + 4:
            return ".".join(str(b) for b in attrs[off + 4:off + 8])
        off += (length + 3) & ~3
    return None


def address_of(m: Any) -> tuple[int, str]:
    """(link index, "address/prefix length") of an RTM_NEWADDR."""
    a = m.attr
    return m["index"], f"{a('IFA_LOCAL') or a('IFA_ADDRESS')}/{m['prefixlen']}"


def addr_of(m: Any) -> tuple[int, Addr]:
    """(link index, :class:`Addr`) of an RTM_NEWADDR of any family."""
    a = m.attr
    cache = a("IFA_CACHEINFO")
    valid, preferred = FOREVER, FOREVER
    if cache is not None:
        valid, preferred = int(cache["ifa_valid"]), int(cache["ifa_preferred"])
    flags = a("IFA_FLAGS")
    v4 = m["family"] == AF_INET
    return m["index"], Addr(
        cidr=f"{a('IFA_LOCAL') or a('IFA_ADDRESS')}/{m['prefixlen']}",
        flags=m["flags"] if flags is None else flags, valid=valid, preferred=preferred,
        label=a("IFA_LABEL") if v4 else None, broadcast=a("IFA_BROADCAST") if v4 else None,
        proto=a("IFA_PROTO"))


#: the IFA_F_* flags an address is added with (the others the kernel derives: secondary,
#: tentative, deprecated, permanent, dadfailed, temporary): nodad, optimistic,
#: homeaddress, mngtmpaddr, noprefixroute, mcautojoin
IFA_SETTABLE = 0x02 | 0x04 | 0x10 | 0x100 | 0x200 | 0x400


def addr_request(addr: Addr, index: int) -> tuple[dict[str, Any], list[Any]]:
    """The header fields and attributes of an RTM_NEWADDR of ``addr`` on link ``index``:
    its settable flags, label, broadcast and (when not forever) lifetimes."""
    ip, _, plen = addr.cidr.partition("/")
    flags = addr.flags & IFA_SETTABLE
    attrs: list[Any] = [("IFA_ADDRESS", ip), ("IFA_LOCAL", ip), ("IFA_FLAGS", flags)]
    if addr.label:
        attrs.append(("IFA_LABEL", addr.label))
    if addr.broadcast:
        attrs.append(("IFA_BROADCAST", addr.broadcast))
    if (addr.valid, addr.preferred) != (FOREVER, FOREVER):
        attrs.append(("IFA_CACHEINFO", {"ifa_preferred": addr.preferred,
                                        "ifa_valid": addr.valid, "cstamp": 0, "tstamp": 0}))
    fields = {"family": AF_INET6 if addr.version == 6 else AF_INET, "prefixlen": int(plen),
              "flags": flags & 0xFF, "index": index}
    return fields, attrs


def inet6_mode_of(msg: Any) -> int | None:
    """IFLA_INET6_ADDR_GEN_MODE of an RTM_NEWLINK (None: no IPv6 on the link)."""
    spec = msg.attr("IFLA_AF_SPEC")
    inet6 = spec.get_attr("AF_INET6") if spec is not None else None
    return inet6.get_attr("IFLA_INET6_ADDR_GEN_MODE") if inet6 is not None else None


def inet6_mode_attrs(mode: int) -> list[Any]:
    """The RTM_SETLINK attributes that set the IPv6 address generation mode."""
    return [("IFLA_AF_SPEC", {"attrs": [
        ("AF_INET6", {"attrs": [("IFLA_INET6_ADDR_GEN_MODE", mode)]})]})]


def link_conf_of(msg: Any) -> LinkConf:
    """The settings of an RTM_NEWLINK's link (:class:`LinkConf`): its flags, queue length,
    alias and, from IFLA_AF_SPEC, its IPv4 and IPv6 settings (read from the kernel's
    arrays: an IPv4 setting of index i is the array's (i-1)-th, an IPv6 one its i-th)."""
    spec = _nested(msg.payload("IFLA_AF_SPEC") or b"")
    inet = _nested(spec.get(AF_INET, b"")).get(_IFLA_INET_CONF, b"")
    inet6 = _nested(spec.get(AF_INET6, b""))
    v4 = _array(inet, "=I")
    v6 = _array(inet6.get(_IFLA_INET6_CONF, b""), "=i")
    mode = inet6.get(_IFLA_INET6_ADDR_GEN_MODE)
    return LinkConf(
        flags=msg["flags"], txqlen=msg.attr("IFLA_TXQLEN") or 0,
        alias=msg.attr("IFLA_IFALIAS") or None,
        ipv4={k: v4[i - 1] for k, i in IPV4_DEVCONF.items() if i <= len(v4)},
        ipv6={k: v6[i] for k, i in IPV6_DEVCONF.items() if i < len(v6)},
        inet6_mode=mode[0] if mode else None)


def _nested(data: bytes) -> dict[int, bytes]:
    """type -> payload of the attributes packed in ``data`` (the first of each type)."""
    out: dict[int, bytes] = {}
    off = 0
    while off + _RTA.size <= len(data):
        length, kind = _RTA.unpack_from(data, off)
        if length < _RTA.size or off + length > len(data):
            break
        out.setdefault(kind & _NLA_TYPE, data[off + _RTA.size:off + length])
        off += (length + 3) & ~3
    return out


def _array(data: bytes, fmt: str) -> list[int]:
    return [v for (v,) in struct.iter_unpack(fmt, data[:len(data) - len(data) % 4])]


def ipv4_conf_attrs(conf: Sequence[tuple[int, int]]) -> list[Any]:
    """The RTM_SETLINK attributes that set IPv4 settings, as (``IPV4_DEVCONF_*`` index,
    value) pairs (packed by :func:`rdma_cni.adapters.rtnlcodec._inet_conf`)."""
    return [("IFLA_AF_SPEC", {"attrs": [("AF_INET", {"conf": list(conf)})]})]


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
    v6 = route.version == 6
    prefixlen = int(plen or (128 if v6 else 32))
    attrs: list[Any] = [("RTA_DST", dst)] if prefixlen else []
    attrs.append(("RTA_TABLE", route.table))
    if route.oif and not delete:
        attrs.append(("RTA_OIF", route.oif))
    if route.gateway:
        attrs.append(("RTA_GATEWAY", route.gateway))
    fields = {"family": AF_INET6 if v6 else AF_INET, "dst_len": prefixlen,
              "table": header_table(route.table)}
    if delete:
        fields["scope"] = RT_SCOPE_NOWHERE  # scope 0 would match universe routes only
    else:
        if route.priority:
            attrs.append(("RTA_PRIORITY", route.priority))
        if route.prefsrc:
            attrs.append(("RTA_PREFSRC", route.prefsrc))
        fields.update(proto=route.proto or RTPROT_STATIC, scope=route.scope, type=RTN_UNICAST,
                      flags=RTNH_F_ONLINK if route.onlink else 0)
    return fields, attrs
