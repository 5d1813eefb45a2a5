"""bench/dellink_split.py, behind bench/README.md's figures of a link deletion's two
parts, runs end to end (3 rounds): the kernel's notification comes before the request's
answer in the median, and its throwaway netns is gone afterwards."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.netns import named

pytestmark = pytest.mark.root
BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_both_parts_are_timed_and_nothing_is_left() -> None:
    before = named("rcdls")
    proc = subprocess.run([sys.executable, str(BENCH / "dellink_split.py"), "--rounds", "3"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    medians = dict(re.findall(r"^(\w+) \(.*?\): median (\d+) us", proc.stdout, re.M))
    assert set(medians) == {"unlisted", "acknowledged"}, proc.stdout
    assert 0 < int(medians["unlisted"]) < int(medians["acknowledged"]), proc.stdout
    assert named("rcdls") == before
