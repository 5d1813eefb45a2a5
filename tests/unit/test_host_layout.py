"""The host layout install makes (tools/bundle.py): versioned trees beside each other, one
link switched, old trees pruned only once no plugin holds their ``.in-use`` lock, the
0.1.0 flat layout retired after a grace; and the kernel check (tools/kernel.py)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rdma_cni.errors import ConfigError
from rdma_cni.tools import bundle, install, kernel


def _tree(root: Path, version: str) -> Path:
    (root / "_internal").mkdir(parents=True)
    for name in ("rdma-cni", "rdma-cni-front"):
        exe = root / name
        exe.write_text(f"#!/bin/sh\necho {version}\n")
        exe.chmod(0o755)
    (root / "_internal" / "lib.so").write_text(version)
    return root


def _install(tree: Path, bin_dir: Path) -> str:
    with bundle.install_lock(str(bin_dir)):
        name, _ = bundle.install_tree(str(tree), str(bin_dir))
        bundle.switch_link(str(bin_dir), name)
        return name


def _holder(lock: Path) -> subprocess.Popen[str]:
    """Another process holding ``lock`` shared, as the front does for a running plugin."""
    code = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); "
            "fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_upgrade_lays_the_new_tree_beside_and_switches_one_link(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    old = _install(_tree(tmp_path / "v1", "v1"), bin_dir)
    new = _install(_tree(tmp_path / "v2", "v2"), bin_dir)
    assert old != new
    root = bin_dir / "rdma-cni.versions"
    assert (root / old / "rdma-cni-front").read_text().endswith("v1\n")  # untouched
    assert os.readlink(bin_dir / "rdma-cni") == f"rdma-cni.versions/{new}/rdma-cni-front"
    assert (bin_dir / "rdma-cni").read_text().endswith("v2\n")
    assert bundle.current_tree(str(bin_dir)) == new


def test_a_tree_in_use_is_kept_until_its_plugin_ends(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    old = _install(_tree(tmp_path / "v1", "v1"), bin_dir)
    holder = _holder(bin_dir / "rdma-cni.versions" / old / ".in-use")
    try:
        _install(_tree(tmp_path / "v2", "v2"), bin_dir)
        removed, busy = bundle.prune(str(bin_dir))
        assert (removed, busy) == ([], [old])
        assert (bin_dir / "rdma-cni.versions" / old / "_internal" / "lib.so").read_text() == "v1"
    finally:
        holder.communicate("", timeout=10)
    assert bundle.prune(str(bin_dir)) == ([old], [])
    assert not (bin_dir / "rdma-cni.versions" / old).exists()


def test_a_front_locking_after_the_prune_sees_its_tree_stale(tmp_path: Path) -> None:
    """The race the front guards against: it opened .in-use of the tree the link named,
    the pruner removed the tree before the front's flock; the front then sees the file
    unlinked (st_nlink 0) and runs the current link instead (front: hold_tree)."""
    bin_dir = tmp_path / "bin"
    old = _install(_tree(tmp_path / "v1", "v1"), bin_dir)
    fd = os.open(bin_dir / "rdma-cni.versions" / old / ".in-use", os.O_RDONLY)
    try:
        _install(_tree(tmp_path / "v2", "v2"), bin_dir)
        assert bundle.prune(str(bin_dir)) == ([old], [])
        fcntl.flock(fd, fcntl.LOCK_SH)
        assert os.fstat(fd).st_nlink == 0
    finally:
        os.close(fd)


def test_partial_copies_and_damaged_trees_are_pruned(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    name = _install(_tree(tmp_path / "v1", "v1"), bin_dir)
    root = bin_dir / "rdma-cni.versions"
    (root / ".new-x-1" / "_internal").mkdir(parents=True)  # an installer killed mid-copy
    (root / name / "_internal" / "lib.so").write_text("damaged")
    assert _install(tmp_path / "v1", bin_dir) == name  # same content: same name, re-copied
    assert (root / name / "_internal" / "lib.so").read_text() == "v1"
    removed, busy = bundle.prune(str(bin_dir))
    assert busy == [] and ".new-x-1" in removed and any(r.startswith(".old-") for r in removed)
    assert sorted(os.listdir(root)) == [".install.lock", name]


def test_the_flat_layout_of_0_1_0_is_retired_after_the_grace(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    legacy = bin_dir / "rdma-cni.d"
    _tree(legacy, "0.1.0")  # rdma-cni.d/rdma-cni, rdma-cni-front, _internal/
    (bin_dir / "rdma-cni").symlink_to("rdma-cni.d/rdma-cni-front")
    assert bundle.prune(str(bin_dir)) == ([], [])  # the link still names it: not touched
    name = _install(_tree(tmp_path / "v2", "v2"), bin_dir)
    now = time.time()
    assert bundle.prune(str(bin_dir), now) == ([], [])  # the grace starts
    assert (legacy / "_internal" / "lib.so").exists()
    assert bundle.prune(str(bin_dir), now + bundle.LEGACY_GRACE - 5) == ([], [])
    removed, _ = bundle.prune(str(bin_dir), now + bundle.LEGACY_GRACE + 1)
    assert removed == ["rdma-cni.d/ (release 0.1.0's layout)"]
    assert not legacy.exists()
    assert sorted(os.listdir(bin_dir / "rdma-cni.versions")) == [".install.lock", name]


def _legacy_install(bundle_dir: Path, bin_dir: Path) -> None:
    """What release 0.1.0's installer does: its bundle copied beside, swapped in for
    ``rdma-cni.d`` whole (renameat2 RENAME_EXCHANGE), what it replaced deleted, and only
    then the link switched to ``rdma-cni.d/rdma-cni-front``."""
    import ctypes

    dest, tmp = bin_dir / "rdma-cni.d", bin_dir / ".rdma-cni.d.new-1"
    shutil.copytree(bundle_dir, tmp, symlinks=True)
    if dest.is_dir():
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.renameat2(-100, bytes(tmp), -100, bytes(dest), 2) == 0
        shutil.rmtree(tmp)
    else:
        tmp.rename(dest)
    link_tmp = bin_dir / ".rdma-cni.tmp-1"
    link_tmp.symlink_to("rdma-cni.d/rdma-cni-front")
    link_tmp.replace(bin_dir / "rdma-cni")


def test_a_rollback_to_0_1_0_never_leaves_the_link_dangling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.1.0's installer replaces rdma-cni.d whole before it switches the link: the link
    names one of our trees until then, and the tree is still there for it."""
    bin_dir = tmp_path / "bin"
    _legacy_install(_tree(tmp_path / "old", "0.1.0"), bin_dir)  # 0.1.0 ran first
    name = _install(_tree(tmp_path / "v2", "v2"), bin_dir)       # upgraded to this release
    tree = bin_dir / "rdma-cni.versions" / name
    seen = []
    real_rmtree = shutil.rmtree

    def rmtree(path: Any, *a: Any, **kw: Any) -> None:  # the moment 0.1.0 deletes
        seen.append((os.readlink(bin_dir / "rdma-cni"), (bin_dir / "rdma-cni").exists()))
        real_rmtree(path, *a, **kw)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    _legacy_install(_tree(tmp_path / "old2", "0.1.0"), bin_dir)  # rolled back
    monkeypatch.undo()
    assert seen == [(f"rdma-cni.versions/{name}/rdma-cni-front", True)]
    assert tree.is_dir() and (bin_dir / "rdma-cni").resolve() == \
        bin_dir / "rdma-cni.d" / "rdma-cni-front"


