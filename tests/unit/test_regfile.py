"""rdma_cni.regfile: the one way a file someone else may have replaced is read. Never
waits (a FIFO opens at once and is refused), never through a symlink unless asked,
anything but a regular file refused before a byte is read, at most ``limit`` + 1 bytes."""

from __future__ import annotations

import os
import re
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.patience import within

from rdma_cni.regfile import (
    NotRegularError,
    kind,
    open_nowait,
    open_regular,
    read_regular,
    read_stat,
)

PATIENCE = 10


@pytest.fixture(autouse=True)
def never_blocked() -> Iterator[None]:
    """Fail a reader blocked on a FIFO's open instead of hanging."""
    with within(PATIENCE):
        yield


def test_a_regular_file_is_read_whole_or_to_one_byte_past_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    assert read_regular(str(path), 10) == b"0123456789"
    assert read_regular(str(path), 4) == b"01234"  # more than the limit: too large, says so
    assert read_regular(str(path), -1) == b"0123456789"
    assert read_regular(str(path), 0) == b"0"
    raw, st = read_stat(str(path), 100)
    assert raw == b"0123456789" and st.st_ino == path.stat().st_ino


@pytest.mark.parametrize("follow", [False, True])
def test_a_fifo_is_refused_at_once(tmp_path: Path, follow: bool) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    want = f"^{re.escape(str(fifo))} is a FIFO, not a regular file$"
    with pytest.raises(NotRegularError, match=want) as e:
        read_regular(str(fifo), 100, follow=follow)
    assert e.value.what == "a FIFO" and stat.S_ISFIFO(e.value.mode)
    assert e.value.strerror == "a FIFO, not a regular file" and e.value.errno is None


def test_a_symlink_is_refused_unless_followed(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"x")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(NotRegularError, match="is a symbolic link, not a regular file"):
        read_regular(str(link), 100)
    with pytest.raises(NotRegularError, match="is a symbolic link"):
        os.close(open_nowait(str(link)))
    assert read_regular(str(link), 100, follow=True) == b"x"
    fifo_link = tmp_path / "fifo-link"
    os.mkfifo(tmp_path / "fifo")
    fifo_link.symlink_to(tmp_path / "fifo")  # followed to a FIFO: still no wait
    with pytest.raises(NotRegularError, match=f"^{re.escape(str(fifo_link))} is a FIFO"):
        read_regular(str(fifo_link), 100, follow=True)


def test_a_directory_a_device_and_a_socket_are_refused(tmp_path: Path) -> None:
    with pytest.raises(NotRegularError, match="is a directory, not a regular file"):
        read_regular(str(tmp_path), 100)
    with pytest.raises(NotRegularError, match=r"^/dev/null is a device, not a regular file$"):
        read_regular("/dev/null", 100, follow=True)
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "sock"))
        with pytest.raises(OSError):  # a socket cannot even be opened (ENXIO)
            read_regular(str(tmp_path / "sock"), 100)
    finally:
        sock.close()
    assert kind(stat.S_IFSOCK) == "a socket" and kind(stat.S_IFCHR) == "a device"


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular(str(tmp_path / "missing"), 100)
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        read_regular(str(tmp_path / "file" / "below"), 100)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        read_regular(str(dangling), 100, follow=True)


def test_a_refusal_leaves_no_descriptor_open(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with pytest.raises(NotRegularError):
            open_regular(str(tmp_path / "fifo"))
        with pytest.raises(NotRegularError):
            read_regular(str(tmp_path), 1)
    assert len(os.listdir("/proc/self/fd")) == before
