"""The command of docs/getting-started.md's pod (section 4, the block marked
``getting-started: pod``), run as written by sh against fake sysfs trees, with the
script the device plugin mounts at /usr/local/bin/nccl_env.sh (scripts/nccl_env.sh): it
exports the NCCL variables when there are some to export, and stops the container when
nccl_env.sh fails, even in an image that sets NCCL variables of its own."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from support.fakes.sysfs import FakeSys

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "nccl_env.sh"
IN_POD = "/usr/local/bin/nccl_env.sh"


def pod_command() -> list[str]:
    text = (REPO / "docs" / "getting-started.md").read_text()
    m = re.search(r"<!-- getting-started: pod\b[^>]*-->\s*```yaml\n(.*?)```", text, re.S)
    assert m, "getting-started.md lost its block marked getting-started: pod"
    (container,) = yaml.safe_load(m.group(1))["spec"]["containers"]
    argv = [a.replace(IN_POD, str(SCRIPT)) for a in container["command"]]
    assert argv != container["command"], f"the command does not run {IN_POD}"
    return argv


def _tree(root: Path, pod_gids: bool) -> Path:
    fs = FakeSys(root)
    for name in ("lo", "eth0", "eth1"):
        fs.netdev(name)
    fs.ibdev("mlx5_0", pci="0000:30:00.0", slots=10)
    fs.pod_addr("eth0", "203.0.113.5/24")
    fs.pod_addr("eth1", "192.0.2.10/24")
    if pod_gids:
        fs.roce_pair("mlx5_0", 1, 4, "192.0.2.10", "eth1")
    return root


def _run(root: Path, argv: list[str], timeout: float) -> tuple[int | None, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "ENV", "BASH_ENV"))}
    env.update(NCCL_ENV_SYSFS_ROOT=str(root), NCCL_DEBUG="INFO")  # the image's own NCCL_
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:  # still running: the ``sleep infinity`` of a pod
        os.killpg(p.pid, signal.SIGKILL)  # sh and its sleep
        out, err = p.communicate()
        return None, out, err


def test_the_pod_command_stops_when_nccl_env_fails(tmp_path: Path) -> None:
    code, out, err = _run(_tree(tmp_path, pod_gids=False), pod_command(), timeout=20)
    assert code not in (0, None) and out == "", (code, out, err)
    assert err.startswith("nccl_env.sh: ") and len(err.splitlines()) == 1, err


def test_the_pod_command_exports_and_keeps_running(tmp_path: Path) -> None:
    code, out, err = _run(_tree(tmp_path, pod_gids=True), pod_command(), timeout=3)
    assert code is None, (code, out, err)
    env = dict(line.split("=", 1) for line in out.splitlines())
    assert env["NCCL_IB_HCA"] == "=mlx5_0:1", out
    assert env["NCCL_IB_GID_INDEX"] == "5", out  # the pair's RoCE v2 slot
