"""rtnetlink messages packed and read from pyroute2's own message classes' layouts (their
``header``, ``fields`` and attribute maps), without one pyroute2 object per attribute:
the one way every process (the in-process plugin and ``rdma-cni serve``) packs its
requests and reads its answers.

pyroute2 encodes a request by building an object for every attribute and decodes an
answer by building one for every attribute the kernel sent (a link has about fifty),
which is most of the Python time of a netlink request. Here a request is packed from
the same layout in one pass (this module); an answer is read attribute by attribute
when asked (:mod:`rdma_cni.adapters.rtnlanswer`).

Packed here: the integer, text and address attribute classes below, a struct attribute
(its integer fields from a dict), and a nested attribute whose own attributes are; an
attribute whose class pyroute2 picks with a function of the message (IFLA_AF_SPEC by
family, IFLA_INFO_DATA by IFLA_INFO_KIND) gets the class it picks. Anything else is
refused (:class:`Unsupported`), never sent. The unit tests hold every request the
adapter sends byte for byte against pyroute2's own encoding, but one that pyroute2
cannot pack: an interface's IPv4 settings (IFLA_AF_SPEC's AF_INET, see
:func:`_inet_conf`), held against the kernel's own reading of them.
"""

from __future__ import annotations

import re
import socket
import struct
from collections.abc import Sequence
from typing import Any

import rdma_cni.adapters.pyroute2pkg  # isort: skip  # noqa: F401 - before any pyroute2 import
from pyroute2.netlink import nlmsg_atoms as _atoms
from pyroute2.netlink.rtnl.ifinfmsg import ifinfbase

#: a netlink message's header (nlmsghdr: length, type, flags, sequence, port id)
NLMSG_HDR = struct.Struct("=IHHII")
_NLA = struct.Struct("=HH")
NLA_F_NESTED = 0x8000
NLA_F_NET_BYTEORDER = 0x4000
_TYPE_MASK = ~(NLA_F_NESTED | NLA_F_NET_BYTEORDER) & 0xFFFF

#: fixed-size integer attributes: pyroute2's class -> struct of its one ``value`` field
_SCALARS: dict[type, struct.Struct] = {
    cls: struct.Struct(fmt if fmt[0] in "<>=!" else "=" + fmt)
    for cls in (_atoms.uint8, _atoms.uint16, _atoms.uint32, _atoms.uint64, _atoms.int32,
                _atoms.be16, _atoms.be32)
    for ((_name, fmt),) in (cls.fields,)
}
_ZSTRING = _atoms.asciiz
_MAC = _atoms.l2addr
_IP = _atoms.ipaddr  # family from the length (encode: from the text)
_TARGET = _atoms.target  # family from the message
#: an address of one family whatever the message's (read only)
_FIXED_IP = {_atoms.ip4addr: (socket.AF_INET, 4), _atoms.ip6addr: (socket.AF_INET6, 16)}
_HEX = _atoms.hex
_NETNS_FD = ifinfbase.netns_fd  # an int is the descriptor itself (a name: pyroute2 opens it)
#: IFLA_AF_SPEC's AF_INET, which pyroute2 maps to the settings array an answer carries
_INET = ifinfbase.af_spec_inet.inet
IFLA_INET_CONF = 1
_U32 = struct.Struct("=I")
#: a fixed field packed here: an integer, or padding (``3x``: rtgenmsg's)
_FIELD = re.compile(r"\d*x|[BHIiQqbh]")


def _pad(n: int) -> int:
    return (n + 3) & ~3


class _Layout:
    """One message or nested attribute class, compiled once: its fixed fields as one
    struct and its attribute map by name and by type (pyroute2's compiled tables)."""

    __slots__ = ("by_name", "by_type", "cls", "fields", "names", "supported")

    def __init__(self, cls: type) -> None:
        self.cls = cls
        fields = tuple(getattr(cls, "fields", ()) or ())
        fmts = "".join(f for _, f in fields)
        self.supported = all(isinstance(f, str) and _FIELD.fullmatch(f) for _, f in fields)
        self.fields = struct.Struct("=" + (fmts if self.supported else ""))
        self.names = tuple(n for n, f in fields if isinstance(f, str) and "x" not in f)
        by_name: dict[str, dict[str, Any]] = {}
        if getattr(cls, "nla_map", None):
            cls()  # pyroute2 compiles the class's attribute map on its first instance
            by_name = dict(getattr(cls, "_nlmsg_base__r_nla_map", None) or {})
            self.supported = self.supported and bool(by_name)
        self.by_name = by_name
        self.by_type = {p["type"]: p for p in by_name.values()}


_LAYOUTS: dict[type, _Layout] = {}


def layout(cls: type) -> _Layout:
    found = _LAYOUTS.get(cls)
    if found is None:
        found = _LAYOUTS[cls] = _Layout(cls)
    return found


class Unsupported(ValueError):  # noqa: N818 - a request that cannot be packed
    """A request the codec cannot pack (an attribute its message has not, a value of the
    wrong type or size): refused before it is sent."""


# requests --------------------------------------------------------------


