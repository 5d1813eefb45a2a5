"""DEL: undo from the saved state only. Succeeds whenever nothing is left to
undo (netns gone, state gone, NIC gone, called twice, never added)."""

from __future__ import annotations

from typing import Any

from ..attachment import AttachmentKey
from ..errors import ConfigError
from ..log import LazyLogger
from ..request import Request
from ..store import DEFAULT_DATA_DIR, Store

log = LazyLogger()


def data_dir(req: Request) -> str:
    value = req.conf.get("dataDir", DEFAULT_DATA_DIR)
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigError("invalid network configuration: dataDir must be an absolute path")
    return value


def cmd_del(req: Request) -> None:
    store = Store(data_dir(req))
    key = req.key
    state = store.get_state(key)
    if state is None:
        if key in store.owners():
            with store.lock():
                store.purge(key)
        return
    fd = req.netns_fd if req.netns and req.netns == state.get("netns") else None
    release(store, req.netns or str(state.get("netns") or ""), state, key, fd)


def release(store: Store, netns_path: str, state: dict[str, Any], key: AttachmentKey,
            fd: int | None = None) -> None:
    from ..log import get
    from ..session import Session  # netlink only when there is something to undo

    get()  # handlers for the teardown's loggers
    from ..teardown import teardown

    same = netns_path == state.get("netns")
    session = Session(netns_path if same else "", pod_required=False, fd=fd if same else None)
    try:
        teardown(session, state, key.digest())
    finally:
        session.close()
    with store.lock():
        store.purge(key)
    log.info("DEL of %s/%s released %d interface(s)", key.network, key.container_id,
             len(state.get("interfaces") or []))
