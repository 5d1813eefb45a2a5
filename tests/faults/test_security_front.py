"""Security of the exec'd side (issue 27 items 6 and 7), through the native front and
the Python entry alike: an answer that is no complete CNI answer is never relayed, and
a CNI_NETNS that is no network namespace (a FIFO) is refused at once, never waited on.

Oracle: the plugin's stdout and exit status, the pod's links (`ip -j`), wall time.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cnirunner import Chain, k8s_args, pod_networks, rdma_blocks, run_plugin, vpc_result
from support.resident import FakeServer
from support.rigs import Rig

pytestmark = pytest.mark.root


def _answer(exit_code: int, stdout: bytes) -> Callable[[socket.socket], None]:
    def act(conn: socket.socket) -> None:
        body = b"A" + struct.pack("=iI", exit_code, len(stdout)) + stdout + struct.pack("=I", 0)
        conn.sendall(struct.pack("=I", len(body)) + body)
    return act


@pytest.mark.parametrize("exit_code,stdout", [(0, b""), (0, b"  \n"), (0, b"[]"),
                                              (1, b""), (0, b'{"cniVersion":"1.0.0"')],
                         ids=["success-empty", "success-blank", "success-list", "failure-empty",
                              "success-cut"])
def test_an_add_answer_without_its_result_is_not_relayed(
        rig: Rig, client: list[str] | None, tmp_path: Path, exit_code: int,
        stdout: bytes) -> None:
    rig.nic()
    pod = rig.pod()
    fake = FakeServer(tmp_path / "f.sock", _answer(exit_code, stdout))
    try:
        chain = rig.chain("shared-multi", binary=client, residentSocket=str(fake.path))
        add = chain.add("c1", pod.path, rdma_blocks(1))
        assert fake.accepted == 1
    finally:
        fake.close()
    assert add.rc == 0 and isinstance(add.out, dict), add  # the bundle ran it in-process
    assert [i["name"] for i in add.out["interfaces"]] == ["eth0", "eth1"]
    assert pod.addrs("eth1") == ["198.51.100.2/26"]
    in_proc = rig.chain("shared-multi", binary=client, residentSocket="")
    in_proc.cache = chain.cache
    assert in_proc.delete("c1").rc == 0
    assert sorted(pod.links()) == ["eth0", "lo"]


def test_a_fifo_as_netns_is_refused_without_waiting(rig: Rig, client: list[str] | None,
                                                    tmp_path: Path) -> None:
    """No writer ever opens the FIFO: an open that waits for one hangs until killed."""
    rig.nic()
    fifo = tmp_path / "netns-fifo"
    os.mkfifo(fifo)
    fake = FakeServer(tmp_path / "f.sock", _answer(0, b""))  # a forwarded request fails
    chain = rig.chain("shared-multi", binary=client)
    try:
        _refused_in_time(chain, rig, client, str(fifo), [str(fake.path), ""])
    finally:
        fake.close()
    assert fake.accepted == 0


def _refused_in_time(chain: Chain, rig: Rig, client: list[str] | None, netns: str,
                     sockets: list[str]) -> None:
    for resident in sockets:
        chain.plugin["residentSocket"] = resident
        for command in ("ADD", "DEL"):
            conf = chain.conf(vpc_result(netns), pod_networks(rdma_blocks(1)))
            start = time.monotonic()
            run = run_plugin(command, conf, container_id="c1", netns=netns,
                             cni_args=k8s_args("default", "p1", "c1"), node_ns=rig.node.ns,
                             binary=client, timeout=8)
            assert time.monotonic() - start < 6
            if command == "ADD":
                assert run.code == 4 and "not a network namespace" in run.out["msg"], run
            else:
                assert run.rc == 0, run  # DEL works from the saved state (there is none)
