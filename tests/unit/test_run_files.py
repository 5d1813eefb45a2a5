"""The node's run files (/run/rdma-cni: the configuration record, the agent's and the
device plugin's status files; a container's heartbeats) are read without waiting: a
FIFO in one's place held ``rdma-cni ls``, ``doctor``, the agent's start and every scrape
of the exporter forever (a plain open() waits for a writer). Anything but a regular
file is refused: it reads as no file, and a subcommand says so on one line of stderr.
Every path here is the test's own (the readers take theirs as an argument)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.patience import within

from rdma_cni.kube.exporter.agent import AgentCollector
from rdma_cni.kube.exporter.configstate import ConfigCollector
from rdma_cni.store.run import agentstatus, configrecord, heartbeat, pluginstatus, runfile
from rdma_cni.tools import doctor_files, ls, probe

#: how long a reader may take before the test calls it blocked
PATIENCE = 5


@pytest.fixture(autouse=True)
def never_blocked() -> Iterator[None]:
    """Fail a reader blocked on a FIFO's open instead of hanging."""
    with within(PATIENCE):
        yield


@pytest.fixture(autouse=True)
def _said_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runfile, "_said", set())  # each test a process of its own


def _in_place(path: Path, what: str) -> Path:
    if what == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    return path


READERS: dict[str, Callable[[str], Any]] = {
    "agent status": agentstatus.read,
    "device plugin status": pluginstatus.read,
    "configuration record": configrecord.read,
    "configuration digest": configrecord.digest,
}


@pytest.mark.parametrize("what", ["fifo", "directory"])
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_run_file_that_is_no_regular_file_reads_as_none_at_once(
        tmp_path: Path, reader: str, what: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = _in_place(tmp_path / "status.json", what)
    assert READERS[reader](str(path)) is None
    assert READERS[reader](str(path)) is None
    kind = "a FIFO" if what == "fifo" else "a directory"
    assert capsys.readouterr().err == (f"rdma-cni: ignoring {path} is {kind}, "
                                       "not a regular file\n")  # once per path


def test_a_regular_file_reads_as_before(tmp_path: Path) -> None:
    agent = tmp_path / "agent-status.json"
    agentstatus.write(str(agent), {"lastPass": 1.0})
    assert agentstatus.read(str(agent)) == {"lastPass": 1.0, "schema": agentstatus.SCHEMA}
    plugin = tmp_path / "device-plugin.json"
    pluginstatus.write(str(plugin), "r", "e", (1, 2, 3))
    assert (pluginstatus.read(str(plugin)) or {})["kubeletSocket"] == [1, 2, 3]
    record = tmp_path / "config-source.json"
    configrecord.write(str(record), configrecord.started(None, None, False, "shared", None, 1.0))
    assert (configrecord.read(str(record)) or {})["mode"] == "shared"
    link = tmp_path / "config.json"  # a ConfigMap's file is a symlink: followed
    link.symlink_to(record)
    assert configrecord.digest(str(link)) == configrecord.digest(str(record)) is not None
    assert configrecord.read(str(tmp_path / "missing")) is None


def test_ls_lists_past_a_fifo_as_the_agent_status(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"type": "rdma-cni", "mode": "shared",
                               "dataDir": str(tmp_path / "data")}))
    fifo = _in_place(tmp_path / "agent-status.json", "fifo")
    assert ls.main(["--json", "--config", str(cfg), "--agent-status", str(fifo)]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out) == []
    assert out.err == f"rdma-cni: ignoring {fifo} is a FIFO, not a regular file\n"


def test_doctor_and_the_exporter_read_past_a_fifo(tmp_path: Path) -> None:
    fifo = str(_in_place(tmp_path / "run-file", "fifo"))
    restart = doctor_files.check_restart(fifo, 0.0)  # unreadable, not absent
    assert restart.status == "warn" and "a FIFO, not a regular file" in restart.detail
    assert list(AgentCollector(fifo).collect()) == []
    assert list(ConfigCollector(fifo).collect()) == []


def test_the_probe_fails_on_a_fifo_as_its_heartbeat(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(heartbeat.HEALTH_DIR_ENV, str(tmp_path))
    fifo = _in_place(Path(heartbeat.heartbeat_path("agent")), "fifo")
    with pytest.raises(probe.ProbeFailed, match=f"{fifo} is a FIFO, not a regular file"):
        probe.read_heartbeat("agent")
