"""bench/phases.py, the in-process ADD step by step, runs end to end with the store on
this machine's disk and on a tmpfs of its own (as the report's file system says): every
step it names is timed inside the ADD, nested where it runs, and nothing is left behind
(no netns, no wrapper)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.netns import named

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "bench" / "phases.py"
sys.path.insert(0, str(REPO / "bench"))

import phases  # noqa: E402


@pytest.mark.root
@pytest.mark.parametrize("where", [[], ["--data-tmpfs"]])
def test_every_step_is_timed_inside_the_add_and_nothing_is_left(tmp_path: Path,
                                                               where: list[str]) -> None:
    before = named("rph")
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(TOOL), "--rounds", "2", "--pause", "1", *where,
                           "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("the in-process one-interface ADD step by step, "), proc.stdout
    report = json.loads(out.read_text())
    assert report["rounds"] == 2 and report["data_tmpfs"] == bool(where)
    assert report["data_fs"] == "tmpfs" if where else report["data_fs"], report["data_fs"]
    steps = {s["step"]: s for s in report["steps"]}
    assert report["steps"][0]["step"] == phases.ADD
    assert {label for _, _, label in phases.STEPS} <= set(steps), sorted(steps)
    total = report["add_wall_us"]
    for s in steps.values():
        assert s["start_us"] >= 0 and s["start_us"] + s["wall_us"] <= total * 1.001, s
    assert steps["cmd_add"]["depth"] == steps["the command"]["depth"] + 1
    inside = [s for s in steps.values() if s["depth"] == steps["cmd_add"]["depth"] + 1]
    assert sum(s["wall_us"] for s in inside) <= steps["cmd_add"]["wall_us"], inside
    assert steps["the executor's steps"]["depth"] == steps["apply"]["depth"] + 1
    assert named("rph") == before


def test_a_step_is_timed_by_its_own_wall_and_put_back_after() -> None:
    from rdma_cni.cni import dispatch

    real = dispatch._decode
    marks: list[phases.Mark] = []
    with phases.timed(marks):
        assert dispatch._decode is not real
    assert dispatch._decode is real

    def slow() -> None:
        time.sleep(0.02)
        raise ValueError("the step's own error")

    with pytest.raises(ValueError, match="own error"):
        phases._wrapper(slow, "slow", marks)()
    ((label, start, end),) = marks
    assert label == "slow" and end - start >= 20_000_000
