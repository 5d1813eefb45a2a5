"""Fixtures and reporting of the hardening suites (issue 7).

- ``built_binary`` is the integration tier's (build once, run a private copy).
- Tests marked ``slow`` under tests/hardening/ that are *sized* (full 64x10 load)
  run only with ``RDMA_CNI_SLOW=1``; the fuzz tier always runs, bounded by
  ``RDMA_CNI_FUZZ_BUDGET`` seconds.
- At the end every suite's figures (cases, faults, rounds, duplicates, leaks,
  fuzz inputs) are printed in the terminal summary.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from harness import FIGURES  # noqa: E402

SIZED_SKIP = "full-size load test: set RDMA_CNI_SLOW=1 to run it"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("RDMA_CNI_SLOW") == "1":
        return
    for item in items:
        if item.get_closest_marker("sized") is not None and HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.skip(reason=SIZED_SKIP))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sized: full-size load test, needs RDMA_CNI_SLOW=1")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not FIGURES:
        return
    tr = terminalreporter
    tr.section("rdma-cni hardening figures")
    for suite in sorted(FIGURES):
        figures = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(FIGURES[suite].items()))
        tr.write_line(f"{suite}: {figures}")


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"
