"""rtnetlink messages encoded and read by pyroute2's own message classes' layouts (their
``header``, ``fields`` and attribute maps), without one pyroute2 object per attribute.

pyroute2 encodes a request by building an object for every attribute and decodes an
answer by building one for every attribute the kernel sent (a link has about fifty),
which is most of the Python time of a netlink request. Here a request is packed from
the same layout in one pass, and an answer is a :class:`Answer`: its fixed fields
unpacked at once, its attributes indexed by type and each one decoded only when read.

It is used where a process serves many requests (``rdma-cni serve`` calls
:func:`enable`); the in-process plugin leaves it off, and pyroute2 encodes and decodes
every message whole, as its own classes do.

Only the attribute classes in ``_SCALARS`` and the text and address classes below are
packed and read here; a
nested attribute is packed here when its own attributes are, and read by pyroute2's
class for it. Anything else (a class chosen by a function, a struct) goes through
pyroute2 whole: :func:`encode` answers None and the caller encodes the pyroute2
message, :meth:`Answer.attr` decodes that attribute (or, for a class chosen by a
function, the whole message) with pyroute2. The unit tests hold every request the
adapter sends and every answer it reads byte for byte against pyroute2's own.
"""

from __future__ import annotations

import re
import socket
import struct
from typing import Any

import rdma_cni.adapters.pyroute2pkg  # isort: skip  # noqa: F401 - before any pyroute2 import
from pyroute2.netlink import nlmsg_atoms as _atoms
from pyroute2.netlink.rtnl.ifinfmsg import ifinfbase

_HDR = struct.Struct("=IHHII")
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
_HEX = _atoms.hex
_NETNS_FD = ifinfbase.netns_fd  # an int is the descriptor itself (a name: pyroute2 opens it)
#: a fixed field packed here: an integer, or padding (``3x``: rtgenmsg's)
_FIELD = re.compile(r"\d*x|[BHIiQqbh]")
_enabled = False


def enable(on: bool = True) -> None:
    """Pack requests and read answers here (off: pyroute2 does both, whole)."""
    global _enabled
    _enabled = on


def enabled() -> bool:
    return _enabled


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


class Unsupported(Exception):  # noqa: N818 - a reason to hand the request to pyroute2
    """This request has an attribute packed only by pyroute2."""


# requests --------------------------------------------------------------


def encode(cls: type, kind: int, flags: int, seq: int, fields: dict[str, Any],
           attrs: list[tuple[str, Any]]) -> bytes | None:
    """The request's bytes (as pyroute2 encodes ``cls`` with these fields and
    attributes), or None when the codec is off or an attribute is one only pyroute2
    packs."""
    if not _enabled:
        return None
    lay = layout(cls)
    if not lay.supported:
        return None
    try:
        body = lay.fields.pack(*(fields.get(n, 0) for n in lay.names))
        family = fields.get("family", 0)
        body = _pad_to(body) + _attrs(lay, attrs, family)
    except (Unsupported, struct.error, OSError, ValueError, TypeError):
        return None
    return _HDR.pack(_HDR.size + len(body), kind, flags, seq, 0) + body


def _pad_to(b: bytes) -> bytes:
    return b + b"\0" * (_pad(len(b)) - len(b))


def _attrs(lay: _Layout, attrs: list[tuple[str, Any]], family: int,
           nested: bool = False) -> bytes:
    """A message's (or, ``nested``, a nested attribute's) attributes; in a nested one, an
    attribute whose class pyroute2 picks with a function of the earlier ones
    (IFLA_INFO_DATA by IFLA_INFO_KIND) gets the class it picks."""
    out = bytearray()
    for i, cell in enumerate(attrs):
        prime = lay.by_name.get(cell[0])
        if prime is None or len(cell) != 2:  # a third item: flags for pyroute2
            raise Unsupported(cell[0])
        cls = prime["class"]
        if nested and not isinstance(cls, type):
            probe = lay.cls()
            probe["attrs"] = list(attrs[:i])
            prime = {**prime, "class": cls(probe, value=cell[1])}
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
    if getattr(cls, "nla_map", None) and isinstance(value, dict) and set(value) == {"attrs"}:
        nested = layout(cls)
        if nested.supported and not nested.names:
            return _attrs(nested, value["attrs"], family, nested=True)
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


