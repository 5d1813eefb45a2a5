"""Strict models of the annotation blocks that are ours (pydantic-core, loaded lazily).

The fields are declared once, in rdma_cni/models/declared.py; the classes and the
schema come from rdma_cni/models/generated.py. The pod interface name rule is here.
"""

from __future__ import annotations

from typing import Any

from rdma_cni.errors import ConfigError
from rdma_cni.models import generated
from rdma_cni.models.core import ValidationError, explain, validator
from rdma_cni.models.generated import Block, CniConfRef, DeviceConf

__all__ = ["Block", "CniConfRef", "DeviceConf", "parse_block", "validate_blocks"]

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
