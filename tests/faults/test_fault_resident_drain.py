"""`serve` told to stop (SIGTERM: a DaemonSet rollout) while an ADD is in the middle of its
netlink steps: it accepts nothing more at once (its socket path goes, a new server binds
it), answers the ADD it is running, and exits 0; a request stuck past the drain's bound
is abandoned (its caller runs it in-process) and the process exits all the same.

The server's ADD is held at step 4 of shared-multi (its macvlan made and renamed eth1 in
the pod, before the addresses) by ``RDMA_CNI_TEST_SLEEP_AT_STEP`` (rdma_cni/testhooks.py),
given to `serve` alone. The client's own environment has ``RDMA_CNI_TEST_FAIL_AT_STEP=0``:
were the ADD run in-process (the server gone before answering), it would fail, so an ADD
that succeeds is the server's answer.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from cnirunner import PYTHON, REPO, Chain, PluginRun, Pod, rdma_blocks
from support.resident import Serve
from support.rigs import Rig

pytestmark = pytest.mark.root
HELD_AT = 4  # shared-multi, one interface: check name, create, rename, sysctls | addresses
NO_INPROC = {"RDMA_CNI_TEST_FAIL_AT_STEP": "0"}


def _held_serve(rig: Rig, tmp_path: Path, seconds: float, options: list[str]) -> Serve:
    return Serve(rig.node.ns, tmp_path / "r.sock", tmp_path / "serve.log",
                 argv=("env", f"PYTHONPATH={REPO}",
                       f"RDMA_CNI_TEST_SLEEP_AT_STEP={HELD_AT}:{seconds}",
                       str(PYTHON), "-m", "rdma_cni"), options=options)


def _add_in_flight(pod: Pod, chain: Chain,
                   env: dict[str, str]) -> tuple[threading.Thread, list[PluginRun]]:
    """An ADD started in a thread, returned once the server holds it at its step."""
    got: list[PluginRun] = []
    t = threading.Thread(target=lambda: got.append(chain.add("c1", pod.path, rdma_blocks(1),
                                                             env=env)))
    t.start()
    deadline = time.monotonic() + 30
    while "eth1" not in pod.links():  # made and renamed: the server is at its step
        assert t.is_alive() and time.monotonic() < deadline, got
        time.sleep(0.02)
    return t, got


def _refused(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            return True
    return False


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_drains_the_add_in_flight(rig: Rig, client: list[str] | None,
                                          tmp_path: Path, workers: str) -> None:
    rig.nic()
    pod, other_pod = rig.pod(), rig.pod()
    serve = _held_serve(rig, tmp_path, 8, ["--workers", workers])
    successor: Serve | None = None
    try:
        chain = rig.chain("shared-multi", binary=client, residentSocket=str(serve.sock))
        t, got = _add_in_flight(pod, chain, NO_INPROC)
        serve.proc.terminate()  # SIGTERM: the ADD is in the middle of its steps
        time.sleep(0.3)
        assert not serve.sock.exists(), "the socket path outlived the stop"
        assert _refused(serve.sock), "the stopping server still accepts"
        assert t.is_alive() and serve.proc.poll() is None, "the ADD was not waited for"
        # a new server binds the path while the old one drains, and serves the next ADD
        successor = Serve(rig.node.ns, serve.sock, tmp_path / "next.log")
        assert t.is_alive(), "the held ADD ended before the test could look"
        other = chain.add("c2", other_pod.path, rdma_blocks(1))
        assert other.rc == 0, other.out
        assert successor.served("ADD") == 1
        t.join(30)
        add = got[0]
        assert add.rc == 0, (add, serve.stderr)  # the server's answer: in-process fails
        assert [i["name"] for i in add.out["interfaces"]][-1] == "eth1", add.out
        assert pod.addrs("eth1") == ["198.51.100.2/26"]
        assert serve.proc.wait(timeout=10) == 0, serve.stderr
        log = serve.log.read_text()
        assert "resident ADD c1 exit 0" in log and "abandoned" not in log, log
        assert serve.served("ADD") == 1  # c2 never reached the old server
        for cid in ("c1", "c2"):
            assert chain.delete(cid).rc == 0
    finally:
        serve.stop()
        if successor is not None:
            successor.stop()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_drain_is_bounded(rig: Rig, tmp_path: Path, workers: str) -> None:
    """An ADD held past ``--drain-timeout``: the process exits 0 after the bound, logging
    the request it abandoned; the client runs the ADD in-process."""
    rig.nic()
    pod = rig.pod()
    serve = _held_serve(rig, tmp_path, 60, ["--workers", workers, "--drain-timeout", "1"])
    try:
        chain = rig.chain("shared-multi", residentSocket=str(serve.sock))
        t, got = _add_in_flight(pod, chain, {})
        start = time.monotonic()
        serve.proc.terminate()
        assert serve.proc.wait(timeout=15) == 0, serve.stderr
        took = time.monotonic() - start
        assert 0.8 < took < 6, took
        assert "exits with 1 request(s) still running, abandoned (drain timeout)" in \
            serve.log.read_text() + serve.stderr
        t.join(60)
        assert got[0].rc == 0, got[0]  # in-process, after the server's EOF
        assert pod.addrs("eth1") == ["198.51.100.2/26"]
        assert chain.delete("c1").rc == 0
    finally:
        serve.stop()


def test_a_second_sigterm_ends_the_drain(rig: Rig, tmp_path: Path) -> None:
    rig.nic()
    pod = rig.pod()
    serve = _held_serve(rig, tmp_path, 60, ["--workers", "2"])  # the default drain: 20 s
    try:
        chain = rig.chain("shared-multi", residentSocket=str(serve.sock))
        t, got = _add_in_flight(pod, chain, {})
        serve.proc.terminate()
        time.sleep(1)
        assert serve.proc.poll() is None, "the first SIGTERM did not wait for the ADD"
        start = time.monotonic()
        serve.proc.terminate()
        assert serve.proc.wait(timeout=10) == 0, serve.stderr
        assert time.monotonic() - start < 3
        assert "abandoned (told to stop again)" in serve.log.read_text() + serve.stderr
        t.join(60)
        assert got[0].rc == 0, got[0]
        assert chain.delete("c1").rc == 0
    finally:
        serve.stop()
