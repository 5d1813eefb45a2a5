"""pyroute2 as the oracle of the rtnetlink codec (rdma_cni/adapters/rtnlcodec.py): a
request encoded by pyroute2's own message class, whole."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def pyroute2_encoded(cls: type, attrs: Sequence[tuple[str, Any]], fields: dict[str, Any],
                     kind: int, flags: int, seq: int) -> bytes:
    """The request as pyroute2 itself encodes it."""
    msg = cls()
    for key, value in fields.items():
        msg[key] = value
    msg["attrs"] = list(attrs)
    msg["header"].update(type=kind, flags=flags, sequence_number=seq, pid=0)
    msg.encode()
    return bytes(msg.data)
