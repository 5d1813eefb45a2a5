"""bench/ab.py variant: a sub-link's eight steps taken in three holds of its record's lock
(create, configure, rule) instead of one hold each; what the holds and their ownership
checks cost an ADD. (A failed ADD still undoes what it made: the undos are unchanged.)"""

from collections.abc import Callable, Sequence

from rdma_cni.cni.commands import add
from rdma_cni.datapath import execute, podconfig, sublinks
from rdma_cni.datapath.context import Ctx
from rdma_cni.vocab.kinds import LinkKind
from rdma_cni.vocab.plan import IfacePlan

_real = add.steps_for
Do = Callable[[Ctx, IfacePlan], None]


def _seq(*steps: Do) -> Do:
    def do(ctx: Ctx, p: IfacePlan) -> None:
        for step in steps:
            step(ctx, p)
    return do


def steps_for(plans: Sequence[IfacePlan]) -> list[execute.Step]:
    if any(p.kind == LinkKind.PHYSICAL for p in plans):
        return _real(plans)
    out: list[execute.Step] = []
    for p in plans:
        out += [
            execute.Step("create", p, _seq(sublinks.check_name, sublinks.create),
                         sublinks.delete),
            execute.Step("configure", p, _seq(sublinks.rename, podconfig.sysctls,
                                              podconfig.addresses, podconfig.up,
                                              podconfig.routes)),
            execute.Step("rule", p, podconfig.rule, podconfig.unrule),
        ]
    return out


def apply() -> None:
    add.steps_for = steps_for


def revert() -> None:
    add.steps_for = _real
