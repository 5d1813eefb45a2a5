"""Which attachments the agent may release this pass (pure).

An attachment is released only after it was judged gone (:mod:`agentview`) on
:data:`PASSES` consecutive passes spread over at least one interval (a pending
record, an ADD possibly still running, over :data:`PENDING_GRACE` seconds; a ready
record ADD wrote less than :data:`PENDING_GRACE` seconds ago by the clock the passes
are timed by, not before it is that old: the runtime lists a sandbox only once its
``RunPodSandbox`` returns, after CNI ADD did, and answers NOT_FOUND until then).
State another node wrote is never touched. When, without the runtime to
confirm each one, more than :data:`MASS_FRACTION` of this node's attachments
(and more than :data:`MASS_MIN`) look gone at once, none is released: that
many pods vanishing at once is more likely a wrong view than the truth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rdma_cni.kube.agent.view import GONE, UNKNOWN, Evidence, Verdict, judge
from rdma_cni.node.origin import recorded_node, same_node
from rdma_cni.store.boot import BootMark
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.kinds import Status

if TYPE_CHECKING:
    from rdma_cni.store.state import AttachmentState

PASSES = 2
PENDING_GRACE = 300.0
MASS_FRACTION = 0.5
MASS_MIN = 2


@dataclass
class PassPlan:
    release: list[AttachmentKey] = field(default_factory=list)
    marks: dict[str, dict[str, float]] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)  # why the view looks wrong
    foreign: int = 0
    needs_confirm: bool = False  # each release must be confirmed by the runtime


def _ripe(mark: dict[str, float], state: AttachmentState, now: float,
          interval: float, boot: str) -> bool:
    waited = now - mark["first"]
    if mark["passes"] < PASSES or waited < 0.9 * interval:
        return False
    if state.status == Status.PENDING:
        return waited >= PENDING_GRACE
    return not young(state, now, boot)


def young(state: AttachmentState, now: float, boot: str) -> bool:
    """Whether ADD wrote ``state`` less than :data:`PENDING_GRACE` seconds before ``now``
    (``CLOCK_BOOTTIME`` of the boot ``boot``). A record of another boot is older than
    any sandbox of this one; a record without the stamp (earlier releases wrote none)
    is taken for old, as it was."""
    age = state.written.age(BootMark(boot, now)) if state.written is not None else None
    return age is not None and 0 <= age < PENDING_GRACE


def restored_marks(raw: object) -> dict[str, dict[str, float]]:
    """The marks of an earlier pass as its status file kept them: an entry that is not
    ``{"first": <number>, "passes": <number>}`` is dropped (the file is read back at
    every start: one bad entry must not stop every pass)."""
    out: dict[str, dict[str, float]] = {}
    for digest, mark in (raw.items() if isinstance(raw, dict) else ()):
        values = [mark.get(k) for k in ("first", "passes")] if isinstance(mark, dict) else []
        numbers = [float(v) for v in values if isinstance(v, int | float)
                   and not isinstance(v, bool)]
        if isinstance(digest, str) and len(numbers) == 2:
            out[digest] = {"first": numbers[0], "passes": numbers[1]}
    return out


def _label(state: AttachmentState) -> str:
    key = state.key
    pod = state.pod or "?"
    network, cid = (key.network, key.container_id) if key else (None, "None")
    return f"{network}/{cid[:12]} (pod {pod})"


def plan_pass(states: Sequence[AttachmentState], ev: Evidence, node: str | set[str],
              marks: dict[str, dict[str, float]], now: float, interval: float,
              judge_fn: Callable[[AttachmentState, Evidence], Verdict] = judge,
              boot: str = "") -> PassPlan:
    """The releases, the new marks and the report of one pass (``now``: the boot
    ``boot``'s CLOCK_BOOTTIME)."""
    plan = PassPlan(needs_confirm=ev.sandboxes is not None)
    names = {node} if isinstance(node, str) else set(node)
    own: list[AttachmentState] = []
    for st in states:
        if not same_node(recorded_node(st), names):
            plan.foreign += 1
            continue
        own.append(st)
    if plan.foreign:
        plan.reasons.append(f"{plan.foreign} state record(s) in the data dir were written by "
                            "another node (a data dir shared between nodes?): left alone")
    ripe: list[AttachmentKey] = []
    for st in own:
        key = st.key
        if key is None:  # the store sets it on every record it returns
            continue
        verdict = judge_fn(st, ev)
        if verdict.kind == UNKNOWN:
            plan.reasons.append(f"{_label(st)}: {verdict.why}")
        if verdict.kind != GONE:
            continue
        digest = key.digest()
        old = marks.get(digest) or {"first": now, "passes": 0.0}
        mark = {"first": old["first"], "passes": old["passes"] + 1}
        plan.marks[digest] = mark
        if _ripe(mark, st, now, interval, boot):
            ripe.append(key)
    bound = max(MASS_MIN, int(MASS_FRACTION * len(own)))
    if not plan.needs_confirm and len(ripe) > bound:
        plan.reasons.append(f"{len(ripe)} of {len(own)} attachments look gone at once and no "
                            "runtime confirms it: none released")
        return plan
    plan.release = sorted(ripe)
    return plan
