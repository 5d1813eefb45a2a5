"""An answer's attribute index (rdma_cni/adapters/rtnlanswer.py ``_attr_index``, its own
loop for speed) is the index of the walk every other reader takes (``_walk``: each
attribute's offset, length clamped to the run and at least a header, type and flags),
first occurrence of each type kept, for any bytes: well-formed runs, lengths shorter than
a header or past the end, repeated types, nested and byte-order flags."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from rdma_cni.adapters.rtnl import ifinfmsg
from rdma_cni.adapters.rtnlanswer import _Attrs
from rdma_cni.adapters.rtnlcodec import _TYPE_MASK, layout

NLA = struct.Struct("=HH")


def _by_the_walk(run: _Attrs) -> dict[int, tuple[int, int, int]]:
    index: dict[int, tuple[int, int, int]] = {}
    for off, length, kind in run._walk():
        index.setdefault(kind & _TYPE_MASK, (off, length, kind & ~_TYPE_MASK))
    return index


def _run(data: bytes, start: int = 0, end: int | None = None) -> _Attrs:
    return _Attrs(layout(ifinfmsg), data, start, len(data) if end is None else end, 0)


def _attr(kind: int, payload: bytes, length: int | None = None) -> bytes:
    size = NLA.size + len(payload) if length is None else length
    return NLA.pack(size, kind) + payload + b"\0" * (-len(payload) % 4)


def test_well_formed_malformed_and_repeated_attributes_index_as_walked() -> None:
    data = (_attr(3, b"eth1\0") + _attr(4, struct.pack("=I", 1500))
            + _attr(0x8000 | 18, _attr(1, b"macvlan\0")) + _attr(3, b"again\0")
            + _attr(0x4000 | 7, b"\1\2\3\4") + _attr(9, b"", length=2) + _attr(10, b"xy", 64))
    run = _run(data)
    index = run._attr_index()
    assert index == _by_the_walk(run)
    assert index[3] == (0, 9, 0)  # the first IFLA_IFNAME, not the later one
    assert index[18][2] == 0x8000 and index[7][2] == 0x4000  # the flags apart
    assert index[10][1] == len(data) - index[10][0]  # a length past the end: clamped


def test_every_length_about_a_header_and_about_the_end_indexes_as_walked() -> None:
    head = _attr(3, b"eth1\0")
    for tail in (b"", b"\0\0", b"\0" * 8):
        for length in (0, 1, 3, 4, 5, 8, 4 + len(tail) - 1, 4 + len(tail), 4 + len(tail) + 1):
            data = head + NLA.pack(length, 4) + tail
            run = _run(data)
            assert run._attr_index() == _by_the_walk(run), (length, tail)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=256), st.integers(0, 8), st.integers(0, 8))
def test_any_bytes_index_as_walked(data: bytes, head: int, tail: int) -> None:
    start, end = min(head, len(data)), max(min(head, len(data)), len(data) - tail)
    run = _run(data, start, end)
    assert run._attr_index() == _by_the_walk(run)
