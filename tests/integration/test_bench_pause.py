"""bench/pause.py, the in-process ADD after a pause of each length, runs end to end with
each of its ways of pausing (sleeping, spinning, another CPU loaded), reports every
length it was given and leaves nothing behind: no netns, and no spinning child."""

from __future__ import annotations

import json
import os
import pstats
import subprocess
import sys
from pathlib import Path

import pytest
from support.netns import named

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
TOOL = str(REPO / "bench" / "pause.py")


def _children_running(marker: str) -> list[str]:
    """The PIDs whose command line holds ``marker`` (the run's own report path)."""
    return [pid for pid in os.listdir("/proc") if pid.isdigit() and marker in _cmdline(pid)]


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.parametrize("how", [[], ["--spin"], ["--load-other-cpu"]])
def test_each_pause_is_reported_and_nothing_is_left(tmp_path: Path, how: list[str]) -> None:
    if "--load-other-cpu" in how and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU")
    before = named("rpz")
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, TOOL, "--rounds", "2", "--pauses", "0,3",
                           *how, "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("one-interface ADD in-process after a pause ("), proc.stdout
    report = json.loads(out.read_text())
    assert report["spin"] == ("--spin" in how)
    assert report["load_other_cpu"] == ("--load-other-cpu" in how)
    rows = report["pause_ms"]
    assert sorted(rows) == ["0", "3"], rows
    for row in rows.values():
        assert row["adds"] == 2 and row["cpu_ms"] > 0 and row["wall_ms"] > 0, row
    assert rows["0"]["cpu_ratio"] == 1.0
    assert named("rpz") == before
    assert _children_running(str(out)) == []


def test_the_adds_after_each_pause_are_profiled_apart(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, TOOL, "--rounds", "2", "--pauses", "0,3",
                           "--profile", str(tmp_path / "p")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for pause in ("0", "3"):
        stats = pstats.Stats(str(tmp_path / f"p-{pause}.prof")).stats  # type: ignore[attr-defined]
        runs = [v[1] for k, v in stats.items() if k[2] == "run" and k[0].endswith("dispatch.py")]
        assert runs == [2], runs  # the two counted ADDs, not the warm-up round's


@pytest.mark.parametrize("bad", [["--pauses", "x"], ["--pauses", "-1"], ["--rounds", "0"]])
def test_bad_arguments_get_one_line(bad: list[str]) -> None:
    proc = subprocess.run([sys.executable, TOOL, *bad], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("pause: "), proc.stderr
    assert named("rpz") == []
