"""The executor: turns interface plans into steps and applies them through the
netlink port, undoing applied steps in reverse when one fails.

Rollback is data: each step knows its own undo; the executor keeps the list of
what was applied. The steps themselves live by job in :mod:`sublinks`,
:mod:`physical` and :mod:`podconfig`. An undo takes back only what its own
request made (the links in :attr:`Ctx.made`, by index in the pod's netns), never
what a name or our mark points at.

Every step and every undo runs under the caller's :class:`Owner` (ADD: the lock of
its state record, held while it checks that the attachment is still this request's): once
another request owns the attachment (a later ADD replaced it, a DEL took it) the
owner raises :class:`Superseded` and this request changes nothing more, not even
by a rollback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

from rdma_cni import testhooks
from rdma_cni.datapath import physical, podconfig, rdmadev, sublinks
from rdma_cni.datapath.context import Ctx, NetnsOps
from rdma_cni.errors import TryAgain
from rdma_cni.records import record
from rdma_cni.vocab.kinds import LinkKind
from rdma_cni.vocab.plan import IfacePlan

log = logging.getLogger("rdma_cni")
__all__ = ["Ctx", "NetnsOps", "Owner", "Step", "Superseded", "apply", "rollback", "steps_for"]


class Superseded(TryAgain):
    """The attachment is another request's now: this one may change nothing more."""


class Owner(Protocol):
    def hold(self) -> AbstractContextManager[object]:
        """Held around each step and each undo; raises :class:`Superseded` on entry when
        the attachment is no longer this request's."""


@record
class Step:
    name: str
    plan: IfacePlan
    do: Callable[[Ctx, IfacePlan], None]
    undo: Callable[[Ctx, IfacePlan], None] | None = None


def steps_for(plans: Sequence[IfacePlan]) -> list[Step]:
    steps: list[Step] = []
    for p in plans:
        steps.append(Step("check name", p, sublinks.check_name))
        if p.kind == LinkKind.PHYSICAL:
            steps.append(Step("move NIC in", p, physical.move_in, physical.move_back))
            if p.rdma_move:
                steps.append(Step("move RDMA device in", p, rdmadev.rdma_in,
                                  rdmadev.rdma_out))
        else:
            steps.append(Step(f"create {p.kind}", p, sublinks.create, sublinks.delete))
            steps.append(Step("rename", p, sublinks.rename))
        steps += [
            Step("sysctls", p, podconfig.sysctls),
            Step("addresses", p, podconfig.addresses),
            Step("up", p, podconfig.up),
            Step("routes", p, podconfig.routes),
            Step("rule", p, podconfig.rule, podconfig.unrule),
        ]
    return steps


def _held(owner: Owner | None) -> AbstractContextManager[object]:
    return owner.hold() if owner is not None else nullcontext()


def apply(ctx: Ctx, steps: Sequence[Step], owner: Owner | None = None) -> None:
    """Apply ``steps``; on a failure, roll back what was applied (while still the owner;
    :attr:`Ctx.undone_clean` says whether all of it was) and raise the failure."""
    applied: list[Step] = []
    at_step = testhooks.step_seams()  # inert unless a test seam is set
    try:
        for i, step in enumerate(steps):
            at_step(i)
            with _held(owner):
                step.do(ctx, step.plan)
                applied.append(step)  # undone even when the owner's record of it fails
        at_step(len(steps))
    except BaseException:
        # False already when a step's own undo of a half-made change left work for DEL
        ctx.undone_clean = rollback(ctx, applied, owner) and ctx.undone_clean
        raise


def rollback(ctx: Ctx, applied: Sequence[Step], owner: Owner | None = None) -> bool:
    """Undo ``applied`` in reverse; False when something could not be undone (or the
    attachment is another request's now, and its rollback is that request's)."""
    clean = True
    for step in reversed(applied):
        if step.undo is None:
            continue
        try:
            with _held(owner):
                step.undo(ctx, step.plan)
        except Superseded as exc:
            log.warning("rollback stopped: %s", exc.msg)
            return False
        except Exception as exc:  # best effort: the original error is what we report
            log.warning("rollback of %s for %s failed: %s", step.name, step.plan.name, exc)
            clean = False
    return clean
