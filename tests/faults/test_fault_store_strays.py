"""Something in the data dir the store never wrote must not stop the node's DELs.

- A regular file where the store expects a directory (``corrupt``, ``state``,
  ``addrs``): every DEL failed with code 5 (``failed to list …: Not a directory``),
  even of a container never added, which stops the chain before the primary's DEL.
  A directory that is not one holds nothing a DEL could undo: DEL succeeds and logs
  it; ADD refuses the data dir with a CNI error and leaves nothing behind.
- A file among ``ips/`` (release 0.1.0's pools): every ADD failed with code 5.
- A FIFO in a record's place: the store's open of it blocked, so DEL, ``ls`` and
  the agent hung with no deadline. It is quarantined as a corrupt record now.

Oracles: the CNI answers, ``ip -j`` in the pods and the node (the rig asserts the
node netns is as before), the files of the data dir."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cnirunner import PYTHON, REPO, rdma_blocks

pytestmark = pytest.mark.root
#: a state record's name (a digest), as no key has it
FIFO_NAME = "0" * 40 + ".json"


def _stray(rig, name: str) -> Path:  # type: ignore[no-untyped-def]
    path = Path(rig.data_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        path.rmdir()  # left empty by a DEL: the store does not remove its directories
    path.write_text("x\n")
    return path


@pytest.mark.parametrize(("name", "mode"), [("corrupt", "shared-multi"), ("state", "shared-multi"),
                                           ("addrs", "shared-multi"), ("nics", "exclusive")])
def test_a_file_where_a_directory_belongs_does_not_fail_del(rig, faults, name: str,  # type: ignore[no-untyped-def]
                                                            mode: str) -> None:
    rig.nic("rnic0", "198.51.100.1/26")
    chain = faults.chain(mode)
    pod = rig.pod()
    assert chain.add("cid-a", pod.path, rdma_blocks(1)).rc == 0
    assert chain.delete("cid-a").rc == 0
    stray = _stray(rig, name)
    try:
        never = chain.delete("cid-never-added")
        assert never.rc == 0 and never.out is None, never
        refused = chain.add("cid-b", pod.path, rdma_blocks(1))
        if name == "corrupt":  # ADD has no use for it
            assert refused.rc == 0, refused
            assert chain.delete("cid-b").rc == 0
        else:
            assert refused.code == 5, refused
            assert f"failed to create directory {stray}" in refused.out["msg"], refused
            assert "Traceback" not in refused.err, refused.err
            assert chain.delete("cid-b").rc == 0
        assert set(pod.links()) == {"lo", "eth0"}
        assert "is not a directory" in faults.log_text() + never.err
    finally:
        stray.unlink()


def test_del_of_an_attachment_goes_on_past_a_stray_corrupt_file(rig, faults) -> None:  # type: ignore[no-untyped-def]
    """The reviewer's repro: ADD, then ``: > $dataDir/corrupt``, then DEL."""
    rig.nic("rnic0", "198.51.100.1/26")
    chain = faults.chain("shared-multi")
    pod = rig.pod()
    assert chain.add("cid-a", pod.path, rdma_blocks(2)).rc == 0
    stray = _stray(rig, "corrupt")
    try:
        run = chain.delete("cid-a")
        assert run.rc == 0, run
        assert set(pod.links()) == {"lo", "eth0"}
        assert rig.files() == []
    finally:
        stray.unlink()


@pytest.mark.parametrize("name", ["ips/junk", "ips/198.51.100.0_26"])
def test_a_stray_file_among_the_old_pools_does_not_fail_add(rig, faults, name: str) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0", "198.51.100.1/26")
    chain = faults.chain("shared-multi")
    pod = rig.pod()
    stray = _stray(rig, name)
    try:
        run = chain.add("cid-a", pod.path, rdma_blocks(2))
        assert run.rc == 0, run
        assert sorted(pod.addrs("eth1") + pod.addrs("eth2")) == ["198.51.100.2/26",
                                                                 "198.51.100.3/26"]
        assert chain.delete("cid-a").rc == 0
        assert set(pod.links()) == {"lo", "eth0"}
    finally:
        stray.unlink()


