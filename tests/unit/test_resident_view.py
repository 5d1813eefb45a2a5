"""The resident server's view check and request framing (no root): a path resolved
inside a caller's root (symbolic links followed inside it, as the caller sees them),
and the frames it refuses as malformed."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdma_cni import defaults
from rdma_cni.resident import protocol, view


@pytest.fixture
def root(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A directory standing for another mount namespace's ``/``."""
    r = tmp_path / "root"
    (r / "var" / "lib" / "cni").mkdir(parents=True)
    (r / "run").mkdir()
    (r / "var" / "run").symlink_to("/run")  # absolute: inside the root, not ours
    (r / "var" / "data").symlink_to("lib/cni")
    fd = os.open(r, os.O_PATH | os.O_DIRECTORY)
    try:
        yield r, fd
    finally:
        os.close(fd)


def _id(p: Path, *missing: str) -> view.Identity:
    st = p.stat()
    return st.st_dev, st.st_ino, tuple(missing)


def test_paths_resolve_inside_the_given_root(root: tuple[Path, int]) -> None:
    r, fd = root
    assert view.identity(fd, "/var/lib/cni") == _id(r / "var/lib/cni")
    assert view.identity(fd, "/var/run") == _id(r / "run")  # not the host's /run
    assert view.identity(fd, "/var/data/rdma-cni/x") == _id(r / "var/lib/cni", "rdma-cni", "x")
    assert view.identity(fd, "/../../var//./lib/../lib/cni") == _id(r / "var/lib/cni")


def test_a_symlink_loop_cannot_be_resolved(root: tuple[Path, int]) -> None:
    r, fd = root
    (r / "loop").symlink_to("loop")
    with pytest.raises(OSError):
        view.identity(fd, "/loop/x")


def test_mismatch_names_the_first_path_seen_otherwise(root: tuple[Path, int]) -> None:
    r, fd = root
    conf = {"dataDir": str(r / "var/lib/cni"), "kubelet": {"checkpointFile": "relative"}}
    why = view.mismatch(view.decoded(json.dumps(conf).encode()), fd)
    assert why.startswith(f'dataDir "{r}/var/lib/cni" is another file'), why
    own = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        assert view.mismatch(view.decoded(json.dumps(conf).encode()), own).startswith(
            'kubelet.checkpointFile "relative" is not an absolute path')
        # validation refuses it later
        assert view.mismatch(view.decoded(b'{"dataDir": 7}'), own) == ""
        assert view.mismatch(view.decoded(b"[[["), own) == ""  # so does the decoder
    finally:
        os.close(own)


def test_the_defaults_are_checked() -> None:
    assert [p for _k, p in view.config_paths({})] == [
        defaults.DATA_DIR, defaults.KUBELET_POD_RESOURCES_SOCKET, defaults.KUBELET_CHECKPOINT]


def _frame(header: bytes, stdin: bytes = b"{}") -> bytes:
    return struct.pack("=I", len(header)) + header + struct.pack("=I", len(stdin)) + stdin


@pytest.mark.parametrize("header,why", [
    (b'{"v":2,"env":{}}', "version 2 is not 3"),
    (b"[" * 50000, "nested too deeply"),
    (b"[]", "bad resident request frame"),
    (b'{"v":3,"env":{"CNI_COMMAND":1}}', "environment"),
])
def test_malformed_frames_are_refused(header: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        protocol.decode_request(_frame(header))


def test_an_oversized_header_is_refused_from_its_length() -> None:
    assert protocol.request_size(struct.pack("=I", protocol.MAX_HEADER + 1)) == \
        protocol.MAX_FRAME + 1


@pytest.mark.parametrize("command,reply,ok", [
    ("ADD", {"exit": 0, "stdout": '{"cniVersion":"1.0.0"}\n'}, True),
    ("ADD", {"exit": 0, "stdout": ""}, False),
    ("ADD", {"exit": 1, "stdout": '{"code":7}'}, True),
    ("DEL", {"exit": 0, "stdout": ""}, True),
    ("DEL", {"exit": 1, "stdout": ""}, False),
    ("CHECK", {"exit": 1, "stdout": "[1]"}, False),
    ("ADD", {"refuse": "x"}, False),
])
def test_only_complete_answers_are_relayable(command: str, reply: dict[str, object],
                                             ok: bool) -> None:
    assert protocol.relayable(command, reply) is ok


def test_an_existing_path_takes_one_openat2_and_agrees_with_the_walk(
        root: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every component there: one ``openat2(RESOLVE_IN_ROOT)``, with the walk's answer;
    a missing component or a magic link (``/proc/self/cwd``): the walk's own answer."""
    _, fd = root
    paths = ["/var/lib/cni", "/var/run", "/../../var//./lib/../lib/cni", "/var/data",
             "var/data/"]
    walked = {p: view._walk(fd, p) for p in paths}
    missing = {p: view._walk(fd, p) for p in ("/var/data/rdma-cni/x", "/nope")}
    own = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        magic = view._walk(own, "/proc/self/cwd")
        assert view.identity(own, "/proc/self/cwd") == magic
        with pytest.raises(OSError):
            view.fsops.open_in_root(own, "/proc/self/cwd")
    finally:
        os.close(own)
    for p, want in missing.items():
        assert view.identity(fd, p) == want
    monkeypatch.setattr(view, "_walk", lambda *a: pytest.fail("walked"))
    for p, want in walked.items():
        assert view.identity(fd, p) == want, p


def _creating(monkeypatch: pytest.MonkeyPatch, made: list[Path]) -> list[str]:
    """``view.identity`` with ``made``'s next directory created right after each walk
    (another request creating the data dir between the server's two walks)."""
    real, walked = view.identity, []

    def identity(root: int, path: str) -> view.Identity:
        got = real(root, path)
        walked.append(path)
        if made:
            made.pop(0).mkdir()
        return got

    monkeypatch.setattr(view, "identity", identity)
    return walked


def test_a_data_dir_made_between_the_two_walks_is_the_same_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first pods on a node race to create the data dir: the caller's walk finds it
    missing, the server's finds it made. The server still serves the request."""
    data = tmp_path / "data"
    walked = _creating(monkeypatch, [data])
    conf = view.decoded(json.dumps({"dataDir": str(data)}).encode())
    own = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        assert view.mismatch(conf, own) == ""
    finally:
        os.close(own)
    # the pair, the caller's again (changed: it is the next pair's), the server's again
    assert walked.count(str(data)) == 4


def test_a_path_that_keeps_changing_is_declined(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deeper = [tmp_path.joinpath(*["d"] * n) for n in range(1, 3 * view.RETRIES + 1)]
    walked = _creating(monkeypatch, deeper)
    conf = view.decoded(json.dumps({"dataDir": str(deeper[-1])}).encode())
    own = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        assert "is another file" in view.mismatch(conf, own)
    finally:
        os.close(own)
    assert len(walked) == 1 + 2 * view.RETRIES  # the caller's, then per comparison two
