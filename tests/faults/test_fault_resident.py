"""Faults of the resident path (issue 14 item 4): a request the client abandoned
must not act, and a rollback must only undo what its own request did; a request
that stalls in the server does not hold up the next one.

The client's deadline is cut to 1 s and the kubelet's first answer (the one the
resident server waits for) takes 2.5 s; the client gives up, runs the ADD
in-process (the kubelet then answers at once) and the pod is up. The server's
late copy of the ADD must then leave the running pod as it is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cnirunner import data_files, rdma_blocks
from fakekubelet import FakeKubelet
from integration.conftest import Rig, built_binary, rig, runner  # noqa: F401
from resident_rig import Serve

pytestmark = pytest.mark.root
RESOURCE = "vke.volcengine.com/rdma"


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[FakeKubelet]:
    k = FakeKubelet(pr_socket=str(tmp_path / "pr.sock")).start()
    try:
        yield k
    finally:
        k.stop()


def _slow_first_answer(k: FakeKubelet, delay: float) -> threading.Thread:
    """The first PodResources call sleeps ``delay``; later ones answer at once."""
    k.delay = delay

    def watch() -> None:
        deadline = time.monotonic() + 30
        while not k.calls and time.monotonic() < deadline:
            time.sleep(0.01)
        k.delay = 0.0

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def _wait_served(serve: Serve, command: str, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while serve.served(command) < count:
        assert time.monotonic() < deadline, f"the server never finished its {command}"
        time.sleep(0.05)


def test_late_resident_add_leaves_the_finished_pod_alone(
        rig: Rig, kubelet: FakeKubelet, client: list[str] | None,  # noqa: F811
        tmp_path: Path) -> None:
    rig.nic()
    pod = rig.pod()
    kubelet.set_pod("default", "p1", {RESOURCE: ["rnic0@0"]})
    serve = Serve(rig.node.ns, tmp_path / "r.sock", tmp_path / "serve.log")
    try:
        chain = rig.chain("shared-multi", binary=client, residentSocket=str(serve.sock),
                          kubelet={"podResourcesSocket": kubelet.pr_socket,
                                   "checkpointFile": str(tmp_path / "no-checkpoint"),
                                   "devicePluginDir": str(tmp_path)})
        chain.env = {"RDMA_CNI_RESIDENT_TIMEOUT": "1"}
        watcher = _slow_first_answer(kubelet, 2.5)
        add = chain.add("c1", pod.path, rdma_blocks(1))
        watcher.join()
        assert add.rc == 0, add.out
        assert pod.addrs("eth1") == ["198.51.100.2/26"]
        files = data_files(rig.data_dir)
        _wait_served(serve, "ADD", 1)  # the abandoned copy has run to its end
        time.sleep(0.2)
        assert pod.addrs("eth1") == ["198.51.100.2/26"], "the late ADD tore the pod down"
        assert data_files(rig.data_dir) == files, "the late ADD changed the store"
        assert "abandoned" in rig.log_file.read_text()  # the request's own log file
        assert chain.check("c1").rc == 0
        assert chain.delete("c1").rc == 0
        assert sorted(pod.links()) == ["eth0", "lo"]
    finally:
        serve.stop()


def test_a_stalled_request_does_not_hold_up_the_next(
        rig: Rig, kubelet: FakeKubelet, tmp_path: Path) -> None:  # noqa: F811
    """One server process, busy with an ADD whose kubelet answer takes 2 s: it leaves the
    next connection to an idle sibling for a moment only (there is none), then serves
    it too, while the first still waits."""
    rig.nic()
    slow_pod, next_pod = rig.pod(), rig.pod()
    kubelet.set_pod("default", "p1", {RESOURCE: ["rnic0@0"]})
    serve = Serve(rig.node.ns, tmp_path / "r.sock", tmp_path / "serve.log",
                  options=["--workers", "1"])
    try:
        slow = rig.chain("shared-multi", residentSocket=str(serve.sock),
                         kubelet={"podResourcesSocket": kubelet.pr_socket,
                                  "checkpointFile": str(tmp_path / "no-checkpoint"),
                                  "devicePluginDir": str(tmp_path)})
        other = rig.chain("shared-multi", residentSocket=str(serve.sock))
        watcher = _slow_first_answer(kubelet, 2.0)
        first: list = []
        t = threading.Thread(target=lambda: first.append(slow.add("c1", slow_pod.path,
                                                                  rdma_blocks(1))))
        t.start()
        deadline = time.monotonic() + 20
        while not kubelet.calls:  # the first ADD is in the server, waiting for the kubelet
            assert time.monotonic() < deadline, "the first ADD never asked the kubelet"
            time.sleep(0.01)
        add = other.add("c2", next_pod.path, rdma_blocks(1))
        assert add.rc == 0, add.out
        assert t.is_alive(), "the second ADD was answered only after the stalled one"
        assert serve.served("ADD") == 1, "the second ADD did not go through the server"
        t.join()
        watcher.join()
        assert first[0].rc == 0, first[0].out
        assert serve.served("ADD") == 2
        for chain, cid in ((slow, "c1"), (other, "c2")):
            assert chain.delete(cid).rc == 0
    finally:
        serve.stop()
