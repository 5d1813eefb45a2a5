"""A fake kubelet for tests: real gRPC servers on temporary unix sockets.

- ``Registration.Register`` (device plugin registration): records each request.
- ``v1.PodResourcesLister`` ``List`` and ``Get``, answering from ``pods``, a table
  the test fills (``set_pod``), e.g. from what a device plugin allocated.
- Client helpers to drive a device plugin the way the kubelet does.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from rdma_cni.proto import deviceplugin_v1beta1_pb2 as dp
from rdma_cni.proto import deviceplugin_v1beta1_pb2_grpc as dp_grpc
from rdma_cni.proto import podresources_v1_pb2 as pr
from rdma_cni.proto import podresources_v1_pb2_grpc as pr_grpc

# Get behaviour: "ok"; "unimplemented" (old kubelet); "disabled" (feature gate off:
# the kubelet answers a plain error, i.e. UNKNOWN); "notfound" (NOT_FOUND for every pod).
GET_MODES = ("ok", "unimplemented", "disabled", "notfound")


@dataclass
class PodEntry:
    namespace: str
    name: str
    # container name -> resource name -> device IDs
    containers: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def to_proto(self) -> pr.PodResources:
        conts = []
        for cname, resources in self.containers.items():
            devs = [pr.ContainerDevices(resource_name=r, device_ids=ids)
                    for r, ids in resources.items()]
            conts.append(pr.ContainerResources(name=cname, devices=devs))
        return pr.PodResources(name=self.name, namespace=self.namespace, containers=conts)


class _Registration(dp_grpc.RegistrationServicer):
    def __init__(self, owner: FakeKubelet) -> None:
        self.owner = owner

    def Register(self, request: dp.RegisterRequest, context: Any) -> dp.Empty:
        with self.owner.lock:
            self.owner.registrations.append(request)
            self.owner.registered.notify_all()
        return dp.Empty()


class _PodResources(pr_grpc.PodResourcesListerServicer):
    def __init__(self, owner: FakeKubelet) -> None:
        self.owner = owner

    def List(self, request: pr.ListPodResourcesRequest, context: Any) -> Any:
        self.owner.calls.append("List")
        time.sleep(self.owner.delay)
        with self.owner.lock:
            pods = [p.to_proto() for p in [*self.owner.older, *self.owner.pods.values()]]
        return pr.ListPodResourcesResponse(pod_resources=pods)

    def Get(self, request: pr.GetPodResourcesRequest, context: Any) -> Any:
        self.owner.calls.append("Get")
        time.sleep(self.owner.delay)
        if self.owner.get_mode == "unimplemented":
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        if self.owner.get_mode == "disabled":
            context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        if self.owner.get_mode == "notfound":
            context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_name} not found")
        with self.owner.lock:
            pod = self.owner.pods.get((request.pod_namespace, request.pod_name))
        if pod is None:
            msg = f"pod {request.pod_name} in namespace {request.pod_namespace} not found"
            context.abort(grpc.StatusCode.UNKNOWN, msg)
            raise AssertionError("unreachable")
        return pr.GetPodResourcesResponse(pod_resources=pod.to_proto())


class FakeKubelet:
    """Registration server at ``reg_socket`` and PodResources at ``pr_socket``."""

    def __init__(self, reg_socket: str | None = None, pr_socket: str | None = None) -> None:
        self.reg_socket = reg_socket
        self.pr_socket = pr_socket
        self.lock = threading.Lock()
        self.registered = threading.Condition(self.lock)
        self.registrations: list[dp.RegisterRequest] = []
        self.pods: dict[tuple[str, str], PodEntry] = {}
        # earlier pods still listed under a name in ``pods`` (deleted, still terminating)
        self.older: list[PodEntry] = []
        self.calls: list[str] = []
        self.get_mode = "ok"
        self.delay = 0.0
        self._servers: list[grpc.Server] = []

    # --- lifecycle ---------------------------------------------------------
    def start(self) -> FakeKubelet:
        if self.reg_socket:
            self._serve(self.reg_socket, lambda s: dp_grpc.add_RegistrationServicer_to_server(
                _Registration(self), s))
        if self.pr_socket:
            self._serve(self.pr_socket, lambda s: pr_grpc.add_PodResourcesListerServicer_to_server(
                _PodResources(self), s))
        return self

    def _serve(self, path: str, add: Any) -> None:
        if os.path.exists(path):
            os.unlink(path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        add(server)
        server.add_insecure_port(f"unix://{path}")
        server.start()
        self._servers.append(server)

    def stop(self) -> None:
        for server in self._servers:
            server.stop(grace=None).wait()
        self._servers.clear()
        for path in (self.reg_socket, self.pr_socket):
            if path and os.path.exists(path):
                os.unlink(path)

    def restart(self) -> None:
        """Like a kubelet restart: sockets removed, recreated (new inodes)."""
        self.stop()
        self.start()

    # --- table -------------------------------------------------------------
    def set_pod(self, namespace: str, name: str, resources: dict[str, list[str]],
                container: str = "main") -> None:
        with self.lock:
            entry = self.pods.setdefault((namespace, name), PodEntry(namespace, name))
            entry.containers[container] = resources

    def wait_registrations(self, count: int, timeout: float = 10.0) -> list[dp.RegisterRequest]:
        with self.registered:
            self.registered.wait_for(lambda: len(self.registrations) >= count, timeout)
            return list(self.registrations)


# --- client helpers: talk to a device plugin like the kubelet does ------------

class PluginClient:
    def __init__(self, socket: str) -> None:
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.stub = dp_grpc.DevicePluginStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def options(self) -> dp.DevicePluginOptions:
        return self.stub.GetDevicePluginOptions(dp.Empty(), timeout=5)

    def list_and_watch(self) -> Iterator[list[dp.Device]]:
        """Yields each device list the plugin sends; cancel with close()."""
        for resp in self.stub.ListAndWatch(dp.Empty(), timeout=60):
            yield list(resp.devices)

    def preferred(self, available: list[str], must: list[str], size: int) -> list[str]:
        req = dp.PreferredAllocationRequest(container_requests=[
            dp.ContainerPreferredAllocationRequest(
                available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size)
        ])
        resp = self.stub.GetPreferredAllocation(req, timeout=5)
        return list(resp.container_responses[0].deviceIDs)

    def allocate(self, *containers: list[str]) -> dp.AllocateResponse:
        req = dp.AllocateRequest(container_requests=[
            dp.ContainerAllocateRequest(devices_ids=ids) for ids in containers
        ])
        return self.stub.Allocate(req, timeout=5)


@contextlib.contextmanager
def pod_resources(path: str) -> Iterator[FakeKubelet]:
    """A fake kubelet serving PodResources on ``path`` for the ``with`` block."""
    fake = FakeKubelet(pr_socket=path).start()
    try:
        yield fake
    finally:
        fake.stop()
