"""A repeated ADD of an attachment that has a record: the same answer while its
interfaces are intact, else the record taken over and undone (where ADD made it) so that
the ADD starts afresh."""

from __future__ import annotations

import logging
from typing import Any

from rdma_cni.cni import result
from rdma_cni.cni.commands.delete import recorded, undo_elsewhere
from rdma_cni.cni.commands.owner import mine, take_over
from rdma_cni.cni.request import Request
from rdma_cni.datapath.intact import mismatch
from rdma_cni.datapath.session import Session
from rdma_cni.datapath.teardown import marker_of, teardown
from rdma_cni.errors import ConfigError, TryAgain, shown
from rdma_cni.store.core import Store
from rdma_cni.store.state import AttachmentState
from rdma_cni.vocab.kinds import READY

log = logging.getLogger("rdma_cni")


def repeat(req: Request, store: Store, session: Session, token: str
            ) -> dict[str, Any] | None:
    """A repeated ADD of the same attachment returns the same interfaces when intact;
    otherwise it takes the record over (the request that wrote it, maybe still running,
    changes nothing more), undoes it and drops it; a record of release 0.1.0 too."""
    key, state = recorded(store, req.key)
    if state is None:
        return None
    if state.status == READY and state.netns == req.netns and \
            _intact(session, state, key.digest()):
        not_twice(req, state)
        return result.append(req.prev_result, state.result or {})
    still_wanted(req)
    log.info("ADD of %s: replacing the earlier incomplete attachment", req.container_id)
    state = take_over(store, key, token)
    if state is None:
        return None
    if state.netns == req.netns:
        teardown(session, state, key.digest())
    else:  # not in this pod: where ADD made it, if that still is the netns it recorded
        undo_elsewhere(state, key.digest(), req.netns)
    with store.lock():
        if mine(store, key, token) is not None:
            store.purge(key)
    return None


def not_twice(req: Request, state: AttachmentState) -> None:
    """A repeated ADD gets the primary's result as prevResult, without our interfaces; when
    they are in it, an earlier rdma-cni entry of this conflist made them (same key)."""
    ours = _names_in(state.result, "")
    prev = _names_in(req.prev_result, req.netns)  # the primary's: any shape at all
    if ours & prev:
        name = state.conf_name or req.netconf.cniConfName
        raise ConfigError(
            f"invalid network configuration: another rdma-cni entry of this conflist already "
            f"made {', '.join(shown(n) for n in sorted(ours & prev))} with cniConfName "
            f"{shown(name)}: give each RDMA network its own cniConfName")


def _names_in(result: dict[str, Any] | None, sandbox: str) -> set[str]:
    """The names of a result's interfaces (those in ``sandbox`` when one is given)."""
    out = set()
    for i in (result or {}).get("interfaces") or []:
        if isinstance(i, dict) and isinstance(i.get("name"), str) and \
                (not sandbox or i.get("sandbox") == sandbox):
            out.add(i["name"])
    return out


def _intact(session: Session, state: AttachmentState, digest: str) -> bool:
    """Every interface of the record is in the pod as ADD made it: the device itself
    under its name and our mark (a pod could mark a link of its own), its addresses,
    rule and routes (:mod:`rdma_cni.datapath.intact`, as CHECK holds them)."""
    if session.pod is None or session.host is None:
        return False
    marker = marker_of(digest)
    for p in state.interfaces:
        wrong = mismatch(session, p, marker, state.rule_priority)
        if wrong is not None:
            log.info("ADD of an attachment that has a record: %s", wrong)
            return False
    return True


def still_wanted(req: Request) -> None:
    """Refuse to change anything for a client that gave up waiting (it runs the ADD itself)."""
    if req.abandoned is not None and req.abandoned():
        log.warning("ADD of %s abandoned by its client: nothing changed", req.container_id)
        raise TryAgain(f"ADD of {req.container_id} abandoned by its caller: nothing changed")
