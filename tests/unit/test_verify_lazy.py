"""pyverbs is imported only by `rdma-cni verify` when it runs its queue pairs: importing
the subcommand, asking its --help, or the CNI path never loads it. No root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import contextlib, io, sys
import rdma_cni.cli, rdma_cni.tools.verify as v, rdma_cni.cni.dispatch
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    v.main(["--help"])
print(sorted(m for m in sys.modules if m.split(".")[0] == "pyverbs"))
"""


def test_verify_loads_pyverbs_only_when_it_runs() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env=env, check=True, cwd=REPO).stdout
    assert out.strip() == "[]", out
