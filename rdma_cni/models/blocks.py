"""Strict models of the annotation blocks that are ours (pydantic, loaded lazily)."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from rdma_cni.errors import ConfigError, shown

_IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")
RESERVED_IFNAMES = frozenset((".", "..", "lo", "eth0"))
_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")


def check_ifname(value: str) -> str:
    if not _IFNAME.fullmatch(value) or value in RESERVED_IFNAMES:
        raise ValueError(
            f"interface name {shown(value)} is invalid: 1-15 characters of [A-Za-z0-9_.-], "
            "not '.', '..', 'lo' or 'eth0'"
        )
    return value


def _check_mac(value: str) -> str:
    if not _MAC.fullmatch(value):
        raise ValueError(f"mac {shown(value)} is not a MAC address like 02:00:00:00:00:01")
    return value.lower()


def _check_ip(value: str) -> str:
    try:
        iface = ipaddress.ip_interface(value)
    except ValueError:
        raise ValueError(f"ip {shown(value)} is not an IPv4 address") from None
    if iface.version != 4:
        raise ValueError(f"ip {shown(value)} is not an IPv4 address")
    return str(iface.ip)


IfName = Annotated[str, AfterValidator(check_ifname)]
Mac = Annotated[str, AfterValidator(_check_mac)]
IPv4Text = Annotated[str, AfterValidator(_check_ip)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class CniConfRef(_Strict):
    name: str


class DeviceConf(_Strict):
    ifName: IfName | None = None
    mac: Mac | None = None
    ips: list[IPv4Text] | None = None


class Block(_Strict):
    name: str | None = None
    namespace: str | None = None
    cniConf: CniConfRef
    deviceConf: DeviceConf | None = None


def validate_blocks(raw: list[tuple[int, Any]]) -> list[tuple[int, Block]]:
    out = []
    for pos, block in raw:
        try:
            out.append((pos, Block.model_validate(block)))
        except ValidationError as exc:
            raise ConfigError(
                f"invalid pod annotation k8s.volcengine.com/pod-networks: block {pos}: "
                f"{explain(exc)}"
            ) from None
    return out


_PY_TYPE = re.compile(r" or instance of \w+")
_QUOTED = re.compile(r"'([^'\\]*)'")


def explain(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(x) for x in err["loc"])
        msg = _PY_TYPE.sub("", err["msg"].removeprefix("Value error, "))
        msg = _QUOTED.sub(r'"\1"', msg)  # pydantic quotes choices Python-style
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)
