"""The resident path: the exec'd plugin forwards to `rdma-cni serve` running in the
node netns, and runs in-process whenever the server is absent, refuses or hangs.
Both paths share one store: what one ADDs, the other DELs."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cnirunner import rdma_blocks, sh
from support.mute import muted
from support.resident import Serve

pytestmark = pytest.mark.root


@pytest.fixture
def serve(rig, tmp_path: Path) -> Iterator[Serve]:  # type: ignore[no-untyped-def]
    s = Serve(rig.node.ns, tmp_path / "r.sock", tmp_path / "serve.log")
    try:
        yield s
    finally:
        s.stop()


def test_add_check_del_through_the_resident_server(rig, serve: Serve) -> None:  # type: ignore[no-untyped-def]
    rig.nic()
    pod = rig.pod()
    chain = rig.chain("shared-multi", residentSocket=str(serve.sock))
    add = chain.add("c1", pod.path, rdma_blocks(2))
    assert add.rc == 0, add.out
    assert sorted(pod.links()) == ["eth0", "eth1", "eth2", "lo"]
    assert pod.addrs("eth1") == ["198.51.100.2/26"] and pod.addrs("eth2") == ["198.51.100.3/26"]
    assert chain.check("c1").rc == 0
    assert chain.delete("c1").rc == 0
    assert sorted(pod.links()) == ["eth0", "lo"]
    assert (serve.served("ADD"), serve.served("CHECK"), serve.served("DEL")) == (1, 1, 1)


def test_pass_through_never_reaches_the_server(rig, serve: Serve) -> None:  # type: ignore[no-untyped-def]
    rig.nic()
    pod = rig.pod()
    chain = rig.chain("shared-multi", residentSocket=str(serve.sock))
    add = chain.add("c1", pod.path, [{"cniConf": {"name": "other"}}])
    assert add.rc == 0 and len(add.out["interfaces"]) == 1
    assert serve.served("ADD") == 0


def test_paths_share_the_store(rig, serve: Serve) -> None:  # type: ignore[no-untyped-def]
    rig.nic()
    pod = rig.pod()
    chain = rig.chain("shared-multi", residentSocket=str(serve.sock))
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    serve.stop()  # the socket file goes: the next command runs in-process
    in_proc = rig.chain("shared-multi", residentSocket=str(serve.sock))
    in_proc.cache = chain.cache
    assert in_proc.add("c2", pod.path, rdma_blocks(1, ifName="rd2")).rc == 0
    assert pod.addrs("rd2") == ["198.51.100.3/26"]  # .2 is the resident ADD's: no duplicate
    assert in_proc.delete("c1").rc == 0 and in_proc.delete("c2").rc == 0


def test_server_in_another_netns_is_refused_and_the_plugin_runs_in_process(
        rig, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    other = f"{rig.node.prefix}x"
    sh("ip", "netns", "add", other)
    try:
        s = Serve(other, tmp_path / "o.sock", tmp_path / "o.log")
        try:
            rig.nic()
            pod = rig.pod()
            chain = rig.chain("shared-multi", residentSocket=str(s.sock))
            assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
            assert pod.addrs("eth1") == ["198.51.100.2/26"]
            assert s.served("ADD") == 0
            assert chain.delete("c1").rc == 0
        finally:
            s.stop()
    finally:
        sh("ip", "netns", "del", other)


def test_hung_server_falls_back_after_the_bounded_wait(rig, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "hung.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    with muted(listener):  # accept, never answer
        rig.nic()
        pod = rig.pod()
        chain = rig.chain("shared-multi", residentSocket=str(path))
        chain.env = {"RDMA_CNI_RESIDENT_TIMEOUT": "1"}
        start = time.monotonic()
        add = chain.add("c1", pod.path, rdma_blocks(1))
        assert add.rc == 0, add.out
        assert 1.0 <= time.monotonic() - start < 20
        assert chain.delete("c1").rc == 0
    os.unlink(path)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out += [int(x) for x in text]
    return out


def test_workers_share_the_store_and_stop_together(rig, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rig.nic()
    s = Serve(rig.node.ns, tmp_path / "w.sock", tmp_path / "w.log")
    try:
        deadline = time.monotonic() + 10  # the socket is in place before the workers fork
        while not (workers := _children(s.proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(workers) >= 1, "serve forked no worker"
        pods = [rig.pod() for _ in range(6)]
        chain = rig.chain("shared-multi", residentSocket=str(s.sock))
        runs: dict[int, object] = {}

        def add(i: int) -> None:
            runs[i] = chain.add(f"c{i}", pods[i].path, rdma_blocks(1))

        threads = [threading.Thread(target=add, args=(i,)) for i in range(len(pods))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(r.rc == 0 for r in runs.values()), runs  # type: ignore[attr-defined]
        addrs = [a for p in pods for a in p.addrs("eth1")]
        assert len(addrs) == len(pods) == len(set(addrs)), addrs
        assert s.served("ADD") == len(pods)
        for i in range(len(pods)):
            assert chain.delete(f"c{i}").rc == 0
    finally:
        s.stop()
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or \
            "zombie" in Path(f"/proc/{pid}/status").read_text(), f"worker {pid} outlived serve"


def test_a_request_logs_to_its_own_config_s_log_file(rig, serve: Serve) -> None:  # type: ignore[no-untyped-def]
    """As in-process: the request's lines go to its config's logFile, at its logLevel
    and in its logFormat; the server's own log keeps only its own lines."""
    import json

    rig.nic()
    pod = rig.pod()
    chain = rig.chain("shared-multi", residentSocket=str(serve.sock), logFormat="json")
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    assert chain.delete("c1").rc == 0
    assert (serve.served("ADD"), serve.served("DEL")) == (1, 1)
    docs = [json.loads(line) for line in rig.log_file.read_text().splitlines()]
    text = " ".join(d["msg"] for d in docs)
    assert "no kubelet allocation source" in text and "DEL of vpc-cni/c1 released" in text
    own = serve.log.read_text()
    assert "kubelet" not in own and "released" not in own and "resident ADD" in own, own
