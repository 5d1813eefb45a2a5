"""The boundary models' field checks, plain functions (stdlib only).

rdma_cni/models/declared.py names them in its ``Annotated`` fields and the generated
schemas (rdma_cni/models/generated.py) call them: each returns the value (maybe
normalised) or raises ``ValueError``, whose text becomes the config error's clause.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from rdma_cni.errors import shown

_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")


def networks(value: list[str]) -> list[str]:
    for item in value:
        try:
            ipaddress.IPv4Network(item, strict=False)
        except ValueError:
            raise ValueError(f"exclude entry {shown(item)} is not an IPv4 address or "
                             "CIDR") from None
    return value


def subnets(value: dict[str, Any]) -> dict[str, Any]:
    for subnet in value:
        try:
            ipaddress.IPv4Network(subnet, strict=True)
        except ValueError:
            raise ValueError(f"ranges key {shown(subnet)} is not an IPv4 subnet CIDR") from None
    return value


def mtu(value: int) -> int:
    if value and value < 68:
        raise ValueError("mtu must be 0 (the parent's) or at least 68")
    return value


def absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("dataDir must be an absolute path")
    return path(value)


def path(value: str) -> str:
    """A file path of the config: no NUL (JSON can carry one, no system call can)."""
    if "\x00" in value:
        raise ValueError(f"path {shown(value)} contains a NUL character")
    return value


def addresses(value: list[str]) -> list[str]:
    for item in value:
        try:
            ipaddress.ip_address(item)
        except ValueError:
            raise ValueError(f"nodeIPs entry {shown(item)} is not an IP address") from None
    return value


def unique(value: list[str] | None) -> list[str] | None:
    if value is not None and len(set(value)) != len(value):
        raise ValueError("devices lists a netdev more than once")
    return value


def ipv4(value: Any) -> ipaddress.IPv4Address:
    """An ``ipaddress.IPv4Address`` from its text (pydantic's lax IPv4Address)."""
    if isinstance(value, ipaddress.IPv4Address):
        return value
    try:
        return ipaddress.IPv4Address(value)
    except ValueError:
        raise ValueError("Input is not a valid IPv4 address") from None


def mac(value: str) -> str:
    if not _MAC.fullmatch(value):
        raise ValueError(f"mac {shown(value)} is not a MAC address like 02:00:00:00:00:01")
    return value.lower()


def ipv4_text(value: str) -> str:
    try:
        iface = ipaddress.ip_interface(value)
    except ValueError:
        raise ValueError(f"ip {shown(value)} is not an IPv4 address") from None
    if iface.version != 4:
        raise ValueError(f"ip {shown(value)} is not an IPv4 address")
    return str(iface.ip)