@pytest.mark.parametrize(("release", "verdict"), [
    ("3.10.0-1160.el7.x86_64", "refuse"), ("3.18.140", "refuse"),
    ("4.14.0-0.bpo.3-amd64", "warn"), ("4.18.0-553.el8_10.x86_64", "ok"),
    ("5.15.0-91-generic", "ok"), ("6.1.0-57-amd64", "ok"), ("weird", "unknown")])
def test_kernel_check(release: str, verdict: str) -> None:
    if verdict == "refuse":
        with pytest.raises(ConfigError) as err:
            kernel.check(release)
        assert err.value.msg.startswith(f"refusing to install: kernel {release} is older "
                                        "than 3.19, which the plugin needs for ipvlan")
        return
    line = kernel.check(release)
    assert {"warn": "warning: ", "ok": "kernel ", "unknown": "kernel "}[verdict] in line
    assert ("older than 4.18" in line) == (verdict == "warn")


def test_install_on_a_too_old_kernel_is_one_line_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setattr(kernel, "release", lambda: "3.10.0-1160.el7.x86_64")
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir()
    primary = {"cniVersion": "0.4.0", "name": "p", "plugins": [{"type": "bridge"}]}
    (conf_dir / "10-p.conflist").write_text(json.dumps(primary))
    _tree(tmp_path / "b-host", "v1")
    rc = install.main(["--bundle", str(tmp_path / "b"), "--cni-bin-dir", str(tmp_path / "bin"),
                       "--cni-conf-dir", str(conf_dir), "--mode", "shared"], lambda: None)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1
    assert err[0].startswith("rdma-cni install: error: refusing to install: kernel 3.10.0")
    assert not (tmp_path / "bin").exists()
    assert json.loads((conf_dir / "10-p.conflist").read_text()) == primary


def test_the_front_knows_the_versions_dir_by_its_name() -> None:
    """The front takes an installed tree without ``.in-use`` for one being removed: it
    tells one by the name of its parent, which must be install's."""
    source = (Path(__file__).resolve().parents[2] / "front" / "rdma-cni-front.c").read_text()
    assert f'#define VERSIONS_DIR "{bundle.BUNDLE_DIR}"' in source


def test_a_tree_a_prune_began_to_remove_is_copied_again(tmp_path: Path) -> None:
    """A prune killed between unlinking a tree's .in-use and removing it leaves the tree
    whole but for .in-use; a rollback to that very version reused it (same digest), and
    the front, which takes a tree without .in-use for one being removed, never ran it:
    every in-process request failed with code 11."""
    bin_dir = tmp_path / "bin"
    tree = _tree(tmp_path / "v1", "v1")
    name = _install(tree, bin_dir)
    _install(_tree(tmp_path / "v2", "v2"), bin_dir)
    (bin_dir / "rdma-cni.versions" / name / ".in-use").unlink()  # the prune, cut short
    assert _install(tree, bin_dir) == name
    assert (bin_dir / "rdma-cni.versions" / name / ".in-use").is_file()
    assert (bin_dir / "rdma-cni").read_text().endswith("v1\n")
