"""rtnetlink answers read from pyroute2's message classes' layouts
(:func:`rdma_cni.adapters.rtnlcodec.layout`), one attribute at a time: an
:class:`Answer` unpacks its fixed fields at once, indexes its attributes by type and
decodes each one only when read, to the value pyroute2 gives for it. A nested
attribute reads as a :class:`Nested` (its own attributes, the same way), a struct
(IFA_CACHEINFO, IFLA_STATS64) as a dict of its fields.

What the kernel may send that no adapter reads and this module does not unpack (an
array of attributes, a class with a decoder of its own, a payload shorter than its
layout) is decoded by pyroute2's class for it, as pyroute2 would.
"""

from __future__ import annotations

import socket
from typing import Any

from rdma_cni.adapters.rtnlcodec import (
    _FIXED_IP,
    _HEX,
    _IP,
    _MAC,
    _NLA,
    _TARGET,
    _TYPE_MASK,
    _ZSTRING,
    NLMSG_HDR,
    _Layout,
    _pad,
    _scalar_base,
    chosen,
    layout,
)

_NLA_SIZE = _NLA.size


class _Attrs:
    """A run of attributes in ``data[start:end]`` under layout ``lay``, read when asked."""

    __slots__ = ("_cache", "_data", "_end", "_family", "_index", "_lay", "_start")

    def __init__(self, lay: _Layout, data: bytes, start: int, end: int, family: int) -> None:
        self._lay, self._data, self._start, self._end = lay, data, start, end
        self._family = family
        self._index: dict[int, tuple[int, int, int]] | None = None
        self._cache: dict[str, Any] = {}

    def _fieldmap(self) -> dict[str, Any]:
        return {}

    def _walk(self) -> list[tuple[int, int, int]]:
        """(offset, length, type with flags) of every attribute, in order."""
        out = []
        data, end, off = self._data, self._end, self._start
        while off + _NLA.size <= end:
            length, kind = _NLA.unpack_from(data, off)
            length = min(max(length, _NLA.size), end - off)
            out.append((off, length, kind))
            off += _pad(length)
        return out

    def _attr_index(self) -> dict[int, tuple[int, int, int]]:
        """type -> (offset, length, flags) of each attribute's first occurrence: the walk
        of :meth:`_walk` in one loop of its own (a link's answer has about 40 attributes,
        and this runs for every answer read: half the time of indexing the walk's list)."""
        index: dict[int, tuple[int, int, int]] = {}
        data, end, off = self._data, self._end, self._start
        unpack = _NLA.unpack_from
        while off + _NLA_SIZE <= end:
            length, kind = unpack(data, off)
            if length < _NLA_SIZE:
                length = _NLA_SIZE
            if length > end - off:
                length = end - off
            kind_only = kind & _TYPE_MASK
            if kind_only not in index:
                index[kind_only] = (off, length, kind & ~_TYPE_MASK)
            off += (length + 3) & ~3
        self._index = index
        return index

    def _first(self, name: str) -> tuple[Any, tuple[int, int, int]] | None:
        """The layout of the attribute called ``name`` and (offset, length, flags) of its
        first occurrence; None when the layout has no such name or the message no such
        attribute."""
        prime = self._lay.by_name.get(name)
        if prime is None:
            return None
        index = self._index if self._index is not None else self._attr_index()
        at = index.get(prime["type"])
        return None if at is None else (prime, at)

    def attr(self, name: str) -> Any:
        """The value of the first attribute called ``name`` (pyroute2's value), or None."""
        if name in self._cache:
            return self._cache[name]
        found = self._first(name)
        value = None if found is None else self._read(found[0], *found[1])
        self._cache[name] = value
        return value

    def get_attr(self, name: str) -> Any:
        return self.attr(name)

    def payload(self, name: str) -> bytes | None:
        """The undecoded payload of the first attribute called ``name`` (None: absent)."""
        found = self._first(name)
        if found is None:
            return None
        off, length, _ = found[1]
        return self._data[off + _NLA.size: off + length]

    def items(self, until: int | None = None) -> list[tuple[str, Any]]:
        """(name, value) of every attribute in order (of those before offset ``until``;
        "UNKNOWN" and its bytes for a type the layout has not)."""
        out = []
        for off, length, kind in self._walk():
            if until is not None and off >= until:
                break
            prime = self._lay.by_type.get(kind & _TYPE_MASK)
            if prime is None:
                out.append(("UNKNOWN", self._data[off: off + length]))
            else:
                out.append((prime["name"], self._read(prime, off, length, kind & ~_TYPE_MASK)))
        return out

    def _read(self, prime: dict[str, Any], off: int, length: int, flags: int) -> Any:
        if not isinstance(prime["class"], type):
            before = [_Cell(self, p, *at) for at in self._walk() if at[0] < off
                      for p in (self._lay.by_type.get(at[2] & _TYPE_MASK),) if p is not None]
            prime = chosen(self._lay, prime, self._fieldmap(), before,
                           data=self._data, offset=off)
        cls = prime["class"]
        if not prime["nla_array"] and prime["init"] is None:
            value = _value(cls, self._data, off + _NLA.size, off + length, self._family)
            if value is not _NOT_HERE:
                return value
        return _pyroute2_nla(prime, self._data, off, length, flags)


