"""A fake container runtime for tests: a real gRPC server on a unix socket speaking
the CRI ``runtime.v1.RuntimeService`` methods the agent uses (``Version``,
``ListPodSandbox``, ``PodSandboxStatus``), answering from ``sandboxes``, a table
the test fills. ``broken`` makes every call fail with UNAVAILABLE (a runtime that
is restarting)."""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any

import grpc

from rdma_cni.proto import cri_v1_pb2 as pb

SERVICE = "runtime.v1.RuntimeService"


class FakeCri:
    def __init__(self, socket: str) -> None:
        self.socket = socket
        self.sandboxes: dict[str, int] = {}  # id -> pb.SANDBOX_READY / SANDBOX_NOTREADY
        self.broken = False
        self.calls: list[str] = []
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            "Version": self._unary(self.version, pb.VersionRequest),
            "ListPodSandbox": self._unary(self.list, pb.ListPodSandboxRequest),
            "PodSandboxStatus": self._unary(self.status, pb.PodSandboxStatusRequest),
        }
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, handlers),))
        self.server.add_insecure_port(f"unix://{socket}")

    def _unary(self, fn: Any, request_type: Any) -> Any:
        def call(request: Any, context: Any) -> Any:
            self.calls.append(fn.__name__)
            if self.broken:
                context.abort(grpc.StatusCode.UNAVAILABLE, "runtime restarting")
            return fn(request, context)

        return grpc.unary_unary_rpc_method_handler(
            call, request_deserializer=request_type.FromString,
            response_serializer=lambda m: m.SerializeToString())

    def version(self, request: Any, context: Any) -> Any:
        return pb.VersionResponse(version="0.1.0", runtime_name="fakecri",
                                  runtime_version="1", runtime_api_version="v1")

    def list(self, request: Any, context: Any) -> Any:
        with self.lock:
            items = [pb.PodSandbox(id=i, state=s) for i, s in self.sandboxes.items()]
        return pb.ListPodSandboxResponse(items=items)

    def status(self, request: Any, context: Any) -> Any:
        with self.lock:
            state = self.sandboxes.get(request.pod_sandbox_id)
        if state is None:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"an error occurred when try to find sandbox "
                          f"{request.pod_sandbox_id!r}: not found")
        return pb.PodSandboxStatusResponse(
            status=pb.PodSandboxStatus(id=request.pod_sandbox_id, state=state))

    def start(self) -> FakeCri:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop(0)
