"""``rdma-cni install`` (``python -m rdma_cni``) where the disk is full: a tiny tmpfs,
filled, under the CNI bin dir (the bundle copy) or the conf dir (the backup, the conflist
rewrite). Each fails with one line, leaves nothing partial, and the primary's conflist is
as it was. And a symlinked conflist whose target is on a read-only mount: refused with
one line naming the link, the link kept.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cnirunner import python_command, sh
from primary_rig import primary, write

pytestmark = pytest.mark.root
PAGE = 4096
NAME = "10-vpc-cni.conflist"


@contextlib.contextmanager
def tmpfs(path: Path, size: str, *opts: str) -> Iterator[Path]:
    path.mkdir()
    sh("mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", "mode=0755", *opts]),
       "rdma-cni-test", str(path))
    try:
        yield path
    finally:
        sh("umount", str(path))


def fill(fs: Path, spare_pages: int = 0) -> None:
    """Fill the filesystem at ``fs`` up, but for ``spare_pages`` free pages."""
    spares = []
    for i in range(spare_pages):
        spares.append(fs / f".spare{i}")
        spares[-1].write_bytes(b"s" * PAGE)
    fd = os.open(fs / ".filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * PAGE)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    for s in spares:
        s.unlink()


def make_bundle(at: Path, lib_size: int) -> Path:
    """A stand-in image bundle ``at`` and the host tree beside it (``at``-host), which
    install copies to the CNI bin dir; returns the bundle's path."""
    at.mkdir(parents=True)
    at = at.parent / f"{at.name}-host"
    (at / "_internal" / "rdma_cni" / "data").mkdir(parents=True)
    for name in ("rdma-cni", "rdma-cni-front"):
        exe = at / name
        exe.write_text("#!/bin/sh\necho v1\n")
        exe.chmod(0o755)
    for i in range(4):
        (at / "_internal" / f"data{i}.bin").write_bytes(b"d" * lib_size)
    (at / "_internal" / "rdma_cni" / "data" / "nccl_env.sh").write_text("# nccl\n")
    return at.parent / at.name[: -len("-host")]


def install(bundle: Path, bin_dir: Path, conf: Path) -> tuple[int, str]:
    res = subprocess.run([*python_command(), "install", "--bundle", str(bundle),
                          "--cni-bin-dir", str(bin_dir), "--cni-conf-dir", str(conf),
                          "--mode", "shared"], capture_output=True, text=True, timeout=120)
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert "Traceback" not in res.stderr and all(
        line.startswith("rdma-cni install: ") for line in lines), res.stderr
    errors = [line for line in lines if line.startswith("rdma-cni install: error: ")]
    assert res.returncode == 0 or len(errors) == 1, res.stderr
    return res.returncode, errors[0] if errors else ""


def listing(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Path]:
    return {"bundle": make_bundle(tmp_path / "bundle", 32 * 1024), "fs": tmp_path / "fs",
            "bin": tmp_path / "bin", "conf": tmp_path / "net.d"}


def put_conflist(conf: Path) -> bytes:
    conf.mkdir(exist_ok=True)
    write(str(conf / NAME), primary(1), "rename")
    return (conf / NAME).read_bytes()


@pytest.mark.parametrize("room", ["none", "part of the bundle"])
def test_the_bundle_copy_on_a_full_disk(node: dict[str, Path], room: str) -> None:
    original = put_conflist(node["conf"])
    with tmpfs(node["fs"], "256k") as fs:
        bin_dir = fs / "bin"
        bin_dir.mkdir()
        fill(fs, spare_pages=0 if room == "none" else 20)  # 80 KiB: two of the four data files
        rc, err = install(node["bundle"], bin_dir, node["conf"])
        assert rc == 1
        assert "No space left on device" in err and str(bin_dir) in err, err
        assert listing(bin_dir) == []  # no partial bundle, link or temp dir
    assert (node["conf"] / NAME).read_bytes() == original
    assert listing(node["conf"]) == [NAME]


@pytest.mark.parametrize("spare_pages", [0, 1])
def test_the_backup_and_the_rewrite_on_a_full_disk(
        node: dict[str, Path], spare_pages: int) -> None:
    """No room at all: the backup fails. One page: the backup is written (it is one
    page), the rewrite is not, and the backup made for it is taken back. With room the
    install goes through; full again later, the backup it made stays as it was."""
    with tmpfs(node["fs"], "64k") as fs:
        conf = fs / "net.d"
        original = put_conflist(conf)
        fill(fs, spare_pages)
        rc, err = install(node["bundle"], node["bin"], conf)
        assert rc == 1
        failed = f"{conf / NAME}.rdma-cni.bak" if spare_pages == 0 else str(conf / NAME)
        assert f"failed to write {failed}: No space left on device" in err, err
        assert listing(conf) == [NAME]
        assert (conf / NAME).read_bytes() == original
        (fs / ".filler").unlink()  # room again: the same install goes through
        rc, err = install(node["bundle"], node["bin"], conf)
        assert rc == 0, err
        assert [p["type"] for p in json.loads((conf / NAME).read_text())["plugins"]] == [
            "vpc-cni", "rdma-cni", "portmap"]
        backup = conf / f"{NAME}.rdma-cni.bak"
        assert backup.read_bytes() == original
        write(str(conf / NAME), primary(2), "rename")  # the primary rewrote it since
        rewritten = (conf / NAME).read_bytes()
        fill(fs)  # full again: the backup there is kept as it was
        rc, err = install(node["bundle"], node["bin"], conf)
        assert rc == 1 and f"failed to write {conf / NAME}: No space left" in err, err
        assert listing(conf) == [NAME, backup.name]
        assert (conf / NAME).read_bytes() == rewritten and backup.read_bytes() == original


def test_a_link_to_a_read_only_target_is_refused_naming_the_link(node: dict[str, Path]) -> None:
    with tmpfs(node["fs"], "64k") as fs:
        own = fs / NAME
        write(str(own), primary(1), "rename")
        original = own.read_bytes()
        sh("mount", "-o", "remount,ro", str(fs))
        conf = node["conf"]
        conf.mkdir()
        (conf / NAME).symlink_to(own)
        rc, err = install(node["bundle"], node["bin"], conf)
        assert rc == 1
        assert f"symlink {conf / NAME}" in err and "Read-only file system" in err, err
        assert os.readlink(conf / NAME) == str(own) and own.read_bytes() == original
        assert listing(conf) == [NAME]  # no backup of an edit that did not happen
