"""``doctor``'s result of one check and how the report prints (text or ``--json``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def render(checks: Sequence[Check]) -> str:
    lines = []
    for c in checks:
        lines.append(f"[{c.status.upper():4}] {c.name}: {c.detail}")
        if c.fix and c.status != "ok":
            lines.append(f"       fix: {c.fix}")
    return "\n".join(lines) + "\n"

