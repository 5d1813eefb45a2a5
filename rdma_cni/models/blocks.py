"""Strict models of the annotation blocks that are ours (pydantic-core, loaded lazily)."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from pydantic_core import core_schema as cs

from rdma_cni.errors import ConfigError, shown
from rdma_cni.models.core import Model, ValidationError, after, explain, field, model, validator
from rdma_cni.vocab.names import check_ifname

_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")


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


class CniConfRef(Model):
    name: str


class DeviceConf(Model):
    ifName: str | None
    mac: str | None
    ips: list[str] | None


class Block(Model):
    name: str | None
    namespace: str | None
    cniConf: CniConfRef
    deviceConf: DeviceConf | None


def _optional(schema: cs.CoreSchema) -> cs.ModelField:
    return field(cs.nullable_schema(schema), default=None)


# Every model is strict (no coercion) and forbids keys it does not know.
_STR = cs.str_schema()
_CNI_CONF = model(CniConfRef, {"name": field(_STR)}, extra="forbid", strict=True)
_DEVICE_CONF = model(DeviceConf, {
    "ifName": _optional(after(_STR, check_ifname)),
    "mac": _optional(after(_STR, _check_mac)),
    "ips": _optional(cs.list_schema(after(_STR, _check_ip))),
}, extra="forbid", strict=True)
_BLOCK = model(Block, {
    "name": _optional(_STR),
    "namespace": _optional(_STR),
    "cniConf": field(_CNI_CONF),
    "deviceConf": _optional(_DEVICE_CONF),
}, extra="forbid", strict=True)
parse_block = validator(_BLOCK, Block)


def validate_blocks(raw: list[tuple[int, Any]]) -> list[tuple[int, Block]]:
    out = []
    for pos, block in raw:
        try:
            out.append((pos, parse_block(block)))
        except ValidationError as exc:
            raise ConfigError(
                f"invalid pod annotation k8s.volcengine.com/pod-networks: block {pos}: "
                f"{explain(exc)}"
            ) from None
    return out
