"""bench/floor_steps.py, the per-step floor behind figure 7's kernel growth, runs end to
end on a small node (4 attachments, 2 rounds) and leaves nothing behind: a line per
step for the floor's netlink requests and store writes, the /proc/sys writes apart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.netns import named

pytestmark = pytest.mark.root
BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_floor_is_timed_step_by_step_and_nothing_is_left() -> None:
    before = named("rfs")
    proc = subprocess.run([sys.executable, str(BENCH / "floor_steps.py"), "--busy", "4",
                           "--rounds", "2", "--proc-sys", "--touch-proc-sys", "--sync"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("floor ADD steps, us: median of 2 rounds"), lines
    steps = {line.split(None, 3)[3]: [float(x) for x in line.split(None, 3)[:2]]
             for line in lines[1:]}
    for step in ("the floor ADD, whole", "netlink RTM_NEWLINK", "netlink RTM_SETLINK",
                 "store write_tmp", "(apart) the 4 settings under /proc/sys instead"):
        assert step in steps and all(us > 0 for us in steps[step]), (step, lines)
    assert named("rfs") == before
