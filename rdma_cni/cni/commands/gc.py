"""GC: release what ``cni.dev/valid-attachments`` no longer names (this network only)."""

from __future__ import annotations

import logging
from typing import Any

from rdma_cni.cni.commands.delete import data_dir, release
from rdma_cni.cni.request import Request
from rdma_cni.errors import CniError, ConfigError
from rdma_cni.node.origin import node_identity, recorded_node, same_node
from rdma_cni.store.core import Store
from rdma_cni.vocab.attachment import AttachmentKey

log = logging.getLogger("rdma_cni")
VALID = "cni.dev/valid-attachments"


def valid_attachments(conf: dict[str, Any]) -> set[tuple[str, str]]:
    raw = conf.get(VALID, [])
    if not isinstance(raw, list):
        raise ConfigError(f"invalid {VALID}: expected a list")
    out = set()
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("containerID"), str) or \
                not isinstance(item.get("ifname"), str):
            raise ConfigError(f"invalid {VALID}: entries need containerID and ifname strings")
        out.add((item["containerID"], item["ifname"]))
    return out


def cmd_gc(req: Request) -> None:
    valid = valid_attachments(req.conf)
    store = Store(data_dir(req))
    for key in sorted(store.owners()):
        if key.network != req.network or key.instance != req.instance or \
                (key.container_id, key.ifname) in valid:
            continue
        collect(store, key)


def collect(store: Store, key: AttachmentKey) -> None:
    state = store.get_state(key)
    writer = recorded_node(state) if state is not None else None
    if not same_node(writer, {node_identity()}):
        log.warning("GC left %s/%s alone: its state was written by node %s, not this one "
                    "(is the data dir shared between nodes?)", key.network, key.container_id,
                    writer)
        return
    try:
        if state is None:
            with store.lock():
                store.purge(key)
        else:
            release(store, state.netns, state, key)
        log.info("GC released %s/%s", key.network, key.container_id)
    except CniError as exc:
        log.warning("GC of %s/%s left for later: %s", key.network, key.container_id, exc.msg)