def _ls(rig, conf: dict) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def,type-arg]
    path = rig.tmp / "ls.json"
    path.write_text(json.dumps(conf))
    return subprocess.run([str(PYTHON), "-m", "rdma_cni", "ls", "--json", "--config", str(path)],
                          capture_output=True, text=True, timeout=20,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_a_fifo_among_the_records_is_quarantined_not_waited_on(rig, faults) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0", "198.51.100.1/26")
    chain = faults.chain("shared-multi")
    pod = rig.pod()
    assert chain.add("cid-a", pod.path, rdma_blocks(1)).rc == 0
    fifo = Path(rig.data_dir) / "state" / FIFO_NAME
    os.mkfifo(fifo)
    held = Path(rig.data_dir) / "addrs" / "198.51.100.3"
    os.mkfifo(held)
    try:
        never = chain.delete("cid-never-added")  # lists every record: quarantines the FIFO
        assert never.rc == 0, never
        assert not fifo.exists()
        assert [p.name.startswith(FIFO_NAME) for p in (Path(rig.data_dir) / "corrupt").iterdir()
                ] == [True]
        os.mkfifo(fifo)
        listed = _ls(rig, chain.plugin)  # reads the data dir read-only: skips it
        assert listed.returncode == 0, listed.stderr
        fifo.unlink()
        b = rig.pod()
        run = chain.add("cid-b", b.path, rdma_blocks(1))
        assert run.rc == 0, run
        assert b.addrs("eth1") == ["198.51.100.4/26"], "an unreadable reservation is held"
        assert chain.delete("cid-b").rc == 0
        assert chain.delete("cid-a").rc == 0
        assert set(pod.links()) == {"lo", "eth0"}
    finally:
        held.unlink()
        fifo.unlink(missing_ok=True)
        for p in (Path(rig.data_dir) / "corrupt").iterdir():
            p.unlink()


def test_a_corrupt_record_beside_a_stray_corrupt_file_fails_no_del(rig, faults) -> None:  # type: ignore[no-untyped-def]
    """``: > $dataDir/corrupt`` and a corrupt state record: the store could not move the
    record aside, and every DEL that lists the states failed with code 5. The record
    stays where it is, reads as absent and is logged; the DEL of its own container
    salvages by the alias mark as for any corrupt record."""
    rig.nic("rnic0", "198.51.100.1/26")
    chain = faults.chain("shared-multi")
    pod = rig.pod()
    assert chain.add("cid-a", pod.path, rdma_blocks(1)).rc == 0
    [own] = (Path(rig.data_dir) / "state").iterdir()
    stray = _stray(rig, "corrupt")
    other = Path(rig.data_dir) / "state" / FIFO_NAME  # no key has it
    other.write_text('{"schema": 1, "key": {"netw')
    try:
        never = chain.delete("cid-never-added")  # lists every state record
        assert never.rc == 0 and never.out is None, never
        assert other.read_text() == '{"schema": 1, "key": {"netw'
        assert f"corrupt state record {other}" in faults.log_text()
        assert "left in place" in faults.log_text()
        own.write_text("{")  # the attachment's own record is corrupt now
        run = chain.delete("cid-a")
        assert run.rc == 0, run
        assert set(pod.links()) == {"lo", "eth0"}
        assert rig.files() == [f"state/{FIFO_NAME}"]
        assert stray.read_text() == "x\n"
    finally:
        other.unlink()
        stray.unlink()


def _no_lock(path: Path, what: str) -> None:
    path.unlink()
    if what == "directory":
        path.mkdir()
    elif what == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(path.parent.parent / "elsewhere")


@pytest.mark.parametrize(("what", "kind"), [("directory", "a directory"), ("fifo", "a FIFO"),
                                            ("symlink", "a symbolic link")])
def test_a_lock_that_is_no_regular_file_fails_only_what_needs_the_lock(  # type: ignore[no-untyped-def]
        rig, faults, what: str, kind: str) -> None:
    """The store's lock a directory, a FIFO or a symlink: DEL of a container the store knows
    nothing of succeeds; ADD fails with code 5 naming it and leaves nothing; DEL of an
    attachment keeps its record (a retry finishes once the lock is a file again); STATUS
    says the data dir is unusable (it said available for a FIFO and a symlink, and
    created the symlink's target). Nothing waits on the FIFO."""
    rig.nic("rnic0", "198.51.100.1/26")
    chain = faults.chain("shared-multi")
    pod, b = rig.pod(), rig.pod()
    assert chain.add("cid-a", pod.path, rdma_blocks(1)).rc == 0
    lock = Path(rig.data_dir) / "lock"
    _no_lock(lock, what)
    want = f"failed to open lock file {lock}: {kind} is in its place, not a regular file"
    try:
        never = chain.delete("cid-never-added")
        assert never.rc == 0 and never.out is None, never
        refused = chain.add("cid-b", b.path, rdma_blocks(1))
        assert refused.code == 5 and refused.out["msg"] == want, refused
        assert "Traceback" not in refused.err, refused.err
        assert set(b.links()) == {"lo", "eth0"}
        kept = chain.delete("cid-a")
        assert kept.code == 5 and kept.out["msg"] == want, kept
        assert len(rig.files()) == 2  # its state and its reservation
        status = faults.chain("shared-multi", cni_version="1.1.0").status()
        assert status.code == 50 and want in status.out["msg"], status
        assert not (Path(rig.data_dir).parent / "elsewhere").exists()
    finally:
        if what == "directory":
            lock.rmdir()
        else:
            lock.unlink()
    assert chain.delete("cid-a").rc == 0
    assert set(pod.links()) == {"lo", "eth0"}