class _Cell:
    """(name, value) of one attribute for pyroute2's function that picks a class from the
    attributes before it: the value is decoded only if the function reads it."""

    __slots__ = ("_at", "_owner", "_prime")

    def __init__(self, owner: _Attrs, prime: dict[str, Any], off: int, length: int,
                 kind: int) -> None:
        self._owner, self._prime, self._at = owner, prime, (off, length, kind & ~_TYPE_MASK)

    def __getitem__(self, i: int) -> Any:
        if i == 0:
            return self._prime["name"]
        if i == 1:
            return self._owner._read(self._prime, *self._at)
        raise IndexError(i)


class Nested(_Attrs):
    """A nested attribute's attributes (``get_attr``), equal to any nested value with the
    same attributes in the same order (pyroute2's, as the tests compare them)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Attrs):
            theirs = other.items()
        elif isinstance(other, dict) and isinstance(other.get("attrs"), list):
            theirs = [(cell[0], cell[1]) for cell in other["attrs"]]
        else:
            return NotImplemented
        return [c for c in self.items() if c[0] != "UNKNOWN"] == \
            [c for c in theirs if c[0] != "UNKNOWN"]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Nested({self.items()!r})"


class Answer(_Attrs):
    """One message of an answer: fixed fields by name (``answer["index"]``), the first
    attribute of a name by :meth:`attr` (decoded when asked)."""

    __slots__ = ("_fields", "_msg")

    def __init__(self, cls: type, data: bytes, off: int, length: int) -> None:
        lay = layout(cls)
        start = off + NLMSG_HDR.size
        super().__init__(lay, data, start + _pad(lay.fields.size), off + length, 0)
        self._fields = dict(zip(lay.names, lay.fields.unpack_from(data, start), strict=True))
        self._family = self._fields.get("family", 0)
        self._msg = (off, length)

    def _fieldmap(self) -> dict[str, Any]:
        return self._fields

    def __getitem__(self, name: str) -> Any:
        return self._fields[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._fields.get(name, default)

    def full(self) -> Any:
        """The message decoded by pyroute2 whole (the tests' oracle)."""
        msg = self._lay.cls(self._data, offset=self._msg[0])
        msg.decode()
        return msg


_NOT_HERE = object()
#: the modules of pyroute2's base and atom classes (their generic decoder is the one
#: read here)
_BASES = ("pyroute2.netlink", "pyroute2.netlink.nlmsg_atoms")
_OWN: dict[type, bool] = {}


def _own_decoder(cls: type) -> bool:
    """Whether ``cls`` decodes with a method of its own (read by pyroute2's class)."""
    own = _OWN.get(cls)
    if own is None:
        own = _OWN[cls] = any("decode" in vars(k) for k in cls.__mro__
                              if k.__module__ not in _BASES)
    return own


def _value(cls: type, data: bytes, start: int, end: int, family: int) -> Any:
    """The value of an attribute of class ``cls`` whose payload is ``data[start:end]``
    (_NOT_HERE: a shape this module does not read)."""
    payload = data[start:end]
    scalar = _scalar_base(cls)
    if scalar is not None and not _own_decoder(cls):
        if len(payload) != scalar.size:
            return _NOT_HERE
        (number,) = scalar.unpack(payload)
        names = getattr(cls, "value_map", None)  # a subclass naming its values
        return names.get(number, number) if names else number
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
    fixed = _FIXED_IP.get(cls)
    if fixed is not None and len(payload) == fixed[1]:
        return socket.inet_ntop(fixed[0], payload)
    if cls is _TARGET and family in (socket.AF_INET, socket.AF_INET6):
        size = 4 if family == socket.AF_INET else 16
        return socket.inet_ntop(family, payload[:size]) if len(payload) >= size else _NOT_HERE
    return _compound(cls, data, start, end, family)


def _compound(cls: type, data: bytes, start: int, end: int, family: int) -> Any:
    """A nested attribute (a :class:`Nested`) or a struct (a dict of its fields)."""
    if _own_decoder(cls):
        return _NOT_HERE
    lay = layout(cls)
    if not lay.supported:
        return _NOT_HERE
    if lay.by_name and not lay.names:
        return Nested(lay, data, start, end, family)
    if lay.names and not lay.by_name and end - start >= lay.fields.size:
        return dict(zip(lay.names, lay.fields.unpack_from(data, start), strict=True))
    return _NOT_HERE


def _pyroute2_nla(prime: dict[str, Any], data: bytes, off: int, length: int,
                  flags: int) -> Any:
    """An attribute of a shape this module does not read, decoded by pyroute2's class."""
    nla = prime["class"](data=data, offset=off, length=length, init=prime["init"])
    nla._nla_array = prime["nla_array"]
    nla._nla_flags = flags
    try:
        nla.decode()
    except Exception:
        return data[off: off + length]
    return nla.getvalue()
