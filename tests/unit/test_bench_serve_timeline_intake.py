"""bench/serve_timeline.py's share of the intake loops' CPU per request (one pod at a
time): each round of a process's intake loop counts for the request whose connection
was accepted last before the round ended, every process's for ``intake_cpu`` and the
taking process's for ``intake_cpu_own``; rounds before the first acceptance count for
none."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import serve_timeline


def test_each_round_counts_for_the_request_accepted_last_before_it_ended() -> None:
    first = {"pid": 10, "accepted": 1000, "start": 1100}
    second = {"pid": 11, "accepted": 5000, "start": 5100}
    unaccepted = {"pid": 10, "accepted": 0, "start": 6000}
    steps = [
        [11, 900, 7],     # before any acceptance: counted for none
        [10, 1000, 300],  # the first's acceptance (its frame read in the same round)
        [11, 1050, 200],  # the sibling, woken by the same connection
        [10, 4000, 40],   # the first's process, woken once it was answered
        [11, 5000, 250],  # the second's acceptance
        [10, 5200, 60],   # the other process, woken by the second's connection
        [11, 9000, 30],   # after the last acceptance: the last request's
    ]
    records = [second, unaccepted, first]
    serve_timeline.intake_shares(records, steps)
    assert (first["intake_cpu"], first["intake_cpu_own"]) == (540, 340)
    assert (second["intake_cpu"], second["intake_cpu_own"]) == (340, 280)
    assert "intake_cpu" not in unaccepted


def test_the_columns_are_medians_of_the_requests_shares_in_us() -> None:
    records = [{"cmd": "ADD", "accepted": 1, "start": 2, "end": 10, "cpu": 5, "locks": [],
                "intake_cpu": n * 1000, "intake_cpu_own": n * 500} for n in (1, 2, 9)]
    cols = serve_timeline.per_request(records)["ADD"]
    assert cols["intake CPU, every process"] == 2.0
    assert cols["intake CPU, the process that took it"] == 1.0
