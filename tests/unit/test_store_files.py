"""rdma_cni.store.atomic and .files as install uses them: mode, suffix, directory sync, errors."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rdma_cni.errors import IOFailure
from rdma_cni.store import atomic, files
from rdma_cni.tools.install import write_atomic


def test_install_writes_through_the_store_helper_with_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "10-vpc.conflist"
    target.write_text("old")
    write_atomic(str(target), b'{"new": 1}\n', 0o640)
    assert target.read_bytes() == b'{"new": 1}\n'
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["10-vpc.conflist"]  # no temp file left


def test_temp_names_end_with_the_suffix_and_are_skipped_by_scans(tmp_path: Path) -> None:
    tmp = atomic.write_temp(str(tmp_path), "a.conflist", b"{}", suffix=".part")
    assert os.path.basename(tmp).startswith(atomic.TMP) and tmp.endswith("a.conflist.part")
    assert files.scan(str(tmp_path)) == []  # a live writer's file: young, ours, kept
    os.unlink(tmp)


def test_a_scan_skips_only_temp_files_and_removes_only_orphans(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names that sort next to the temp prefix stay; every temp file is looked at."""
    names = [".a", ".tmp", ".tmp-", ".tmq", ".tmp-1-x", ".tmp-2-y", "1.2.3.4", "zz", "-"]
    for name in names:
        (tmp_path / name).write_text("{}")
    looked: list[str] = []
    monkeypatch.setattr(files, "drop_if_orphan", lambda d, n: looked.append(n))
    assert files.scan(str(tmp_path)) == ["-", ".a", ".tmp", ".tmq", "1.2.3.4", "zz"]
    assert looked == [".tmp-", ".tmp-1-x", ".tmp-2-y"]
    assert files.scan(str(tmp_path / "missing")) == []


def test_a_write_into_a_missing_directory_is_an_io_failure(tmp_path: Path) -> None:
    with pytest.raises(IOFailure, match="failed to write"):
        write_atomic(str(tmp_path / "missing" / "x.conflist"), b"{}")
