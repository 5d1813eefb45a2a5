"""bench/ab.py, an A/B of a variant of the in-process ADD in alternate rounds, runs end to
end: the variant reaches the B rounds only (a variant that spins in the ADD makes B and
only B slower), every pause is reported for both sides, nothing is left behind, and a
variant it cannot use is refused in one line before anything is made."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.netns import named

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
TOOL = str(REPO / "bench" / "ab.py")
NULL = "def apply():\n    pass\n\n\ndef revert():\n    pass\n"
#: B's ADDs spin 8 ms of CPU in ``origin_of`` (called once per ADD); revert undoes it
SPIN = """
import time
from rdma_cni.cni.commands import add

real = add.origin_of


def spinning(netns, fd=None):
    end = time.thread_time() + 0.008
    while time.thread_time() < end:
        pass
    return real(netns, fd)


def apply():
    add.origin_of = spinning


def revert():
    add.origin_of = real
"""


def _run(tmp_path: Path, variant: str, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                             dict | None]:
    path = tmp_path / "variant.py"
    path.write_text(variant)
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, TOOL, str(path), *args, "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    return proc, json.loads(out.read_text()) if out.exists() else None


def test_every_pause_is_reported_for_both_sides_and_nothing_is_left(tmp_path: Path) -> None:
    before = named("rab")
    proc, report = _run(tmp_path, NULL, "--rounds", "2", "--pauses", "0,3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("one-interface ADD in-process, A (as is) and B ("), \
        proc.stdout
    assert report is not None and sorted(report["pause_ms"]) == ["0", "3"], report
    for row in report["pause_ms"].values():
        assert row["A"]["adds"] == row["B"]["adds"] == 2, row
        assert row["A"]["cpu_ms"] > 0 and row["B"]["cpu_ms"] > 0 and row["b_over_a"] > 0, row
    assert named("rab") == before


def test_the_variant_reaches_the_b_rounds_only(tmp_path: Path) -> None:
    proc, report = _run(tmp_path, SPIN, "--rounds", "3", "--pauses", "0")
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    row = report["pause_ms"]["0"]
    # B's ADDs carry the 8 ms spin, A's none of it
    assert row["B"]["cpu_ms"] - row["A"]["cpu_ms"] > 6, row
    assert row["A"]["q3_ms"] < row["B"]["q1_ms"], row


@pytest.mark.parametrize(("variant", "args", "why"), [
    ("x = 1\n", [], "defines no apply() and revert()"),
    ("def apply(:\n", [], "does not load: SyntaxError"),
    ("raise ValueError('two\\nlines')\n", [], "does not load: ValueError: two lines"),
    (NULL, ["--rounds", "0"], "--rounds >= 1"),
    (NULL, ["--pauses", "5,-1"], "--pauses takes ms >= 0"),
])
def test_a_variant_it_cannot_use_is_refused_in_one_line(
        tmp_path: Path, variant: str, args: list[str], why: str) -> None:
    before = named("rab")
    proc, report = _run(tmp_path, variant, *args)
    assert proc.returncode == 2 and report is None
    assert proc.stdout == ""
    assert proc.stderr.startswith("ab: ") and why in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert named("rab") == before
