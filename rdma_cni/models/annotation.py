"""The pod annotation ``k8s.volcengine.com/pod-networks``: a JSON list of blocks.

This module is the cheap first pass (stdlib only): it finds the annotation in
``runtimeConfig``, checks the list shape and picks the blocks that are ours
(``cniConf.name == cniConfName``). Other blocks stay opaque. Our blocks are then
validated strictly by :mod:`rdma_cni.models.blocks` (pydantic), which only a pod
that asks for RDMA interfaces pays for.
"""

from __future__ import annotations

from typing import Any

from rdma_cni import jsondoc
from rdma_cni.errors import ConfigError, TooManyInterfaces, shown

ANNOTATION = "k8s.volcengine.com/pod-networks"
CAPABILITY = "io.kubernetes.cri.pod-annotations"
MAX_ANNOTATION_BYTES = 64 * 1024
MAX_BLOCKS = 256


def pod_annotations(conf: dict[str, Any]) -> dict[str, Any]:
    runtime = conf.get("runtimeConfig")
    if runtime is None:
        return {}
    if not isinstance(runtime, dict):
        raise ConfigError("invalid runtimeConfig: expected an object")
    annotations = runtime.get(CAPABILITY)
    if annotations is None:
        return {}
    if not isinstance(annotations, dict):
        raise ConfigError(f"invalid runtimeConfig[\"{CAPABILITY}\"]: expected an object")
    return annotations


def parse_blocks(text: object) -> list[Any]:
    where = f"pod annotation {ANNOTATION}"
    if not isinstance(text, str):
        raise ConfigError(f"invalid {where}: expected a JSON string, got {type(text).__name__}")
    try:
        blocks: list[Any] = jsondoc.decode(text, MAX_ANNOTATION_BYTES, list,
                                           "expected a JSON list of blocks")
    except jsondoc.JsonRefused as e:
        raise ConfigError(f"invalid {where}: {e}") from None
    if len(blocks) > MAX_BLOCKS:
        raise ConfigError(f"invalid {where}: {len(blocks)} blocks, at most {MAX_BLOCKS} allowed")
    for pos, block in enumerate(blocks):
        _check_block_shape(where, pos, block)
    return blocks


def _check_block_shape(where: str, pos: int, block: object) -> None:
    if not isinstance(block, dict):
        raise ConfigError(f"invalid {where}: block {pos} is not an object")
    cni_conf = block.get("cniConf")
    if not isinstance(cni_conf, dict) or not isinstance(cni_conf.get("name"), str):
        raise ConfigError(f"invalid {where}: block {pos} has no cniConf.name string")


def our_blocks(conf: dict[str, Any], conf_name: str, max_interfaces: int) -> list[tuple[int, Any]]:
    """Return (position in the whole list, block) for every block that is ours."""
    annotations = pod_annotations(conf)
    if ANNOTATION not in annotations:
        return []
    blocks = parse_blocks(annotations[ANNOTATION])
    ours = [(p, b) for p, b in enumerate(blocks) if b["cniConf"]["name"] == conf_name]
    if len(ours) > max_interfaces:
        raise TooManyInterfaces(
            f"pod annotation {ANNOTATION} asks for {len(ours)} interfaces of network "
            f"{shown(conf_name)}, at most {max_interfaces} allowed (maxInterfaces)"
        )
    return ours

