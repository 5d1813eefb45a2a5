"""The only pyverbs importer (optional; Debian's python3-pyverbs). Imported lazily."""

from __future__ import annotations

from ipaddress import IPv6Address
from typing import Any

# ibv_gid_type_sysfs values returned by Context.query_gid_type
_TYPE_NAMES = {0: "IB/RoCE v1", 1: "RoCE v2"}


def _pyverbs() -> Any:
    import pyverbs.device as device

    return device


def available() -> bool:
    try:
        _pyverbs()
    except ImportError:
        return False
    return True


def query_gid(ibdev: str, port: int, index: int) -> tuple[str, str | None]:
    """(GID, type name) of one slot, read through libibverbs."""
    device = _pyverbs()
    ctx = device.Context(name=ibdev)
    try:
        gid = str(ctx.query_gid(port, index).gid)
        try:
            gtype: str | None = _TYPE_NAMES.get(int(ctx.query_gid_type(port, index)))
        except (AttributeError, TypeError, ValueError):
            gtype = None
        return gid, gtype
    finally:
        close = getattr(ctx, "close", None)
        if close is not None:
            close()


def check_gid(ibdev: str, port: int, index: int, gid: str, gid_type: str) -> str | None:
    """None when libibverbs agrees with sysfs, else the disagreement."""
    try:
        vgid, vtype = query_gid(ibdev, port, index)
    except Exception as e:
        return f"{ibdev}:{port} index {index}: query failed: {e}"
    if IPv6Address(vgid) != IPv6Address(gid):
        return f"{ibdev}:{port} index {index}: sysfs has {gid}, verbs {vgid}"
    if vtype is not None and vtype != gid_type:
        return f"{ibdev}:{port} index {index}: sysfs type {gid_type}, verbs {vtype}"
    return None
