"""bench/serve_timeline.py, serve's request path timed from inside it, runs end to end
through the built front (one pod at a time, and 3 pods at once) and leaves nothing
behind: every ADD and DEL is seen by serve with its CPU, its dispatch and its store
locks and the intake loops' CPU it caused, and the batches with the share of their wall
the lock was held and the CPUs idled."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.netns import named

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
FRONT = REPO / "dist" / "rdma-cni-host" / "rdma-cni-front"


@pytest.mark.parametrize("at_once", [0, 3])
def test_serve_requests_are_timed_from_inside_and_nothing_is_left(tmp_path: Path,
                                                                  at_once: int) -> None:
    if not FRONT.exists():
        pytest.fail(f"{FRONT} is missing: ./scripts/build.sh first")
    before = named("rtl")
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "serve_timeline.py"),
                           "--rounds", "2", "--at-once", str(at_once), "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("serve's request path, "), proc.stdout
    report = json.loads(out.read_text())
    pods = at_once or 1
    for cmd in ("ADD", "DEL"):
        cols = report["per_request_us"][cmd]
        assert cols["requests"] == 2 * pods, cols
        assert 0 < cols["dispatch CPU"] <= cols["request CPU"], cols
        assert 0 <= cols["request runnable, waiting for a CPU"] <= cols["request wall"], cols
        assert cols["store locks"] >= 1, cols
        assert any(k.startswith("lock held by ") for k in cols), cols
        if not at_once:  # the intake's rounds each request caused: its own process's at least
            own = cols["intake CPU, the process that took it"]
            assert 0 < own <= cols["intake CPU, every process"], cols
    if at_once:
        assert [b["cmd"] for b in report["batches"]] == ["ADD", "DEL"] * 2
        assert all(b["requests"] == at_once and 0 < b["lock_held_share"] < 1
                   and b["intake_cpu_per_request_us"] > 0
                   for b in report["batches"]), report["batches"]
        idle = [b["cpu_idle_share"] for b in report["batches"]]
        assert all(i is None or 0 <= i <= 1 for i in idle), idle
        if glob.glob("/sys/devices/system/cpu/cpu0/cpuidle/state0/time"):
            assert None not in idle, idle
    else:
        assert "batches" not in report
    assert named("rtl") == before


def test_a_pass_through_add_is_timed_to_its_answer(tmp_path: Path) -> None:
    """``--interfaces 0``: figure 3's pass-through ADD, which takes no store lock; the
    answer (what the caller waits for) is within the request thread's time."""
    if not FRONT.exists():
        pytest.fail(f"{FRONT} is missing: ./scripts/build.sh first")
    before = named("rtl")
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "serve_timeline.py"),
                           "--rounds", "2", "--interfaces", "0", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    cols = json.loads(out.read_text())["per_request_us"]["ADD"]
    assert cols["requests"] == 2 and cols["store locks"] == 0, cols
    assert 0 < cols["dispatch wall"] < cols["answer wall"] <= cols["request wall"], cols
    assert cols["log routing wall"] > 0, cols
    assert named("rtl") == before
