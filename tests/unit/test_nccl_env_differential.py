"""scripts/nccl_env.sh (what pods run) and `rdma-cni nccl-env` on the same generated GID
tables (tests/support/nccl_tables.py): the same export lines, or both fail with one line
that names the same failure for the same interface."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from support.nccl_tables import table

from rdma_cni.tools.nccl_env import main

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "nccl_env.sh"
SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]
SEEDS = range(200)


def _subcommand(root: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with monkeypatch.context() as m:
        for key in [k for k in os.environ if k.startswith("NCCL_")]:
            m.delenv(key)
        for key, value in {"NCCL_ENV_SYSFS_ROOT": str(root), **env}.items():
            m.setenv(key, value)
        rc = main([])
    out, err = capsys.readouterr()
    return rc, out, err


def _script(shell: str, root: Path, env: dict[str, str]) -> tuple[int, str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "BASH_ENV", "ENV"))}
    proc = subprocess.run([shell, str(SCRIPT)], env={**clean, "NCCL_ENV_SYSFS_ROOT": str(root),
                                                     **env},
                          capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def _failure(err: str) -> str:
    """What failed, for which interface: the message up to its first colon (the details
    after it, such as lists of GIDs, are worded for each reader)."""
    return err.split(": ")[1]


def _outcome(rc: int, out: str) -> str:
    if rc:
        return "error"
    return "index" if "NCCL_IB_GID_INDEX=" in out else "range"


@pytest.mark.parametrize("seed", SEEDS)
def test_script_and_subcommand_agree(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    env, what = table(seed, tmp_path)
    rc, out, err = _subcommand(tmp_path, env, monkeypatch, capsys)
    for shell in SHELLS:
        sh_rc, sh_out, sh_err = _script(shell, tmp_path, env)
        assert (sh_rc, sh_out) == (rc, out), f"{shell}, {what}\nsh: {sh_err}py: {err}"
        if rc:
            assert out == "" and len(err.splitlines()) == 1, what
            assert sh_err.startswith("nccl_env.sh: ") and len(sh_err.splitlines()) == 1, what
            assert _failure(sh_err) == _failure(err), f"{shell}, {what}\nsh: {sh_err}py: {err}"


def test_the_tables_reach_every_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The generator is worth running: GID index, address range and errors all occur, and
    names that need quoting reach the export lines."""
    seen: Counter[str] = Counter()
    for seed in SEEDS:
        root = tmp_path / str(seed)
        env, _ = table(seed, root)
        rc, out, _err = _subcommand(root, env, monkeypatch, capsys)
        seen[_outcome(rc, out)] += 1
        seen["quoted"] += "'" in out
    assert seen["index"] >= 25 and seen["range"] >= 10 and seen["error"] >= 50, seen
    assert seen["quoted"] >= 5, seen
