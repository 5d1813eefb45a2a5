"""bench/run.py end to end, in its quick form for figures 2 and 4 on the resident path: the
built plugin as `install` lays it out against Debian's Go plugins. Its record says how
figure 4's batch began and what built the measurer, figure 4 finds no duplicate address,
its table says the same, figures 2 and 4 have the kernel's floor of their command beside
them (figure 4's: a batch of as many pods), and the run leaves no netns and no temp dir
behind."""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.netns import named

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "bench" / "run.py"
BINARY = REPO / "dist" / "rdma-cni" / "rdma-cni"


def test_a_quick_run_of_figures_2_and_4_gated(tmp_path: Path) -> None:
    if not BINARY.exists():
        pytest.fail(f"{BINARY} is missing: ./scripts/build.sh builds it")
    before_ns, before_tmp = named("rcb"), set(glob.glob("/tmp/rdma-cni-bench.*"))
    out = tmp_path / "quick.json"
    proc = subprocess.run([sys.executable, str(RUN), "--quick", "--only", "s2,s4",
                           "--path", "resident", "--cycles", "0", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    # 1: a goal missed (figures 2 and 4 are not met on every machine); anything else fails
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["config"]["spawn"] == "gated" and record["config"]["collect"] == "after"
    if shutil.which("musl-gcc"):
        assert record["measurer"] == "musl-gcc"
    four = next(f for f in record["figures"] if f["id"] == "4" and f["path"] == "resident")
    assert four["duplicates"] == {"rdma_cni": 0, "go": 0}
    assert four["rdma_cni"]["median"] > 0 and four["go"]["median"] > 0
    floor = record["floor"]
    assert floor["batch"]["pods"] == record["config"]["pods"] == 8
    assert four["floor_ms"] == floor["batch"]["add_ms"] > 0
    two = next(f for f in record["figures"] if f["id"] == "2" and f["path"] == "resident")
    assert two["floor_ms"] == round(floor["add_del"]["add_ms"]
                                    + floor["static_true"]["wall_ms"], 3)
    table = out.with_suffix(".md").read_text()
    assert "Figure 4's batches: every exec started and held at a gate" in table
    assert named("rcb") == before_ns
    assert set(glob.glob("/tmp/rdma-cni-bench.*")) == before_tmp
