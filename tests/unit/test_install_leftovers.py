"""install / uninstall / install --watch: what they leave in the conf dir and the bin dir,
which file and which entries are ours, and the next run after a kill."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from primary_rig import generation, primary, write

from rdma_cni.adapters import fsops
from rdma_cni.models.subconfig import first_conf_file
from rdma_cni.tools import conflist, install

NAME = "10-vpc-cni.conflist"
ENTRY = install.make_entry({"dataDir": "/tmp/x"}, "shared-multi")


class Killed(BaseException):
    """The process killed at this step: nothing after it runs."""


def make_tree(root: Path) -> Path:
    (root / "_internal" / "rdma_cni" / "data").mkdir(parents=True)
    for name in ("rdma-cni", "rdma-cni-front"):
        (root / name).write_text(f"#!/bin/sh\necho {name}\n")
        (root / name).chmod(0o755)
    (root / "_internal" / "rdma_cni" / "data" / "nccl_env.sh").write_text("# nccl\n")
    return root


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "bundle").mkdir()
    make_tree(tmp_path / "bundle-host")
    conf = tmp_path / "net.d"
    conf.mkdir()
    write(str(conf / NAME), primary(1), "rename")
    (conf / "99-loopback.conf").write_text('{"type": "loopback"}')
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"type": "rdma-cni", "dataDir": "/tmp/d"}))
    return {"bundle": tmp_path / "bundle", "bin": tmp_path / "bin", "conf": conf,
            "cfg": cfg, "out": tmp_path / "run" / "config.json"}


def run_install(n: dict[str, Path], *extra: str) -> int:
    return install.main(["--bundle", str(n["bundle"]), "--cni-bin-dir", str(n["bin"]),
                         "--cni-conf-dir", str(n["conf"]), "--config", str(n["cfg"]),
                         "--mode", "shared-multi", *extra])


def run_uninstall(n: dict[str, Path]) -> int:
    return install.main(["uninstall", "--cni-bin-dir", str(n["bin"]),
                         "--cni-conf-dir", str(n["conf"])])


def entries(path: Path) -> list[str | None]:
    """The cniConfName of each rdma-cni entry of the list at ``path``, in order."""
    plugins = json.loads(path.read_text())["plugins"]
    return [p.get("cniConfName") for p in plugins if p.get("type") == "rdma-cni"]


# -- 1. uninstall leaves the dirs as it found them ----------------------------------------
def test_uninstall_removes_a_backup_the_primary_has_moved_on_from(
        node: dict[str, Path]) -> None:
    """The backup stayed whenever the primary had rewritten its file since the install
    (the backup then differs from the file without our entry)."""
    assert run_install(node) == 0
    write(str(node["conf"] / NAME), primary(2), "rename")  # the primary's agent restarts
    assert run_install(node) == 0  # the entry back (the watch's job)
    assert run_uninstall(node) == 0
    assert generation(str(node["conf"] / NAME)) == (2, False)
    assert sorted(os.listdir(node["conf"])) == [NAME, "99-loopback.conf"]


def _killed(at: str, node: dict[str, Path]) -> None:
    """An install in a child process that dies (no clean-up runs) as it renames or swaps a
    temp file whose name holds ``at`` into place."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        real_replace, real_exchange = os.replace, fsops.exchange

        def replace(a: Any, b: Any) -> None:
            if at in os.path.basename(str(a)):
                os._exit(9)
            real_replace(a, b)

        def exchange(a: str, b: str) -> None:
            if at in os.path.basename(a):
                os._exit(9)
            real_exchange(a, b)

        os.replace, fsops.exchange = replace, exchange  # type: ignore[assignment]
        try:
            run_install(node)
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] >> 8 == 9


def test_uninstall_removes_what_a_killed_install_left_and_nothing_else(
        node: dict[str, Path]) -> None:
    """Installs killed as they swapped the plugin's link, wrote nccl_env.sh, or swapped
    their file with the primary's left their temp links and files for ever."""
    _killed(".rdma-cni.tmp-", node)  # the plugin's link
    assert run_install(node) == 0
    (node["bin"] / "nccl_env.sh").unlink()
    _killed("nccl_env.sh", node)
    node["cfg"].write_text(json.dumps({"type": "rdma-cni", "dataDir": "/tmp/e"}))
    _killed(NAME, node)  # the conflist's swap
    left = [n for n in os.listdir(node["bin"]) if n.startswith(".")]
    assert sorted(n.endswith("nccl_env.sh.part") for n in left) == [False, True]
    assert [n for n in os.listdir(node["conf"]) if n.startswith(".")] != []
    theirs = [".tmp-1.2-ab-10-vpc-cni.conflist.part", "10-vpc-cni.conflist.tmp",
              ".vpc-cni.swp"]  # the primary's, or anyone's: not ours by name
    for name in theirs:
        (node["conf"] / name).write_text("x")
    (node["bin"] / "bridge").write_text("x")
    assert run_uninstall(node) == 0
    assert sorted(os.listdir(node["conf"])) == sorted([NAME, "99-loopback.conf", *theirs])
    assert generation(str(node["conf"] / NAME)) == (1, False)
    assert os.listdir(node["bin"]) == ["bridge"]


