"""Which request owns an attachment while its ADD runs, and the proof of it.

An ADD owns the attachment from the pending state it saves (tagged with its own
request token) until it is replaced: a later ADD of the same attachment (the
runtime's retry, or the in-process fallback of a resident request whose client gave
up) or a DEL takes a pending record over by writing its own token into it, under the
store lock and the record's own lock (:mod:`rdma_cni.store.recordlock`), before it
undoes anything; a purge holds both too. :class:`AddOwner` is what the executor holds
around every step and every undo (:class:`rdma_cni.datapath.execute.Owner`): the
record's lock, and the check that the record is still this ADD's (the file locked is
the one this ADD wrote; or it still carries its token). An ADD that lost the
attachment, however late it resumes, changes nothing more; the steps of other pods'
ADDs go on meanwhile, as they hold no lock of the store's.

While it holds the record's lock after a step, the owner also records in the pending state
the index an exclusive NIC got in the pod (the identity DEL finds it by), so that a
crash right after the move leaves DEL a record that names the NIC as it is; and, once a
rollback has taken it back out of the pod, its identity on the host again (a rollback
that left it there under another name keeps the record for DEL). A step or undo that
raises is recorded as well: one that failed after it moved the NIC (a netlink error
right after) leaves the state for DEL naming the NIC where it is.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from rdma_cni.datapath import sublinks
from rdma_cni.datapath.context import Ctx
from rdma_cni.datapath.execute import Superseded
from rdma_cni.datapath.physical import HOST, with_index
from rdma_cni.store.core import Store
from rdma_cni.store.files import Identity
from rdma_cni.store.state import AttachmentState
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.kinds import LinkKind
from rdma_cni.vocab.plan import IfacePlan

log = logging.getLogger("rdma_cni")


def new_token() -> str:
    return os.urandom(8).hex()


def mine(store: Store, key: AttachmentKey, token: str) -> AttachmentState | None:
    state = store.get_state(key)
    return state if state is not None and state.request == token else None


def take_over(store: Store, key: AttachmentKey, token: str) -> AttachmentState | None:
    """Make ``key``'s record this request's (``token``), so that the request that wrote it
    changes nothing more (a step of it under way ends first); the record as taken over
    (None: none)."""
    with store.lock(), store.record_lock(key):
        state = store.get_state(key)
        if state is not None and state.request != token:
            state = state.with_(request=token)
            store.put_state(key, state)
        return state


class AddOwner:
    """The owner an ADD's executor holds (see the module doc)."""

    def __init__(self, store: Store, key: AttachmentKey, token: str,
                 pending: Identity | None, ctx: Ctx, state: AttachmentState) -> None:
        self.store, self.key, self.token = store, key, token
        self.pending, self.ctx, self.state = pending, ctx, state
        self.planned = state.interfaces  # as planned: each NIC by its identity on the host

    def still_mine(self, held: Identity | None) -> bool:
        """Under the record's lock (``held``: the identity of the record locked): it is the
        pending one this ADD saved, or carries its token."""
        if held is None:
            return False
        return held == self.pending or mine(self.store, self.key, self.token) is not None

    @contextmanager
    def hold(self) -> Iterator[None]:
        with self.store.record_lock(self.key) as held:
            if not self.still_mine(held):
                raise Superseded(f"ADD of {self.key.container_id}: the attachment is another "
                                 "request's now; this one changes nothing more")
            try:
                yield
            except BaseException:
                self._record_anyway()
                raise
            self._record_moves()

    def plans(self) -> list[IfacePlan]:
        """The plans with the index each exclusive NIC has in the pod; one a rollback took
        back out of the pod: as planned, or its index on the host where the rollback left
        it for DEL (:attr:`Ctx.home`)."""
        made, home = self.ctx.made, self.ctx.home
        return [p if p.kind != LinkKind.PHYSICAL else with_index(p, made[p.k]) if p.k in made
                else with_index(p, home[p.k], HOST) if p.k in home else p
                for p in self.planned]

    def final_plans(self) -> list[IfacePlan]:
        """:meth:`plans`, and each sub-link's index in the pod (what DEL finds it by,
        whatever the pod renamed or marked: :func:`rdma_cni.datapath.sublinks.ours`);
        for the ready record alone (no record write while the steps run)."""
        made = self.ctx.made
        return [sublinks.with_pod_index(p, made[p.k])
                if p.kind != LinkKind.PHYSICAL and p.k in made else p for p in self.plans()]

    def _record_anyway(self) -> None:
        """A step or undo that raised may have moved a NIC before it did (what
        :attr:`Ctx.made` and :attr:`Ctx.home` say): recorded as well, for the DEL a kept
        state is left to; a record that cannot be written is logged (the step's failure
        is what the request answers with)."""
        try:
            self._record_moves()
        except Exception as exc:
            log.error("ADD of %s: where its exclusive NICs are could not be recorded: %s",
                      self.key.container_id, exc)

    def _record_moves(self) -> None:
        plans = self.plans()
        if plans != list(self.state.interfaces):
            self.state = self.state.with_(interfaces=tuple(plans))
            self.pending = self.store.put_state(self.key, self.state)
