"""Strict models of the annotation blocks that are ours (pydantic-core, loaded lazily).

The fields are declared once, in rdma_cni/models/declared.py; the classes and the
schema come from rdma_cni/models/generated.py. The pod interface name rule is here.
"""

from __future__ import annotations

import re
from typing import Any

from rdma_cni.errors import ConfigError, shown
from rdma_cni.models import generated
from rdma_cni.models.core import ValidationError, explain, validator
from rdma_cni.models.generated import Block, CniConfRef, DeviceConf

__all__ = ["RESERVED_IFNAMES", "Block", "CniConfRef", "DeviceConf", "check_ifname",
           "parse_block", "validate_blocks"]

_IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")
RESERVED_IFNAMES = frozenset((".", "..", "lo", "eth0"))


def check_ifname(value: str) -> str:
    if not _IFNAME.fullmatch(value) or value in RESERVED_IFNAMES:
        raise ValueError(
            f"interface name {shown(value)} is invalid: 1-15 characters of [A-Za-z0-9_.-], "
            "not '.', '..', 'lo' or 'eth0'"
        )
    return value


parse_block = validator(generated.BLOCK_SCHEMA, Block)


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