# -- 2. a renamed cniConfName replaces the install's old entry ----------------------------
def test_a_renamed_network_replaces_its_old_entry(node: dict[str, Path]) -> None:
    """Install again with another cniConfName: the old entry stayed beside the new one,
    and every pod's ADD ran the plugin twice."""
    path = node["conf"] / NAME
    assert run_install(node, "--write-config", str(node["out"])) == 0
    node["cfg"].write_text(json.dumps({"type": "rdma-cni", "cniConfName": "rdma-b"}))
    assert run_install(node, "--write-config", str(node["out"])) == 0
    assert entries(path) == ["rdma-b"]
    assert [p["type"] for p in json.loads(path.read_text())["plugins"]] == \
        ["vpc-cni", "rdma-cni", "portmap"]
    # another network (its own install, its own record) is kept beside it
    node["cfg"].write_text(json.dumps({"type": "rdma-cni", "cniConfName": "rdma-c"}))
    assert run_install(node, "--write-config", str(node["out"].parent / "c.json")) == 0
    assert entries(path) == ["rdma-b", "rdma-c"]


# -- 3. the entry lives in the file the runtime uses --------------------------------------
def test_a_new_first_file_takes_the_entry_from_the_old_one(node: dict[str, Path]) -> None:
    """The watch put the entry into the new first file and left it in the old one too."""
    assert run_install(node) == 0
    other = {"type": "rdma-cni", "mode": "shared", "cniConfName": "rdma-b"}
    old = node["conf"] / NAME
    doc = json.loads(old.read_text())
    doc["plugins"].insert(2, other)  # another network's entry: not this watch's
    old.write_text(json.dumps(doc))
    write(str(node["conf"] / "05-new.conflist"), primary(7), "rename")
    install.watch(str(node["conf"]), ENTRY, 0.0, rounds=0)
    assert generation(str(node["conf"] / "05-new.conflist")) == (7, True)
    assert entries(old) == ["rdma-b"]


# -- 4. dot-files count: libcni's ConfFiles lists them --------------------------------------
def test_a_dot_file_sorting_first_is_the_runtimes_network(node: dict[str, Path]) -> None:
    """libcni's ConfFiles (containerd's go-cni and CRI-O's ocicni both list the dir with
    it) keeps names starting with a dot; the first after sorting is the network."""
    hidden = node["conf"] / ".00-vpc-cni.conflist"
    write(str(hidden), primary(3), "rename")
    assert first_conf_file(str(node["conf"])) == str(hidden)
    assert run_install(node) == 0
    assert generation(str(hidden)) == (3, True)
    assert generation(str(node["conf"] / NAME)) == (1, False)
    assert run_uninstall(node) == 0
    assert generation(str(hidden)) == (3, False)


# -- 5. a kill between the swap and the swap back -------------------------------------------
def _kill_after_swaps(monkeypatch: Any, path: Path, swaps: int, newer: int | None) -> None:
    """The primary renames generation ``newer`` in right before our first swap; the
    process is killed right after its ``swaps``-th swap (before any, for 0)."""
    real, done = fsops.exchange, []

    def racing(a: str, b: str) -> None:
        if swaps == 0:
            raise Killed
        if not done and newer is not None:
            write(str(path), primary(newer), "rename")
        real(a, b)
        done.append(a)
        if len(done) == swaps:
            raise Killed

    monkeypatch.setattr(fsops, "exchange", racing)


@pytest.mark.parametrize("swaps,newer", [(1, 2), (1, None), (0, None)])
@pytest.mark.parametrize("then", ["install", "watch", "uninstall"])
def test_the_next_run_recovers_a_kill_between_swap_and_swap_back(
        node: dict[str, Path], monkeypatch: Any, swaps: int, newer: int | None,
        then: str) -> None:
    """Killed after the swap that took the primary's newer file off the path, before the
    swap back: our file built on the older generation stayed the runtime's network, the
    primary's newer file under our temp name, and no later run looked at it."""
    path = node["conf"] / NAME
    _kill_after_swaps(monkeypatch, path, swaps, newer)
    with pytest.raises(Killed):
        conflist.ensure_entry(str(node["conf"]), ENTRY)
    monkeypatch.undo()
    newest = newer or 1
    if then == "install":
        assert run_install(node) == 0
        assert generation(str(path)) == (newest, True)
    elif then == "watch":
        install.watch(str(node["conf"]), ENTRY, 0.0, rounds=0)
        assert generation(str(path)) == (newest, True)
    else:
        assert run_uninstall(node) == 0
        assert generation(str(path)) == (newest, False)
    left = sorted(n for n in os.listdir(node["conf"]) if not n.endswith(".rdma-cni.bak"))
    assert left == [NAME, "99-loopback.conf"]


@pytest.mark.parametrize("how", ["in-place", "rename-twice"])
@pytest.mark.parametrize("then", ["install", "uninstall"])
def test_a_primary_write_after_the_kill_is_never_undone_by_the_next_run(
        node: dict[str, Path], monkeypatch: Any, how: str, then: str) -> None:
    """Killed right after the swap (our file at the path, the primary's under the swap
    name); then the primary writes its file again: in place (our inode, its bytes) or by
    rename twice (the second file may get our freed inode). The next run told our file
    by its inode alone, swapped the primary's older file back over its newest and
    deleted the newest: the primary's config undone for good."""
    path = node["conf"] / NAME
    _kill_after_swaps(monkeypatch, path, 1, None)
    with pytest.raises(Killed):
        conflist.ensure_entry(str(node["conf"]), ENTRY)
    monkeypatch.undo()
    if how == "in-place":
        write(str(path), primary(2), "in-place")
        newest = 2
    else:
        write(str(path), primary(2), "rename")
        write(str(path), primary(3), "rename")
        newest = 3
    if then == "install":
        assert run_install(node) == 0
    else:
        assert run_uninstall(node) == 0
    assert generation(str(path)) == (newest, then == "install")
    left = sorted(n for n in os.listdir(node["conf"]) if not n.endswith(".rdma-cni.bak"))
    assert left == [NAME, "99-loopback.conf"]
