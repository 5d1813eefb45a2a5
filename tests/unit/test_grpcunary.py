"""The unary gRPC client (adapters/grpcunary.py) against a real gRPC server (grpcio, the
reference implementation) and against servers that misbehave: no answer, a hang-up,
not HTTP/2 at all, an answer too large."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support

from support.fakes.kubelet import FakeKubelet, pod_resources

from rdma_cni.adapters import grpcunary
from rdma_cni.proto import podresources_v1_pb2 as pr

LIST = "/v1.PodResourcesLister/List"


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[FakeKubelet]:
    with pod_resources(str(tmp_path / "k.sock")) as fake:
        yield fake


def _list(path: str, timeout: float = 5.0) -> pr.ListPodResourcesResponse:
    raw = grpcunary.call(path, LIST, pr.ListPodResourcesRequest().SerializeToString(), timeout)
    return pr.ListPodResourcesResponse.FromString(raw)


def test_answer_larger_than_every_window_arrives_whole(kubelet: FakeKubelet) -> None:
    """20,000 pods (~1.4 MB): more than the 1 MiB window the client announces, so the
    answer only completes when the client hands flow-control credit back as it reads."""
    for i in range(20000):
        kubelet.set_pod("team", f"job-{i}", {"vke.volcengine.com/rdma": [f"0000:{i:04x}:00.0"]})
    got = _list(str(kubelet.pr_socket))
    assert len(got.pod_resources) == 20000
    assert got.ByteSize() > grpcunary._WINDOW
    names = {p.name for p in got.pod_resources}
    assert "job-0" in names and "job-19999" in names


def test_server_status_is_the_error_code(kubelet: FakeKubelet) -> None:
    kubelet.get_mode = "notfound"
    req = pr.GetPodResourcesRequest(pod_name="ghost", pod_namespace="team")
    with pytest.raises(grpcunary.RpcError) as err:
        grpcunary.call(str(kubelet.pr_socket), "/v1.PodResourcesLister/Get",
                       req.SerializeToString(), 5.0)
    assert err.value.code == grpcunary.NOT_FOUND and err.value.name == "NOT_FOUND"
    assert err.value.details == "pod ghost not found"


def test_unknown_method_is_unimplemented(kubelet: FakeKubelet) -> None:
    with pytest.raises(grpcunary.RpcError) as err:
        grpcunary.call(str(kubelet.pr_socket), "/v1.PodResourcesLister/Nope", b"", 5.0)
    assert err.value.code == grpcunary.UNIMPLEMENTED


def test_slow_server_is_deadline_exceeded_on_time(kubelet: FakeKubelet) -> None:
    kubelet.delay = 2.0
    t0 = time.monotonic()
    with pytest.raises(grpcunary.RpcError) as err:
        _list(str(kubelet.pr_socket), timeout=0.3)
    assert err.value.code == grpcunary.DEADLINE_EXCEEDED
    assert time.monotonic() - t0 < 1.5


def _raw_server(path: str, reply: bytes | None, hold: float = 0.0) -> threading.Thread:
    """A unix server that reads the client's first bytes, then answers ``reply`` (None:
    stays silent for ``hold`` seconds) and hangs up."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        if reply is None:
            time.sleep(hold)
        else:
            conn.sendall(reply)
        conn.close()
        srv.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("reply", [b"", b"HTTP/1.1 400 Bad Request\r\n\r\n", b"\xff" * 64])
def test_a_server_that_is_not_grpc_is_an_rpc_error(tmp_path: Path, reply: bytes) -> None:
    path = str(tmp_path / "odd.sock")
    t = _raw_server(path, reply)
    with pytest.raises(grpcunary.RpcError) as err:
        _list(path)
    assert err.value.code in (grpcunary.UNAVAILABLE, grpcunary.INTERNAL)
    t.join(5)


def test_a_silent_server_is_deadline_exceeded(tmp_path: Path) -> None:
    path = str(tmp_path / "mute.sock")
    t = _raw_server(path, None, hold=1.0)
    with pytest.raises(grpcunary.RpcError) as err:
        _list(path, timeout=0.2)
    assert err.value.code == grpcunary.DEADLINE_EXCEEDED
    t.join(5)


def test_no_listener_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # the file stays, nobody listens
    with pytest.raises(grpcunary.RpcError) as err:
        _list(str(path))
    assert err.value.code == grpcunary.UNAVAILABLE


def test_answer_over_the_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grpcunary, "MAX_MESSAGE", 1000)

    def big(request: bytes, context: object) -> bytes:
        return b"x" * 5000

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "t.S", {"M": grpc.unary_unary_rpc_method_handler(big)})])
    path = str(tmp_path / "big.sock")
    server.add_insecure_port(f"unix://{path}")
    server.start()
    try:
        with pytest.raises(grpcunary.RpcError) as err:
            grpcunary.call(path, "/t.S/M", b"", 5.0)
        assert err.value.code == grpcunary.RESOURCE_EXHAUSTED
    finally:
        server.stop(None).wait()
