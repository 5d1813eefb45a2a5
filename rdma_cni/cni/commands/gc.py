"""GC: release what ``cni.dev/valid-attachments`` no longer names (this network only).

The list is required: a GC that names no list (neither ``cni.dev/valid-attachments`` nor
``cni.dev/attachments``, the name the published text of spec 1.1.0 gave it, which libcni
sends too since v1.2.3) is refused (7), not read as "nothing is valid": that would tear
down every pod of the network. As the spec asks, GC goes on past an attachment it cannot
release and reports them all at the end (11 when each only has to wait, else 5)."""

from __future__ import annotations

import logging
from typing import Any

from rdma_cni.cni.commands.delete import data_dir, release
from rdma_cni.cni.request import Request
from rdma_cni.errors import CniError, ConfigError, IOFailure, TryAgain, shown
from rdma_cni.node.origin import node_identity, recorded_node, same_node
from rdma_cni.store.core import Store
from rdma_cni.vocab.attachment import AttachmentKey

log = logging.getLogger("rdma_cni")
VALID = "cni.dev/valid-attachments"
#: the list's name in the published text of spec 1.1.0 (libcni sends both)
VALID_AS_PUBLISHED = "cni.dev/attachments"


def valid_attachments(conf: dict[str, Any]) -> set[tuple[str, str]]:
    """The (containerID, ifname) pairs either name of the list holds."""
    names = [name for name in (VALID, VALID_AS_PUBLISHED) if name in conf]
    if not names:
        raise ConfigError(f"GC needs {VALID}, the attachments still valid: without it "
                          "nothing is collected")
    out = set()
    for name in names:
        raw = conf[name]
        if not isinstance(raw, list):
            raise ConfigError(f"invalid {name}: expected a list")
        for item in raw:
            if not isinstance(item, dict) or not isinstance(item.get("containerID"), str) or \
                    not isinstance(item.get("ifname"), str):
                raise ConfigError(f"invalid {name}: entries need containerID and ifname strings")
            out.add((item["containerID"], item["ifname"]))
    return out


def cmd_gc(req: Request) -> None:
    valid = valid_attachments(req.conf)
    store = Store(data_dir(req))
    left: list[tuple[AttachmentKey, CniError]] = []
    for key in sorted(store.owners()):
        if key.network != req.network or (key.container_id, key.ifname) in valid or \
                not _this_instance(store, key, req.instance):
            continue
        try:
            failed = collect(store, key)
        except OSError as exc:  # the store: go on with the rest, as the spec asks
            failed = IOFailure(f"{type(exc).__name__}: {exc.strerror or exc}")
            log.warning("GC of %s/%s left for later: %s", key.network, key.container_id,
                        failed.msg)
        if failed is not None:
            left.append((key, failed))
    if left:
        what = "; ".join(f"{shown(k.container_id)} ({shown(k.ifname)}): {e.msg}" for k, e in left)
        msg = f"GC left {len(left)} attachment(s) of this network for later: {what}"
        raise TryAgain(msg) if all(isinstance(e, TryAgain) for _, e in left) else IOFailure(msg)


def _this_instance(store: Store, key: AttachmentKey, instance: str) -> bool:
    """``key`` is an attachment of the entry ``instance`` names, or one release 0.1.0
    recorded (not keyed by cniConfName: any entry of the network may have made it, and
    any one may collect it once the network no longer lists it)."""
    if key.instance == instance:
        return True
    if key.instance:
        return False
    state = store.get_state(key)
    return state is not None and state.legacy


def collect(store: Store, key: AttachmentKey, names: set[str] | None = None
            ) -> CniError | None:
    """Release ``key`` (if this node wrote it: ``names``, what the node may be called,
    default its identity); what kept it, if anything (logged)."""
    state = store.get_state(key)
    writer = recorded_node(state) if state is not None else None
    if not same_node(writer, names or {node_identity()}):
        log.warning("GC left %s/%s alone: its state was written by node %s, not this one "
                    "(is the data dir shared between nodes?)", key.network, key.container_id,
                    writer)
        return None
    try:
        if state is None:
            with store.lock():
                store.purge(key)
        else:
            release(store, state.netns, state, key)
        log.info("GC released %s/%s", key.network, key.container_id)
    except CniError as exc:
        log.warning("GC of %s/%s left for later: %s", key.network, key.container_id, exc.msg)
        return exc
    return None
