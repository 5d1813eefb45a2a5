"""Routing-table choice for a pod's RDMA interfaces (pure).

Each interface gets its own table with a rule ``from <ip>/32 lookup <table>``. The
tables are per pod netns, and several RDMA networks (several rdma-cni entries of
one conflist) attach to the same pod: the k-th interface takes the k-th table
from ``tableBase`` that nothing in the pod uses yet (no rule looks it up, no route
is in it), so a second network never adds its fabric route to the first one's
table (where ``EEXIST`` dropped it, and the first network's DEL took it away). The
choice is saved in the state record; DEL and CHECK use the saved table.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from rdma_cni.errors import ConfigError
from rdma_cni.records import replace
from rdma_cni.vocab.plan import IfacePlan

#: tables the kernel reserves (unspec, compat, default, main, local)
RESERVED = frozenset({0, 252, 253, 254, 255})
MAX_TABLE = (1 << 32) - 1


def choose_tables(plans: Sequence[IfacePlan], base: int, ruled: Collection[int],
                  has_routes: Callable[[int], bool]) -> list[IfacePlan]:
    """``plans`` with ``table`` set to the free tables from ``base`` on, in order.

    ``ruled``: tables some rule of the pod looks up; ``has_routes(t)``: table ``t``
    holds a route in the pod.
    """
    out: list[IfacePlan] = []
    table = base
    for p in plans:
        while table in RESERVED or table in ruled or has_routes(table):
            table += 1
            if table > MAX_TABLE:
                raise ConfigError(f"no free routing table from routing.tableBase {base} up")
        out.append(p if p.table == table else replace(p, table=table))
        table += 1
    return out
