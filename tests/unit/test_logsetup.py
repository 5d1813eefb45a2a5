"""The plugin's log lines and file (no root): every record one line whatever its text,
a traceback indented below it, the file private whatever the umask."""

from __future__ import annotations

import io
import logging
import os
import stat
import sys
import time
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


def test_escaped_shows_what_reorders_or_hides_a_line() -> None:
    """A pod name with a right-to-left override shows the rest of a line reversed in a
    terminal (`rdma-cni ls`, a log viewer); zero-width characters hide text."""
    assert escaped("pod\u202eevil\u2066x\u2069\u200by\u061c\ufeff é ü") == \
        "pod\\u202eevil\\u2066x\\u2069\\u200by\\u061c\\ufeff é ü"


def test_escaped_shows_every_format_character() -> None:
    """Unicode's Cf category (soft hyphen, tag characters, interlinear annotation...):
    invisible, so two names that differ by one look the same."""
    import sys
    import unicodedata

    fmt = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    assert fmt and [c for c in fmt if escaped(c) == c] == []
    assert escaped("pod\U000e0041\u00ad") == "pod\\U000e0041\\xad"


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


_WRITER = """
import logging, sys
from rdma_cni import logsetup
h = logsetup.SharedFile(sys.argv[1], max_bytes=int(sys.argv[3]), backups=10_000)
h.setFormatter(logging.Formatter("%(message)s"))
log = logging.getLogger("w"); log.addHandler(h); log.setLevel(logging.INFO)
for i in range(int(sys.argv[4])):
    log.info("writer %s line %06d %s", sys.argv[2], i, "x" * 80)
"""


def _lines(tmp_path: Path) -> list[str]:
    out: list[str] = []
    for f in sorted(tmp_path.glob("p.log*")):
        out += f.read_text().splitlines()
    return out


def _writers(tmp_path: Path, n: int, lines: int, max_bytes: int) -> list:  # type: ignore[type-arg]
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path / "p.log"), str(w),
                              str(max_bytes), str(lines)], env=env) for w in range(n)]


@pytest.mark.parametrize("rotator", ["the writers", "logrotate (rename) meanwhile"])
def test_many_processes_writing_through_rotations_lose_no_line(tmp_path: Path,
                                                               rotator: str) -> None:
    """8 processes write 1,500 lines each into one file that rotates every 64 KiB (about
    30 rotations while they write); every line is found once, whole, in the file or a
    rotated one. With Python's RotatingFileHandler the same run loses lines."""
    procs = _writers(tmp_path, 8, 1500, 64 * 1024 if rotator == "the writers" else 0)
    moved = 0
    while any(p.poll() is None for p in procs):
        if rotator != "the writers" and (tmp_path / "p.log").exists():
            os.rename(tmp_path / "p.log", tmp_path / f"p.log.r{moved:04d}")
            moved += 1
        time.sleep(0.005)
    assert all(p.wait() == 0 for p in procs)
    lines = _lines(tmp_path)
    want = {f"writer {w} line {i:06d} {'x' * 80}" for w in range(8) for i in range(1500)}
    assert len(lines) == len(want) and set(lines) == want, \
        f"{len(want - set(lines))} lines lost, {len(lines) - len(set(lines))} doubled"
    rotated = len(list(tmp_path.glob("p.log.*")))
    assert rotated >= 10, rotated  # it did rotate, many times, while they wrote


def test_rotation_keeps_the_configured_backups(tmp_path: Path) -> None:
    h = logsetup.SharedFile(str(tmp_path / "p.log"), max_bytes=1000, backups=2)
    h.setFormatter(logging.Formatter("%(message)s"))
    for i in range(100):
        h.emit(logging.makeLogRecord({"msg": f"line {i:03d} " + "y" * 40}))
    h.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.log", "p.log.1", "p.log.2"]
    assert all(p.stat().st_size <= 1000 for p in tmp_path.iterdir())
    assert (tmp_path / "p.log").read_text().splitlines()[-1].startswith("line 099")


def test_json_lines_are_one_object_a_record(tmp_path: Path) -> None:
    logsetup.setup({"logFile": str(tmp_path / "p.log"), "logFormat": "json"})
    log = logging.getLogger("rdma_cni")
    try:
        log.warning("pod %s", "evil\n{\"level\": \"error\"}")
        try:
            raise ValueError("boom\nline two")
        except ValueError:
            log.exception("failed")
    finally:
        for h in list(log.handlers):
            h.close()
            log.removeHandler(h)
    import json

    lines = (tmp_path / "p.log").read_text().splitlines()
    docs = [json.loads(line) for line in lines]
    assert len(docs) == 2
    assert docs[0]["level"] == "warning" and docs[0]["msg"] == "pod evil\n{\"level\": \"error\"}"
    assert set(docs[0]) == {"time", "pid", "level", "msg"} and docs[0]["time"].endswith("Z")
    assert docs[1]["level"] == "error" and "boom\nline two" in docs[1]["exc"]


def test_a_config_without_a_log_file_logs_to_the_test_seam_or_the_nodes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``RDMA_CNI_TEST_LOG_FILE`` (rdma_cni/testhooks.py) takes the place of the node's log
    for a config that names none; unset, the default is the node's."""
    seam = tmp_path / "seam.log"
    monkeypatch.setenv(logsetup.TEST_LOG_FILE, str(seam))
    assert logsetup.default_file() == str(seam)
    try:
        logsetup.setup({}, stderr_level=logging.CRITICAL)
        logging.getLogger("rdma_cni").warning("a config nobody could read")
    finally:
        for h in logging.getLogger("rdma_cni").handlers:
            h.close()
        logging.getLogger("rdma_cni").handlers.clear()
    assert "a config nobody could read" in seam.read_text()
    monkeypatch.delenv(logsetup.TEST_LOG_FILE)
    assert logsetup.default_file() == "/var/log/rdma-cni.log"
