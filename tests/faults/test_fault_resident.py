"""Faults of the resident path (issue 14 item 4): a request the client abandoned
must not act, and a rollback must only undo what its own request did; a request
that stalls in the server does not hold up the next one.

The client's deadline is cut to 1 s and the kubelet's first answer (the one the
resident server waits for) takes 2.5 s; the client gives up, runs the ADD
in-process (the kubelet then answers at once) and the pod is up. The server's
late copy of the ADD must then leave the running pod as it is.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cnirunner import PYTHON, REPO, data_files, ip_json, rdma_blocks, snapshot
from support.fakes.kubelet import FakeKubelet
from support.resident import Serve
from support.rigs import Rig

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
        rig: Rig, kubelet: FakeKubelet, client: list[str] | None,
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
        rig: Rig, kubelet: FakeKubelet, tmp_path: Path) -> None:
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


# A late duplicate ADD: the server stops (SIGSTOP) at a step boundary of its ADD, after
# its pending state; the client gives up after 1 s and runs the ADD in-process, which
# takes the attachment over and makes the pod's interface; then the server resumes.
# Boundaries (shared-multi, one interface): 0 right after the pending state, 2 after
# its macvlan was made (before the rename), 8 after its last step. exclusive: stopped
# with the NIC moved in (2), then failing at the next step (3), so that its rollback runs.
LATE = [("shared-multi", 0, None), ("shared-multi", 2, None), ("shared-multi", 8, None),
        ("exclusive", 2, 3)]


@pytest.mark.parametrize(("mode", "stop", "fail"), LATE,
                         ids=[f"{m}-stop{s}" + (f"-fail{f}" if f else "") for m, s, f in LATE])
def test_a_stalled_server_resuming_changes_nothing_of_the_pod(
        rig: Rig, client: list[str] | None, tmp_path: Path,
        mode: str, stop: int, fail: int | None) -> None:
    rig.nic()
    pod = rig.pod()
    seams = [f"RDMA_CNI_TEST_STOP_AT_STEP={stop}"] + (
        [f"RDMA_CNI_TEST_FAIL_AT_STEP={fail}"] if fail is not None else [])
    serve = Serve(rig.node.ns, tmp_path / "r.sock", tmp_path / "serve.log",
                  argv=("env", f"PYTHONPATH={REPO}", *seams, str(PYTHON), "-m", "rdma_cni"),
                  options=["--workers", "1"])  # one process: the one that stops
    try:
        chain = rig.chain(mode, binary=client, residentSocket=str(serve.sock))
        chain.env = {"RDMA_CNI_RESIDENT_TIMEOUT": "1"}
        add = chain.add("c1", pod.path, rdma_blocks(1))
        assert add.rc == 0, add.out
        assert _stopped(serve.proc.pid), "the server never stopped at its step"
        before = _pod_view(pod)
        files = data_files(rig.data_dir)
        os.kill(serve.proc.pid, signal.SIGCONT)
        _wait_served(serve, "ADD", 1)  # the late copy has run to its end
        time.sleep(0.2)
        assert _pod_view(pod) == before, "the late ADD changed the pod"
        assert data_files(rig.data_dir) == files, "the late ADD changed the store"
        assert "resident ADD c1 exit 1 " in serve.log.read_text(), "the late ADD succeeded"
        assert chain.check("c1").rc == 0
        assert chain.delete("c1").rc == 0
        assert sorted(pod.links()) == ["eth0", "lo"]
    finally:
        os.kill(serve.proc.pid, signal.SIGCONT)
        serve.stop()


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def _pod_view(pod) -> dict:  # type: ignore[no-untyped-def]
    """The pod's links (index, name, address, state) and addresses of every family."""
    return {"links": sorted((lk["ifindex"], lk["ifname"], lk["address"], tuple(lk["flags"]))
                            for lk in ip_json(pod.name, "link", "show")),
            "addrs": snapshot(pod.name)["addrs"], "rules": snapshot(pod.name)["rules"]}
