"""A fake Kubernetes API server for the install container's mode-from-label step:
HTTPS on 127.0.0.1 with a throwaway self-signed certificate (openssl), answering
``GET /api/v1/nodes/<name>`` with the node's labels; plus the service-account files
the ``kubernetes`` client's in-cluster config reads."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class FakeApi:
    def __init__(self, tmp: Path, nodes: dict[str, dict[str, str]]) -> None:
        self.sa = tmp / "serviceaccount"
        self.sa.mkdir(parents=True)
        key, cert = tmp / "api.key", self.sa / "ca.crt"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(cert)],
                       check=True, capture_output=True, timeout=120)
        (self.sa / "token").write_text("node-test-token")
        (self.sa / "namespace").write_text("kube-system")
        self.requests: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api.requests.append(f"{self.path} {self.headers.get('Authorization')}")
                name = self.path.removeprefix("/api/v1/nodes/")
                labels = nodes.get(name)
                code, body = (200, {"kind": "Node", "apiVersion": "v1",
                                    "metadata": {"name": name, "labels": labels}}) \
                    if labels is not None else (404, {"kind": "Status", "code": 404})
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def env(self) -> dict[str, str]:
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.port)}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