# answers ---------------------------------------------------------------


class Answer:
    """One message of an answer: fixed fields by name (``answer["index"]``), the first
    attribute of a name by :meth:`attr` (decoded when asked), the whole pyroute2
    message by :meth:`full`."""

    __slots__ = ("_cache", "_data", "_end", "_fields", "_full", "_index", "_lay", "_off")

    def __init__(self, cls: type, data: bytes, off: int, length: int) -> None:
        lay = self._lay = layout(cls)
        self._data, self._off, self._end = data, off, off + length
        start = off + _HDR.size
        self._fields = dict(zip(lay.names, lay.fields.unpack_from(data, start), strict=True))
        self._index: dict[int, tuple[int, int, int]] | None = None
        self._full: Any = None
        self._cache: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        return self._fields[name] if _enabled else self.full()[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._fields.get(name, default) if _enabled else self.full().get(name, default)

    def _attr_index(self) -> dict[int, tuple[int, int, int]]:
        """type -> (offset, length, flags) of each attribute's first occurrence."""
        index: dict[int, tuple[int, int, int]] = {}
        data, end = self._data, self._end
        off = self._off + _HDR.size + _pad(self._lay.fields.size)
        while off + _NLA.size <= end:
            length, kind = _NLA.unpack_from(data, off)
            length = min(max(length, _NLA.size), end - off)
            index.setdefault(kind & _TYPE_MASK, (off, length, kind & ~_TYPE_MASK))
            off += _pad(length)
        self._index = index
        return index

    def attr(self, name: str) -> Any:
        """The value of the first attribute called ``name`` (pyroute2's value), or None."""
        if not _enabled:
            return self.full().get_attr(name)
        if name in self._cache:
            return self._cache[name]
        value = self._cache[name] = self._decode(name)
        return value

    def _decode(self, name: str) -> Any:
        prime = self._lay.by_name.get(name)
        if prime is None:
            return self.full().get_attr(name)
        index = self._index if self._index is not None else self._attr_index()
        at = index.get(prime["type"])
        if at is None:
            return None
        off, length, flags = at
        cls = prime["class"]
        if not isinstance(cls, type):
            return self.full().get_attr(name)
        payload = self._data[off + _NLA.size: off + length]
        value = _value(cls, payload, self._fields.get("family", 0))
        if value is not _NOT_HERE:
            return value
        nla = cls(data=self._data, offset=off, length=length, init=prime["init"])
        nla._nla_array = prime["nla_array"]
        nla._nla_flags = flags
        try:
            nla.decode()
        except Exception:
            return self._data[off: off + length]
        return nla.getvalue()

    def get_attr(self, name: str) -> Any:
        return self.attr(name)

    def full(self) -> Any:
        """The message decoded by pyroute2, every attribute of it."""
        if self._full is None:
            msg = self._lay.cls(self._data, offset=self._off)
            msg.decode()
            self._full = msg
        return self._full


_NOT_HERE = object()


def _value(cls: type, payload: bytes, family: int) -> Any:
    scalar = _SCALARS.get(cls)
    if scalar is not None:
        return scalar.unpack(payload)[0] if len(payload) == scalar.size else _NOT_HERE
    if cls is _ZSTRING:
        raw = payload.strip(b"\0")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw
    if cls is _MAC:
        return ":".join(f"{b:02x}" for b in payload[:6]) if len(payload) >= 6 else _NOT_HERE
    if cls is _HEX:
        return ":".join(f"{b:02x}" for b in payload)
    if cls is _IP and len(payload) in (4, 16):
        return socket.inet_ntop(socket.AF_INET6 if len(payload) > 4 else socket.AF_INET,
                                payload)
    if cls is _TARGET and family == socket.AF_INET and len(payload) >= 4:
        return socket.inet_ntop(socket.AF_INET, payload[:4])
    if cls is _TARGET and family == socket.AF_INET6 and len(payload) >= 16:
        return socket.inet_ntop(socket.AF_INET6, payload[:16])
    return _NOT_HERE
