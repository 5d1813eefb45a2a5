"""``origin`` on the resident path: the pod's netns identity comes from the descriptor the
caller handed over, and the netns directory is recorded only where this process's view of
the path shows that very netns. ``serve`` recorded both from its own view of the path:
under a wrong mount of the netns directory it "proved" that directory to the agent, which
then took the runtime's live netns for gone and freed their addresses."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdma_cni.node import origin


@pytest.fixture
def pod_fd() -> Iterator[int]:
    fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    yield fd
    os.close(fd)


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def test_a_path_that_shows_another_file_records_no_directory(tmp_path: Path, pod_fd: int) -> None:
    wrong = tmp_path / "netns" / "pod"  # serve's view: a plain file where the runtime has the netns
    wrong.parent.mkdir()
    wrong.write_text("")
    rec = origin.origin_of(str(wrong), pod_fd)
    assert (rec["netnsDev"], rec["netnsIno"]) == _ident(pod_fd)
    assert "netnsDirDev" not in rec and "netnsDirIno" not in rec
    missing = origin.origin_of(str(tmp_path / "elsewhere" / "pod"), pod_fd)
    assert (missing["netnsDev"], missing["netnsIno"]) == _ident(pod_fd)
    assert "netnsDirIno" not in missing


def test_a_path_that_shows_another_netns_records_no_directory(
        monkeypatch: pytest.MonkeyPatch, pod_fd: int) -> None:
    other = (_ident(pod_fd)[0], _ident(pod_fd)[1] + 1)
    monkeypatch.setattr(origin, "_identities", lambda path: (other, (7, 8)))
    rec = origin.origin_of("/run/netns/pod", pod_fd)
    assert (rec["netnsDev"], rec["netnsIno"]) == _ident(pod_fd) and "netnsDirIno" not in rec


def test_a_path_that_shows_the_callers_netns_records_its_directory(
        monkeypatch: pytest.MonkeyPatch, pod_fd: int) -> None:
    monkeypatch.setattr(origin, "_identities", lambda path: (_ident(pod_fd), (7, 8)))
    rec = origin.origin_of("/run/netns/pod", pod_fd)
    assert (rec["netnsIno"], rec["netnsDirDev"], rec["netnsDirIno"]) == (_ident(pod_fd)[1], 7, 8)
    assert origin.origin_of("/run/netns/pod")["netnsDirIno"] == 8  # in-process: as before
