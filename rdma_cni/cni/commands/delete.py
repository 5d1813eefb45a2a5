"""DEL: undo from the saved state only. Succeeds whenever nothing is left to
undo (netns gone, state gone, NIC gone, called twice, never added)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from rdma_cni.adapters.fsops import dev_ino
from rdma_cni.cni.request import Request
from rdma_cni.confdefaults import DEFAULTS
from rdma_cni.errors import CniError, ConfigError, escaped
from rdma_cni.log import LazyLogger
from rdma_cni.node.origin import recorded_netns
from rdma_cni.store.boot import BootMark
from rdma_cni.store.core import Store
from rdma_cni.store.state import AttachmentState
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.kinds import PENDING
from rdma_cni.vocab.modes import Mode

#: DEL keeps failing (code 11) for an exclusive NIC the kernel has not returned for
#: this long after the first such DEL; then it releases the attachment and logs it.
#: Timed by CLOCK_BOOTTIME within one boot (see :func:`_give_up`)
GIVE_UP = 600.0

if TYPE_CHECKING:
    from rdma_cni.datapath.session import Session

log = LazyLogger()


def data_dir(req: Request) -> str:
    value = req.conf.get("dataDir", DEFAULTS["dataDir"])
    if not isinstance(value, str) or not value.startswith("/") or "\x00" in value:
        raise ConfigError("invalid network configuration: dataDir must be an absolute path "
                          "without a NUL character")
    return value


def cmd_del(req: Request) -> None:
    try:
        directory = data_dir(req)
    except ConfigError as exc:
        # ADD refuses such a dataDir: nothing can be held there, and failing here would
        # stop the chain (the primary's DEL would never run)
        log.warning("DEL of %s: nothing to undo: %s", req.container_id, exc.msg)
        return
    store = Store(directory)
    # a record teardown cannot use reads as absent (moved aside)
    key, state = recorded(store, req.key)
    if state is None:
        if key.digest() in store.quarantined():
            salvage(store, req, key)
        elif key in store.owners():
            with store.lock():
                store.purge(key)
        return
    fd = req.netns_fd if req.netns and req.netns == state.netns else None
    release(store, req.netns or state.netns, state, key, fd)


def recorded(store: Store, key: AttachmentKey) -> tuple[AttachmentKey, AttachmentState | None]:
    """The attachment's record and the key it is under: ``key``'s, else the one release
    0.1.0 wrote (it did not key by cniConfName: :attr:`AttachmentKey.legacy`; a record
    of this release under that key is another network's)."""
    state = store.get_state(key)
    if state is None and key.legacy is not None:
        old = store.get_state(key.legacy)
        if old is not None and old.legacy:
            return key.legacy, old
    return key, state


def salvage(store: Store, req: Request, key: AttachmentKey) -> None:
    """DEL of a key whose state record is unreadable (see :mod:`rdma_cni.datapath.salvage`)."""
    from rdma_cni.datapath.salvage import rebuild

    priority = req.netconf.routing.rulePriority
    moves_nics = Mode.of(req.netconf.mode).traits.moves_nic

    def rebuilt(session: Session) -> AttachmentState:
        assert session.host is not None
        return rebuild(store, key, session.pod, session.host, req.netns, priority, moves_nics)

    _tear_down(store, key, req.netns, req.netns_fd, rebuilt)
    log.info("DEL of %s/%s released what an unreadable state record held", key.network,
             key.container_id)


def release(store: Store, netns_path: str, state: AttachmentState, key: AttachmentKey,
            fd: int | None = None) -> None:
    from rdma_cni.datapath.teardown import NicNotBack

    if state.status == PENDING:
        taken = _take_over(store, key)
        if taken is None:
            return  # released meanwhile
        state = taken
    try:
        with reached(state, netns_path, fd) as (path, pod_fd):
            _tear_down(store, key, path, pod_fd, lambda _: state)
    except NicNotBack as exc:
        if not _give_up(store, key, state, exc.msg):
            raise
    log.info("DEL of %s/%s released %d interface(s)", key.network, key.container_id,
             len(state.interfaces))


@contextlib.contextmanager
def reached(state: AttachmentState, netns_path: str, fd: int | None
            ) -> Iterator[tuple[str, int | None]]:
    """Where an undo of ``state`` finds the pod, as (path, descriptor): the request's
    netns when ADD made it there; else the netns ADD recorded, opened once and held while
    it is the very netns ADD recorded (a request that names another netns must not
    release what a live pod holds; a path unmounted and used again is never acted in);
    else none ("": the host alone). A descriptor opened here is closed after."""
    if netns_path == state.netns:
        yield netns_path, fd
        return
    own = _recorded_netns(state)
    if own is None:
        yield "", None
        return
    log.warning("%s names netns %s; the attachment is in %s: undone there",
                state.key.container_id if state.key else "the request", escaped(netns_path),
                escaped(state.netns))
    try:
        yield state.netns, own
    finally:
        os.close(own)


def _recorded_netns(state: AttachmentState) -> int | None:
    from rdma_cni.adapters.netns import NetnsGone, open_netns

    recorded = recorded_netns(state)
    if not state.netns or recorded is None:
        return None
    try:
        fd = open_netns(state.netns)
    except (NetnsGone, CniError):
        return None
    if dev_ino(fd) != recorded:
        os.close(fd)
        return None
    return fd


def undo_elsewhere(state: AttachmentState, digest: str, netns_path: str) -> None:
    """Undo ``state`` of a repeated ADD for ``netns_path`` where :func:`reached` finds it."""
    from rdma_cni.datapath.session import Session
    from rdma_cni.datapath.teardown import teardown

    with reached(state, netns_path, None) as (path, fd):
        session = Session(path, pod_required=False, fd=fd)
        try:
            teardown(session, state, digest)
        finally:
            session.close()


def _take_over(store: Store, key: AttachmentKey) -> AttachmentState | None:
    """A pending record may be an ADD's that still runs (a resident server that stalled):
    take it over first (see :mod:`rdma_cni.cni.commands.owner`), so that ADD changes
    nothing more while this undoes what the record names."""
    from rdma_cni.cni.commands.owner import new_token, take_over

    return take_over(store, key, new_token())


def _give_up(store: Store, key: AttachmentKey, state: AttachmentState, why: str) -> bool:
    """An exclusive NIC is not back yet: keep the state (marked with when that was first
    seen) so the runtime retries, or, :data:`GIVE_UP` seconds on, release the rest.

    The mark is this boot's ``CLOCK_BOOTTIME`` with the boot ID: a step of the wall clock
    (NTP) changes nothing. A mark of another boot, or the wall-clock number an earlier
    release wrote, starts the wait afresh (never sooner than a full wait)."""
    now = BootMark.now()
    mark = state.nic_pending_since
    waited = mark.age(now) if mark is not None else None
    if waited is None:
        store.put_state(key, state.with_(nic_pending_since=now))
        return False
    if waited < GIVE_UP:
        return False
    log.error("DEL of %s/%s gives up waiting after %.0f s and releases it: %s", key.network,
              key.container_id, waited, why)
    with store.lock():
        store.purge(key)
    return True


def _tear_down(store: Store, key: AttachmentKey, netns_path: str, fd: int | None,
               state_of: Callable[[Session], AttachmentState]) -> None:
    """Undo ``state_of(session)`` in the pod and on the host, then purge the key."""
    from rdma_cni.datapath.session import Session  # netlink only when there is something to undo
    from rdma_cni.log import get

    get()  # handlers for the teardown's loggers
    from rdma_cni.datapath.teardown import teardown

    session = Session(netns_path, pod_required=False, fd=fd)
    try:
        teardown(session, state_of(session), key.digest())
    finally:
        session.close()
    with store.lock():
        store.purge(key)
        store.forget_quarantined(key)
