"""Issue 14, smaller faults: the agent removed in-progress temp files of live writers,
judging them by the writer's PID, which a containerized agent cannot see.

A live writer here is a process of this (host) PID namespace holding a store temp
file open under its flock, as the store's writer does while it writes and fsyncs;
the agent is the built bundle run in its own PID namespace (``unshare --pid``) and
in the podman container of :mod:`support.agent`. The oracle is the data dir on disk.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.agent import AgentContainer, bundle_dir, needs_exec, podman_usable

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def _files(tmp: Path) -> tuple[Path, Path, Path, int]:
    data = tmp / "data"
    state = data / "state"
    state.mkdir(parents=True)
    live = state / f".tmp-{os.getpid()}-00aa-{'1' * 40}.json"
    live.write_bytes(b'{"schema": 1, "key"')  # mid-write
    old = time.time() - 3600  # a slow fsync: older than the orphan age, still held
    os.utime(live, (old, old))
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    orphan = state / f".tmp-{os.getpid()}-00bb-{'2' * 40}.json"
    orphan.write_bytes(b"{")  # a writer that died an hour ago
    os.utime(orphan, (old, old))
    return data, live, orphan, fd


def _config(tmp: Path, data: Path) -> Path:
    cfg = tmp / "agent.json"
    cfg.write_text(json.dumps({"type": "rdma-cni", "dataDir": str(data)}))
    return cfg


def test_agent_in_another_pid_namespace_keeps_a_live_writers_temp_file(tmp_path: Path) -> None:
    data, live, orphan, fd = _files(tmp_path)
    try:
        argv = ["unshare", "--pid", "--fork", "--mount-proc", str(bundle_dir() / "rdma-cni"),
                "agent", "--once", "--config", str(_config(tmp_path, data))]
        if "RDMA_CNI_AGENT_BUNDLE" not in os.environ:
            argv += ["--status-file", str(tmp_path / "status.json"), "--cri-socket", ""]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert live.exists(), "the agent removed a live writer's temp file"
        assert not orphan.exists()
    finally:
        os.close(fd)


@needs_exec
@pytest.mark.skipif(bool(podman_usable()), reason=podman_usable() or "-")
def test_agent_in_a_container_keeps_a_live_writers_temp_file(tmp_path: Path) -> None:
    data, live, orphan, fd = _files(tmp_path)
    (tmp_path / "cri").mkdir()
    (tmp_path / "status").mkdir()
    box = AgentContainer(tmp_path, {"type": "rdma-cni", "dataDir": str(data)}, data,
                         tmp_path / "cri", tmp_path / "status", f"rdma-cni-tmp-{os.getpid()}")
    try:
        run = box.agent_once(cri=False)
        assert run.returncode == 0, run.stderr
        assert live.exists(), "the agent removed a live writer's temp file"
        assert not orphan.exists()
    finally:
        box.stop()
        os.close(fd)
