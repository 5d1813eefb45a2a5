"""``serve`` answers before its bookkeeping: the operation's count for the exporter
(``metricsFile``) is written once the whole answer is on the caller's socket, so the
runtime does not wait for it."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from rdma_cni.cni import dispatch
from rdma_cni.cni.request import Request
from rdma_cni.resident import protocol
from rdma_cni.resident.server import Server


class _Handlers:
    def add(self, req: Request) -> dict[str, Any]:
        raise AssertionError("not called")

    def delete(self, req: Request) -> None:
        return None

    def check(self, req: Request) -> None:
        return None

    def status(self, req: Request) -> None:
        return None

    def gc(self, req: Request) -> None:
        return None


def test_the_count_is_written_after_the_answer_is_out(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    conf = {"cniVersion": "1.1.0", "name": "n", "type": "rdma-cni",
            "dataDir": str(tmp_path / "data"), "logFile": "",
            "metricsFile": str(tmp_path / "metrics")}
    env = {"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "c1", "CNI_NETNS": "",
           "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin"}
    server_end, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    seen: list[bytes] = []
    record = dispatch._record

    def counted(*args: Any) -> None:
        try:
            seen.append(client.recv(1 << 16, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except BlockingIOError:
            seen.append(b"")
        record(*args)

    monkeypatch.setattr(dispatch, "_record", counted)
    fds = [os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC),
           os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]
    server = Server(str(tmp_path / "s.sock"), handlers=_Handlers())
    try:
        server.handle(server_end, protocol.encode_request(env, json.dumps(conf).encode()),
                      fds, lambda: None)
        (peeked,) = seen
        assert len(peeked) == protocol.reply_size(peeked), peeked  # the whole answer
        assert protocol.decode_reply(peeked)["exit"] == 0
        assert (tmp_path / "metrics").stat().st_size > 0  # and the count was written
    finally:
        client.close()
