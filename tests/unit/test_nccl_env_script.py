"""scripts/nccl_env.sh, executed and sourced, on the fake trees (tests/support/nccl_trees.py),
against `rdma-cni nccl-env` on the same trees."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.nccl_trees import BAD, GOOD, equal_indices
from support.nccl_trees import tree as _tree

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "nccl_env.sh"
SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]


def _env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "BASH_ENV", "ENV"))}
    env.update(NCCL_ENV_SYSFS_ROOT=str(root), **extra)
    return env


def _python(root: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rdma_cni.tools.nccl_env", *args]
    return subprocess.run(
        cmd,
        env=_env(root, **extra),
        capture_output=True,
        text=True,
        check=False,
        cwd=SCRIPT.parents[1],
    )


def _shell(shell: str, root: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shell, str(SCRIPT)], env=_env(root, **extra), capture_output=True, text=True, check=False
    )


def _sourced(shell: str, root: Path, body: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shell, "-c", f". '{SCRIPT}'; {body}"],
        env=_env(root, **extra),
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("name", sorted(GOOD))
def test_script_executed_equals_python(tmp_path: Path, name: str, shell: str) -> None:
    root = _tree(tmp_path, GOOD[name][0])
    py = _python(root)
    sh = _shell(shell, root)
    assert py.returncode == 0, py.stderr
    assert sh.returncode == 0, sh.stderr
    assert sh.stdout == py.stdout
    assert f"export NCCL_IB_HCA={GOOD[name][1]['NCCL_IB_HCA']}\n" in sh.stdout


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("name", sorted(BAD))
def test_script_executed_errors_like_python(tmp_path: Path, name: str, shell: str) -> None:
    root = _tree(tmp_path, BAD[name][0])
    py = _python(root)
    sh = _shell(shell, root)
    assert py.returncode == 1 and py.stdout == "" and py.stderr
    assert sh.returncode != 0 and sh.stdout == "" and "nccl_env.sh:" in sh.stderr


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("name", sorted(GOOD))
def test_script_sourced_exports(tmp_path: Path, name: str, shell: str) -> None:
    root = _tree(tmp_path, GOOD[name][0])
    body = 'echo "rc=$?"; env | grep "^NCCL_" | sort; set | grep -c "^_ne_" || true'
    res = _sourced(shell, root, body, NCCL_IB_GID_INDEX="99", NCCL_IB_ADDR_RANGE="10.0.0.0/8")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "rc=0"
    exported = dict(ln.split("=", 1) for ln in lines[1:-1] if not ln.startswith("NCCL_ENV_"))
    assert exported == {**GOOD[name][1], "NCCL_SOCKET_IFNAME": "eth0"}
    assert lines[-1] == "0", "helper variables or functions leaked into the shell"


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("name", sorted(BAD))
def test_script_sourced_error_keeps_shell_alive(tmp_path: Path, name: str, shell: str) -> None:
    root = _tree(tmp_path, BAD[name][0])
    res = _sourced(shell, root, 'echo "alive $?"; echo "hca=${NCCL_IB_HCA:-unset}"')
    assert res.returncode == 0
    assert res.stdout == "alive 1\nhca=unset\n"
    assert "nccl_env.sh:" in res.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_script_sourced_under_set_u(tmp_path: Path, shell: str) -> None:
    root = _tree(tmp_path, equal_indices)
    res = subprocess.run(
        [shell, "-uc", f". '{SCRIPT}'; echo \"ok $? $NCCL_IB_GID_INDEX\""],
        env=_env(root),
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.stdout == "ok 0 5\n", res.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_pinned_ifaces_and_socket_name(tmp_path: Path, shell: str) -> None:
    root = _tree(tmp_path, equal_indices)
    extra = {"NCCL_ENV_IFACES": "eth2", "NCCL_ENV_SOCKET_IFNAME": "eth1"}
    sh = _shell(shell, root, **extra)
    assert sh.stdout == _python(root, **extra).stdout
    assert sh.stdout == (
        "export NCCL_IB_HCA==mlx5_1:1\nexport NCCL_IB_GID_INDEX=5\nexport NCCL_SOCKET_IFNAME=eth1\n"
    )
    missing = _shell(shell, root, NCCL_ENV_IFACES="eth7")
    assert missing.returncode != 0 and "eth7" in missing.stderr



@pytest.mark.parametrize("shell", SHELLS)
def test_pinned_names_are_never_file_patterns(tmp_path: Path, shell: str) -> None:
    """NCCL_ENV_IFACES="eth*" names no interface, wherever the pod's shell stands, and the
    caller's pathname expansion (on or `set -f`) is as it was."""
    root = _tree(tmp_path / "tree", equal_indices)
    cwd = tmp_path / "work"
    cwd.mkdir()
    for name in ("eth1", "eth2"):
        (cwd / name).write_text("")
    res = subprocess.run([shell, str(SCRIPT)], env=_env(root, NCCL_ENV_IFACES="eth*"), cwd=cwd,
                         capture_output=True, text=True, check=False)
    assert res.returncode != 0 and "pod interface(s) eth*: not present" in res.stderr, res.stderr
    assert _python(root, NCCL_ENV_IFACES="eth*").returncode == 1
    body = 'case $- in *f*) echo "-f";; *) echo "+f";; esac; echo e*'
    for flag, expected in (("-c", "+f\neth1 eth2\n"), ("-fc", "-f\ne*\n")):
        res = subprocess.run([shell, flag, f". '{SCRIPT}'; {body}"], cwd=cwd, env=_env(root),
                             capture_output=True, text=True, check=False)
        assert res.stdout == expected, res.stderr


@pytest.mark.skipif("bash" not in SHELLS, reason="bash is not installed")
def test_sourced_in_bash_with_failglob(tmp_path: Path) -> None:
    """A pattern that matches nothing (no dot-named device) is no error, and the caller's
    failglob is on again afterwards."""
    root = _tree(tmp_path, equal_indices)
    res = subprocess.run(["bash", "-O", "failglob", "-c",
                          f". '{SCRIPT}'; echo \"$? $NCCL_IB_GID_INDEX\"; shopt -q failglob"],
                         env=_env(root), capture_output=True, text=True, check=False)
    assert (res.returncode, res.stdout) == (0, "0 5\n"), res.stderr
