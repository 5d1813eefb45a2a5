"""The plugin's log lines and file (no root): every record one line whatever its text,
a traceback indented below it, the file private whatever the umask."""

from __future__ import annotations

import io
import logging
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdma_cni import logsetup
from rdma_cni.errors import escaped


@pytest.fixture
def logger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[logging.Logger]:
    """The plugin's logger writing to ``p.log`` and to ``logger.stderr_text``."""
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    saved = os.umask(0)
    try:
        logsetup.setup({"logFile": str(tmp_path / "p.log"), "logLevel": "debug"})
    finally:
        os.umask(saved)
    log = logging.getLogger("rdma_cni")
    log.stderr_text = stderr.getvalue  # type: ignore[attr-defined]
    yield log
    for h in list(log.handlers):
        h.close()
        log.removeHandler(h)


def test_escaped_shows_every_line_breaker() -> None:
    assert escaped("a\nb\r\x1b[2J\x7f\x85\u2028\udcff ok é") == \
        "a\\x0ab\\x0d\\x1b[2J\\x7f\\x85\\u2028\\udcff ok é"


def test_a_record_is_one_line_and_the_file_private(logger: logging.Logger,
                                                   tmp_path: Path) -> None:
    logger.warning("key %s", "x\n2026-01-01 00:00:00,000 1 INFO forged\r")
    try:
        raise ValueError("boom\n2026-01-01 00:00:00,000 1 INFO forged too")
    except ValueError:
        logger.exception("failed")
    text = (tmp_path / "p.log").read_text()
    lines = text.splitlines()
    assert lines[0].endswith("WARNING key x\\x0a2026-01-01 00:00:00,000 1 INFO forged\\x0d")
    assert lines[1].endswith("ERROR failed")
    assert all(line.startswith("    ") for line in lines[2:]) and len(lines) > 3
    assert "boom\\x0a" not in text  # a traceback's own lines stay lines, indented
    assert "    2026-01-01 00:00:00,000 1 INFO forged too" in lines
    err = logger.stderr_text()  # type: ignore[attr-defined]
    assert err.count("\n") == 2 and "Traceback" not in err, err  # stderr: a line a record
    assert stat.S_IMODE((tmp_path / "p.log").stat().st_mode) == 0o600
