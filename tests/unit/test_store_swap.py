"""A record replaced by another (an ADD's final record over its pending one, a DEL's
take-over) is swapped into place (rdma_cni.store.atomic.swap_in_place): what the kernel
shows of the files, and the fallbacks."""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import subprocess
from pathlib import Path

import pytest

from rdma_cni.adapters import fsops
from rdma_cni.store import atomic
from rdma_cni.store.core import Store
from rdma_cni.store.state import AttachmentState
from rdma_cni.vocab.attachment import AttachmentKey

KEY = AttachmentKey("rdma-net", "sandbox", "eth0")
FS_IOC_FIEMAP = 0xC020660B
FIEMAP_EXTENT_DELALLOC = 0x4
EXTENT = 56  # struct fiemap_extent


def _state(n: int) -> AttachmentState:
    return AttachmentState.from_json({"ifaces": [f"eth{n}"] * 40})  # ~1 KiB: not inline


def _extent_flags(path: str) -> list[int]:
    """Each extent's flags as FIEMAP reports them (no sync asked: as the file is now)."""
    buf = bytearray(struct.pack("=QQIIII", 0, 2**64 - 1, 0, 0, 4, 0) + bytes(EXTENT * 4))
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
    finally:
        os.close(fd)
    mapped = struct.unpack_from("=I", buf, 20)[0]
    return [struct.unpack_from("=I", buf, 32 + EXTENT * i + 40)[0] for i in range(mapped)]


def _is_ext4(path: Path) -> bool:
    out = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True)
    return out.stdout.strip() == "ext2/ext3"  # coreutils' name for the ext4 magic


def test_a_replaced_record_is_not_flushed_on_ext4(tmp_path: Path) -> None:
    """ext4 allocates and starts writing a file's data when it is renamed over another
    (``auto_da_alloc``); the swapped-in record keeps its data delayed, as a record
    written to a new name does (the store syncs none of its records: store/boot.py)."""
    if not _is_ext4(tmp_path):
        pytest.skip("the delayed allocation under test is ext4's")
    store = Store(str(tmp_path / "data"))
    store.put_state(KEY, _state(1))
    prepared = store.prepare_state(KEY, _state(2))
    if not all(f & FIEMAP_EXTENT_DELALLOC for f in _extent_flags(prepared)):
        pytest.skip("the new record's data was not delayed before it was put in place "
                    "(a filesystem mounted nodelalloc, or a writeback just then)")
    store.commit_state(KEY, prepared)
    path = os.path.join(store.state_dir, KEY.digest() + ".json")
    flags = _extent_flags(path)
    assert flags and all(f & FIEMAP_EXTENT_DELALLOC for f in flags), flags
    assert store.get_state(KEY).extra == _state(2).extra  # type: ignore[union-attr]
    assert os.listdir(store.state_dir) == [KEY.digest() + ".json"]


def test_a_swap_leaves_the_new_record_alone_in_place(tmp_path: Path) -> None:
    d = str(tmp_path)
    atomic.put_in_place(d, "r", atomic.write_temp(d, "r", b"old", sync=False))
    held = os.open(tmp_path / "r", os.O_RDONLY)  # a reader of the old record
    try:
        new = atomic.write_temp(d, "r", b"new", sync=False)
        inode = os.stat(new).st_ino
        atomic.swap_in_place(d, "r", new)
        assert os.listdir(d) == ["r"]
        assert (tmp_path / "r").read_bytes() == b"new" and os.stat(tmp_path / "r").st_ino == inode
        assert os.read(held, 10) == b"old" and os.fstat(held).st_nlink == 0
    finally:
        os.close(held)


def test_a_swap_without_a_record_in_place_renames(tmp_path: Path) -> None:
    d = str(tmp_path)
    atomic.swap_in_place(d, "r", atomic.write_temp(d, "r", b"first", sync=False))
    assert os.listdir(d) == ["r"] and (tmp_path / "r").read_bytes() == b"first"


@pytest.mark.parametrize("err", [errno.EINVAL, errno.EIO])
def test_a_filesystem_that_cannot_swap_gets_the_rename_any_other_error_is_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    """EINVAL (no RENAME_EXCHANGE there): renamed over; EIO: an IOFailure that says what
    failed, the old record in place, the temp file gone."""
    def refuse(a: str, b: str) -> None:
        raise OSError(err, os.strerror(err), a)
    monkeypatch.setattr(fsops, "exchange", refuse)
    d = str(tmp_path)
    atomic.put_in_place(d, "r", atomic.write_temp(d, "r", b"old", sync=False))
    new = atomic.write_temp(d, "r", b"new", sync=False)
    if err == errno.EIO:
        with pytest.raises(atomic.IOFailure,
                           match=r"failed to rename into place .*/r: Input/output error"):
            atomic.swap_in_place(d, "r", new)
    else:
        atomic.swap_in_place(d, "r", new)
    assert os.listdir(d) == ["r"]
    assert (tmp_path / "r").read_bytes() == (b"old" if err == errno.EIO else b"new")
