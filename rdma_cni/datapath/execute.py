"""The executor: turns interface plans into steps and applies them through the
netlink port, undoing applied steps in reverse when one fails.

Rollback is data: each step knows its own undo; the executor keeps the list of
what was applied. The steps themselves live by job in :mod:`sublinks`,
:mod:`physical` and :mod:`podconfig`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rdma_cni import testhooks
from rdma_cni.datapath import physical, podconfig, sublinks
from rdma_cni.datapath.context import Ctx, NetnsOps
from rdma_cni.datapath.plan import IfacePlan

log = logging.getLogger("rdma_cni")
__all__ = ["Ctx", "NetnsOps", "Step", "apply", "rollback", "steps_for"]


@dataclass(frozen=True)
class Step:
    name: str
    plan: IfacePlan
    do: Callable[[Ctx, IfacePlan], None]
    undo: Callable[[Ctx, IfacePlan], None] | None = None


def steps_for(plans: Sequence[IfacePlan]) -> list[Step]:
    steps: list[Step] = []
    for p in plans:
        steps.append(Step("check name", p, sublinks.check_name))
        if p.kind == "physical":
            steps.append(Step("move NIC in", p, physical.move_in, physical.move_out))
            if p.rdma_move:
                steps.append(Step("move RDMA device in", p, physical.rdma_in,
                                  physical.rdma_out))
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


def apply(ctx: Ctx, steps: Sequence[Step]) -> None:
    applied: list[Step] = []
    try:
        for i, step in enumerate(steps):
            testhooks.at_step(i)
            step.do(ctx, step.plan)
            applied.append(step)
        testhooks.at_step(len(steps))
    except BaseException:
        rollback(ctx, applied)
        raise


def rollback(ctx: Ctx, applied: Sequence[Step]) -> None:
    for step in reversed(applied):
        if step.undo is None:
            continue
        try:
            step.undo(ctx, step.plan)
        except Exception as exc:  # best effort: the original error is what we report
            log.warning("rollback of %s for %s failed: %s", step.name, step.plan.name, exc)
