"""The exporter's HTTP server (kube/exporter/httpserve.py, appguard.py) against clients
that abuse it: a real server on 127.0.0.1 and an ephemeral port, clients from other
loopback addresses (127.0.0.0/8 is all local), as a node's processes, its kubelet and
the scraper reach the node's address."""

from __future__ import annotations

import http.client
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge

from rdma_cni.kube.exporter import httpserve, serve

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


@pytest.fixture
def port() -> Iterator[int]:
    registry = CollectorRegistry()
    Gauge("rdma_cni_test_up", "up", registry=registry).set(1)
    server = serve(registry, HOST, 0)
    yield server.server_port
    server.shutdown()
    server.server_close()


def _get(port: int, source: str = HOST, headers: dict[str, str] | None = None,
         timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body) of GET /metrics; status 0 when the connection was refused or cut."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request("GET", "/metrics", headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    except OSError:
        return 0, b""
    finally:
        conn.close()


def _raw(port: int, data: bytes, source: str = HOST) -> bytes:
    """What the server answers to ``data`` (sent whole, then half-closed)."""
    with socket.create_connection((HOST, port), timeout=5, source_address=(source, 0)) as c:
        try:
            c.sendall(data)
            c.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        out = b""
        try:
            while chunk := c.recv(65536):
                out += chunk
        except OSError:
            pass
        return out


# -- 1. the request head ------------------------------------------------------------
def test_a_request_head_past_the_limit_is_answered_431(port: int) -> None:
    """The standard library's limits (100 lines of 64 KiB) let a head of 6 MB in; past
    HEAD_LIMIT bytes in all the answer is 431, a head within it is served."""
    line = b"X-A: " + b"a" * 2000 + b"\r\n"
    big = b"GET /metrics HTTP/1.0\r\n" + line * 20 + b"\r\n"
    assert len(big) > getattr(httpserve, "HEAD_LIMIT", 16 * 1024)
    assert _raw(port, big).startswith(b"HTTP/1.0 431 ")
    fits = b"GET /metrics HTTP/1.0\r\n" + line * 4 + b"\r\n"
    answer = _raw(port, fits)
    assert answer.startswith(b"HTTP/1.0 200 ") and b"rdma_cni_test_up 1.0" in answer


SERVER = """
import sys, time
from prometheus_client import CollectorRegistry
from rdma_cni.kube.exporter import serve
s = serve(CollectorRegistry(), "127.0.0.1", 0)
print(s.server_port, flush=True)
time.sleep(120)
"""


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_huge_heads_cost_the_exporter_no_memory() -> None:
    """Four connections each sending 99 header lines of 65,000 bytes took an exporter
    from 42 MiB to 258 MiB, past the DaemonSet's 256Mi limit: now each is cut after
    HEAD_LIMIT bytes."""
    proc = subprocess.Popen([sys.executable, "-c", SERVER], cwd=REPO, stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        assert _get(port)[0] == 200
        before = _rss(proc.pid)
        head = b"GET /metrics HTTP/1.0\r\n" + (b"X-A: " + b"a" * 65000 + b"\r\n") * 99
        for _ in range(2):
            sends = [threading.Thread(target=_raw, args=(port, head + b"\r\n"))
                     for _ in range(4)]
            for t in sends:
                t.start()
            for t in sends:
                t.join(30)
        grown = _rss(proc.pid) - before
        assert grown < 24 << 20, f"RSS grew by {grown >> 20} MiB"
    finally:
        proc.kill()
        proc.wait()


# -- 2. idle connections never keep the probes and the scraper out --------------------
class Flooder:
    """``count`` connections from each of ``sources`` that send half a request and
    nothing more, each opened again as soon as it is cut or refused."""

    def __init__(self, port: int, sources: list[str], count: int) -> None:
        self.port, self.stop = port, threading.Event()
        self.threads = [threading.Thread(target=self._hold, args=(s,), daemon=True)
                        for s in sources for _ in range(count)]

    def _hold(self, source: str) -> None:
        while not self.stop.is_set():
            try:
                with socket.create_connection((HOST, self.port), timeout=1,
                                              source_address=(source, 0)) as c:
                    c.sendall(b"GET /metrics HTTP/1.1\r\n")
                    while not self.stop.is_set():
                        try:
                            if not c.recv(1024):
                                break
                        except TimeoutError:
                            continue
            except OSError:
                time.sleep(0.001)

    def __enter__(self) -> Flooder:
        for t in self.threads:
            t.start()
        time.sleep(0.5)
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)


def _answered(port: int, source: str, tries: int = 20) -> int:
    ok = 0
    for _ in range(tries):
        time.sleep(2 * getattr(httpserve, "GRACE", 0.05))
        ok += _get(port, source)[0] == 200
    return ok


def test_a_local_process_holding_connections_never_starves_the_kubelets_probe(
        port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every process of the node connects from the host address, the kubelet's httpGet
    probes too: four idle connections from it, opened again when cut, left a probe from
    it answered 2 times of 20 (PER_CLIENT refused it)."""
    monkeypatch.setattr(httpserve, "GRACE", 0.05, raising=False)
    with Flooder(port, [HOST], httpserve.PER_CLIENT):
        assert _answered(port, HOST) == 20


def test_idle_connections_from_many_addresses_never_starve_the_scraper(
        port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight local addresses with four idle connections each fill MAX_CONNECTIONS: a
    scraper from another address was answered 3 times of 20; a probe from one of them
    is answered too."""
    monkeypatch.setattr(httpserve, "GRACE", 0.05, raising=False)
    sources = [f"127.0.0.{10 + i}" for i in range(8)]
    assert len(sources) * httpserve.PER_CLIENT >= httpserve.MAX_CONNECTIONS
    with Flooder(port, sources, httpserve.PER_CLIENT):
        assert _answered(port, "127.0.0.2") == 20
        assert _answered(port, sources[0], 5) == 5


# -- 3. a malformed Accept, an exception: no traceback -------------------------------
@pytest.mark.parametrize("accept", ["text/plain; version=x",
                                    "application/openmetrics-text; version=1.x",
                                    "application/openmetrics-text; version=", "*/*;;;="])
def test_a_malformed_accept_is_answered_in_the_default_format(
        port: int, accept: str, capfd: Any) -> None:
    """prometheus_client's encoder choice raised on these: HTTP 500 and wsgiref's
    multi-line traceback on stderr."""
    status, body = _get(port, headers={"Accept": accept})
    assert status == 200 and b"rdma_cni_test_up 1.0" in body
    assert "Traceback" not in capfd.readouterr().err


class _Broken:
    def collect(self) -> Any:
        raise RuntimeError("broken\nsecond line \x1b[2J")


def test_a_request_that_raises_is_a_500_and_one_escaped_log_line(
        capfd: Any, caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    registry.register(_Broken())  # type: ignore[arg-type]
    server = serve(registry, HOST, 0)
    try:
        with caplog.at_level(logging.ERROR, logger="rdma_cni.kube.exporter"):
            status, _ = _get(server.server_port)
    finally:
        server.shutdown()
        server.server_close()
    assert status == 500
    assert "Traceback" not in capfd.readouterr().err
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "RuntimeError: broken" in lines[0]
    assert "\n" not in lines[0] and "\x1b" not in lines[0]
