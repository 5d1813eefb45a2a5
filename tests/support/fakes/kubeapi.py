"""A fake Kubernetes API server for tests: HTTPS on 127.0.0.1 with a throwaway
self-signed certificate (openssl), answering the few core/v1 calls rdma-cni makes:
the agent's (list the pods of a node, read and patch a pod, create an Event) from
``pods``, and install's and cni-watch's (read a node's labels) from ``nodes``, tables
the test fills. Every request is kept in ``requests`` (path and Authorization). The
real ``kubernetes`` client talks to it through its in-cluster config (token and CA
files, ``KUBERNETES_SERVICE_HOST``/``PORT``)."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TOKEN = "fake-token"


def pod(namespace: str, name: str, uid: str, node: str, annotations: dict[str, str],
        phase: str = "Running", network_ready: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid,
                     "annotations": dict(annotations)},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": phase, "conditions": [
            {"type": "PodReadyToStartContainers", "status": str(network_ready)}]},
    }


class FakeKubeApi:
    def __init__(self, cert_dir: Path, token: str = TOKEN,
                 nodes: dict[str, dict[str, str]] | None = None) -> None:
        cert_dir.mkdir(parents=True, exist_ok=True)
        self.token = token
        self.nodes = nodes if nodes is not None else {}  # name -> labels, read live
        self.requests: list[str] = []
        self.cert = cert_dir / "ca.crt"
        self.key = cert_dir / "tls.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(self.key), "-out", str(self.cert)],
                       check=True, capture_output=True, timeout=60)
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.patches: list[tuple[str, str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                owner._handle(self, "GET")

            def do_PATCH(self) -> None:
                owner._handle(self, "PATCH")

            def do_POST(self) -> None:
                owner._handle(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cert), str(self.key))
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakeKubeApi:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self.thread.is_alive():
            self.thread.join(10)

    def add(self, p: dict[str, Any]) -> None:
        with self.lock:
            self.pods[(p["metadata"]["namespace"], p["metadata"]["name"])] = p

    def _reply(self, h: BaseHTTPRequestHandler, code: int, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        self.requests.append(f"{h.path} {h.headers.get('Authorization')}")
        if (h.headers.get("Authorization") or "").lower() != f"bearer {self.token}":
            return self._reply(h, 401, {"kind": "Status", "code": 401})
        url = urllib.parse.urlparse(h.path)
        parts = url.path.strip("/").split("/")
        length = int(h.headers.get("Content-Length") or 0)
        body = json.loads(h.rfile.read(length) or b"{}") if length else {}
        with self.lock:
            code, answer = self._answer(method, parts, url.query, body)
        return self._reply(h, code, answer)

    def _answer(self, method: str, parts: list[str], query: str,
                body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if method == "GET" and parts == ["api", "v1", "pods"]:
            field = urllib.parse.parse_qs(query).get("fieldSelector", [""])[0]
            node = field.split("=", 1)[1] if field.startswith("spec.nodeName=") else None
            items = [p for p in self.pods.values()
                     if node is None or p["spec"]["nodeName"] == node]
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        if method == "GET" and len(parts) == 4 and parts[:3] == ["api", "v1", "nodes"] and \
                parts[3] in self.nodes:
            return 200, {"kind": "Node", "apiVersion": "v1",
                         "metadata": {"name": parts[3], "labels": self.nodes[parts[3]]}}
        if len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            found = self.pods.get((parts[3], parts[5]))
            if found is None:
                return 404, {"kind": "Status", "apiVersion": "v1", "code": 404,
                             "reason": "NotFound"}
            if method == "PATCH":
                self.patches.append((parts[3], parts[5], body))
                notes = (body.get("metadata") or {}).get("annotations") or {}
                found["metadata"]["annotations"].update(notes)
            return 200, found
        if method == "POST" and len(parts) == 5 and parts[4] == "events":
            body.setdefault("metadata", {})["name"] = f"ev{len(self.events)}"
            body["metadata"]["namespace"] = parts[3]
            self.events.append(body)
            return 201, body
        return 404, {"kind": "Status", "code": 404}

    def env(self) -> dict[str, str]:
        """The environment that points the in-cluster config at this server."""
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.port)}

    def service_account(self, sa: Path) -> Path:
        """Token, CA and namespace files in ``sa`` (what a pod's service account mounts)."""
        sa.mkdir(parents=True, exist_ok=True)
        (sa / "token").write_text(self.token)
        (sa / "ca.crt").write_bytes(self.cert.read_bytes())
        (sa / "namespace").write_text("kube-system")
        return sa

    def install_service_account(self, rootfs: Path) -> dict[str, str]:
        """Token and CA where the in-cluster config looks; the env that points at us."""
        self.service_account(rootfs / "var/run/secrets/kubernetes.io/serviceaccount")
        return self.env()