def encode(cls: type, kind: int, flags: int, seq: int, fields: dict[str, Any],
           attrs: list[tuple[str, Any]]) -> bytes:
    """The request's bytes, as pyroute2 encodes ``cls`` with these fields and
    attributes; :class:`Unsupported` when one of them cannot be packed."""
    lay = layout(cls)
    if not lay.supported:
        raise Unsupported(f"{cls.__name__}: a fixed field the codec does not pack")
    try:
        body = lay.fields.pack(*(fields.get(n, 0) for n in lay.names))
        body = _pad_to(body) + _attrs(lay, attrs, fields.get("family", 0), fields)
    except Unsupported:
        raise
    except (struct.error, OSError, ValueError, TypeError, AttributeError) as exc:
        raise Unsupported(f"{cls.__name__}: {exc}") from None
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(body), kind, flags, seq, 0) + body


def _pad_to(b: bytes) -> bytes:
    return b + b"\0" * (_pad(len(b)) - len(b))


def chosen(lay: _Layout, prime: dict[str, Any], fields: dict[str, Any],
           before: Sequence[Any], **how: Any) -> dict[str, Any]:
    """``prime`` with the class pyroute2's function picks for it from the message (or
    nested attribute) of layout ``lay``: its ``fields`` and the attributes ``before``
    it (IFLA_AF_SPEC by family, IFLA_INFO_DATA by IFLA_INFO_KIND)."""
    probe = lay.cls()
    for key, value in fields.items():
        probe[key] = value
    probe["attrs"] = list(before)  # (name, value) pairs, or cells read as such
    return {**prime, "class": prime["class"](probe, **how)}


def _attrs(lay: _Layout, attrs: list[tuple[str, Any]], family: int,
           fields: dict[str, Any]) -> bytes:
    """A message's (or a nested attribute's) attributes."""
    out = bytearray()
    for i, cell in enumerate(attrs):
        prime = lay.by_name.get(cell[0])
        if prime is None or len(cell) != 2:  # a third item: flags only pyroute2 reads
            raise Unsupported(f"{lay.cls.__name__}: {cell[0]}")
        if not isinstance(prime["class"], type):
            prime = chosen(lay, prime, fields, list(attrs[:i]), value=cell[1])
        out += _attr(prime, cell[1], family)
    return bytes(out)


def _attr(prime: dict[str, Any], value: Any, family: int) -> bytes:
    """One attribute: header (the type with pyroute2's flags for it) and padded payload."""
    payload = _payload(prime, value, family)
    flags = prime["nla_flags"] | getattr(prime["class"], "nla_flags", 0)
    return _NLA.pack(_NLA.size + len(payload), prime["type"] | flags) + _pad_to(payload)


def _payload(prime: dict[str, Any], value: Any, family: int) -> bytes:
    cls = prime["class"]
    if not isinstance(cls, type) or prime["nla_array"] or prime["init"] is not None:
        raise Unsupported(prime["name"])
    scalar = _scalar_base(cls)
    if scalar is not None and isinstance(value, int):
        return scalar.pack(value)  # a subclass maps names to numbers: a number is itself
    if cls is _NETNS_FD and isinstance(value, int):
        return struct.pack("=I", value)
    if cls is _ZSTRING:
        return (value.encode() if isinstance(value, str) else bytes(value)) + b"\0"
    if cls is _MAC:
        return bytes(int(x, 16) for x in value.split(":"))
    if cls is _IP:
        return socket.inet_pton(socket.AF_INET6 if ":" in value else socket.AF_INET, value)
    if cls is _TARGET and family in (socket.AF_INET, socket.AF_INET6):
        return socket.inet_pton(family, value)
    if cls is _INET and isinstance(value, dict) and set(value) == {"conf"}:
        return _inet_conf(value["conf"])
    return _compound(prime, layout(cls), value, family)


def _inet_conf(conf: Sequence[tuple[int, int]]) -> bytes:
    """AF_INET's payload on a request setting an interface's IPv4 settings: IFLA_INET_CONF
    nesting one u32 attribute per setting, of type its ``IPV4_DEVCONF_*`` index, as the
    kernel reads it (net/ipv4/devinet.c: inet_validate_link_af, inet_set_link_af). An
    answer carries the same settings as one array instead (pyroute2's ``inet`` struct,
    which is all pyroute2 packs), so this request is not pyroute2's."""
    inner = bytearray()
    for index, value in conf:
        if not isinstance(index, int) or not 0 < index < 0x4000 or not isinstance(value, int):
            raise Unsupported(f"IFLA_INET_CONF: setting {index!r}")
        inner += _NLA.pack(_NLA.size + _U32.size, index) + _U32.pack(value)
    if not inner:
        raise Unsupported("IFLA_INET_CONF: no setting")
    return _NLA.pack(_NLA.size + len(inner), IFLA_INET_CONF | NLA_F_NESTED) + bytes(inner)


def _compound(prime: dict[str, Any], lay: _Layout, value: Any, family: int) -> bytes:
    """A nested attribute (``{"attrs": [...]}``) or a struct (its fields by name)."""
    if lay.supported and isinstance(value, dict):
        if lay.by_name and not lay.names and set(value) == {"attrs"}:
            return _attrs(lay, value["attrs"], family, {})
        if lay.names and not lay.by_name and set(value) <= set(lay.names):
            return lay.fields.pack(*(value.get(n, 0) for n in lay.names))
    raise Unsupported(prime["name"])


_SCALAR_OF: dict[type, struct.Struct | None] = {}


def _scalar_base(cls: type) -> struct.Struct | None:
    """The struct of the integer class ``cls`` is or derives from (None: not one)."""
    try:
        return _SCALAR_OF[cls]
    except KeyError:
        found = next((_SCALARS[b] for b in cls.__mro__ if b in _SCALARS), None)
        _SCALAR_OF[cls] = found
        return found


