"""What ``doctor`` (and install's conf dir edits) read of the node is read without
waiting, and what cannot be read is said as such:

- a FIFO (or a device) where doctor reads the kubelet's config, ``--config``, a CNI
  config or mountinfo, or where uninstall reads a conflist's backup, held it for ever (a
  plain ``open()`` waits for a writer); each now reads as no regular file, in the
  check's own line;
- the record of the DaemonSet's start that is no regular file, no JSON (``NaN`` too)
  or another schema was reported as absent ("nothing to compare"); it is unreadable.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.patience import within

from rdma_cni.errors import ConfigError
from rdma_cni.models.subconfig import read_json_object
from rdma_cni.tools import conflist, doctor, doctor_integrity
from rdma_cni.tools.doctor_files import check_restart
from rdma_cni.tools.doctor_integrity import netns_propagation
from rdma_cni.tools.doctor_kubelet import check_kubelet
from rdma_cni.vocab.modes import where

#: how long a reader may take before the test calls it blocked
PATIENCE = 10
TOPOLOGY_MODE = where(lambda t: t.topology_policy)[0].value
OURS = {"type": "rdma-cni", "mode": "shared"}


@pytest.fixture(autouse=True)
def never_blocked() -> Iterator[None]:
    """Fail a reader blocked on a FIFO's open instead of hanging."""
    with within(PATIENCE):
        yield


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("what", ["fifo", "device"])
def test_a_fifo_or_device_as_the_kubelet_config_is_said_at_once(tmp_path: Path,
                                                               what: str) -> None:
    path = str(_fifo(tmp_path / "config.yaml")) if what == "fifo" else "/dev/null"
    check = check_kubelet(TOPOLOGY_MODE, path)
    named = "a FIFO" if what == "fifo" else "a device"
    assert (check.status, check.detail) == (
        "warn", f"cannot read kubelet config {path}: {named}, not a regular file")


def test_a_kubelet_config_that_is_no_text_is_said_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"\xff\xfe topologyManagerPolicy: best-effort\n")
    check = check_kubelet(TOPOLOGY_MODE, str(path))
    assert check.status == "warn" and "cannot read kubelet config" in check.detail


def test_doctor_given_a_fifo_as_its_config_fails_on_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = _fifo(tmp_path / "config.json")
    assert doctor.main(["--config", str(fifo)]) == 1
    assert capsys.readouterr().err == (f"rdma-cni doctor: failed to read config {fifo}: "
                                       "a FIFO, not a regular file\n")


def test_a_cni_config_that_is_a_fifo_reads_as_no_config(tmp_path: Path) -> None:
    """What the conflist check, the device plugin's chain check, load_config and
    install's comparison with a backup read a CNI config with: a FIFO put in place of
    the file they chose is refused at once."""
    fifo = _fifo(tmp_path / "10-primary.conflist")
    with pytest.raises(ConfigError, match=f"^failed to read config {re.escape(str(fifo))}: "
                                          "a FIFO, not a regular file$"):
        read_json_object(str(fifo))
    assert doctor_integrity._entries(str(fifo)) == []


def test_a_fifo_as_mountinfo_is_said_at_once(tmp_path: Path) -> None:
    (tmp_path / "netns").mkdir()
    fifo = _fifo(tmp_path / "mountinfo")
    assert netns_propagation(str(tmp_path / "netns"), str(fifo)) == (
        "warn", f"cannot read {fifo}: a FIFO, not a regular file", "")


def test_uninstall_passes_a_fifo_as_a_conflist_backup(tmp_path: Path) -> None:
    conf = tmp_path / "net.d"
    conf.mkdir()
    doc = {"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "primary"}, OURS]}
    (conf / "10-net.conflist").write_text(json.dumps(doc))
    backup = _fifo(conf / ("10-net.conflist" + conflist.BACKUP_SUFFIX))
    assert conflist.remove_entries(str(conf)) == [str(conf / "10-net.conflist")]
    assert not backup.exists() and not backup.is_fifo()  # named ours: removed, never read
    assert json.loads((conf / "10-net.conflist").read_text())["plugins"] == [
        {"type": "primary"}]


RECORDS = {
    "fifo": (None, "a FIFO, not a regular file"),
    "directory": (None, "a directory, not a regular file"),
    "not JSON": (b"{", "not valid JSON"),
    "NaN": (b'{"schema": 1, "interval": NaN, "checked": 1, "stale": []}',
            "NaN is not a JSON number"),
    "infinite": (b'{"schema": 1, "interval": 30, "checked": 1e999, "stale": []}',
                 "out of range"),
    "no object": (b"[]", "not a JSON object"),
    "another schema": (b'{"schema": 2, "stale": []}', "schema 2, not 1"),
}


@pytest.mark.parametrize("what", sorted(RECORDS))
def test_a_record_that_is_no_record_is_unreadable_not_absent(tmp_path: Path,
                                                             what: str) -> None:
    path = tmp_path / "config-source.json"
    data, why = RECORDS[what]
    if what == "fifo":
        os.mkfifo(path)
    elif what == "directory":
        path.mkdir()
    else:
        path.write_bytes(data or b"")
    check = check_restart(str(path), 100.0)
    assert check.status == "warn"
    assert check.detail.startswith(f"unknown: the record of the DaemonSet's start {path} is "
                                   "unreadable: ")
    assert why in check.detail and "absent" not in check.detail
    assert "kubectl rollout restart" in check.fix


def test_a_missing_record_is_still_absent(tmp_path: Path) -> None:
    check = check_restart(str(tmp_path / "config-source.json"), 100.0)
    assert check.status == "ok" and "absent" in check.detail
