"""The kubelet device plugin API v1beta1 over gRPC: servicer, registration, run loop.

The plugin serves ``v1beta1.DevicePlugin`` on ``<devicePluginDir>/<socket>``,
registers with ``<devicePluginDir>/kubelet.sock`` and registers again whenever
that socket is recreated (a kubelet restart; the kubelet also wipes plugin
sockets then, so ours is re-created first). One poll loop drives both health
(``Inventory.refresh``) and the kubelet watch.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc

from rdma_cni.errors import CniError
from rdma_cni.kube.deviceplugin.devices import HEALTHY, UNHEALTHY, Device, container_allocation
from rdma_cni.kube.deviceplugin.inventory import Inventory
from rdma_cni.kube.deviceplugin.streams import STREAMS, Stream, Streams
from rdma_cni.proto import deviceplugin_v1beta1_pb2 as pb
from rdma_cni.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from rdma_cni.store.run import pluginstatus as status
from rdma_cni.store.run.heartbeat import beat

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
#: a stream holds a worker thread (at most STREAMS of them: :mod:`.streams`), and
#: UNARY_WORKERS more always answer Allocate
UNARY_WORKERS = 8
log = logging.getLogger("rdma_cni.kube.deviceplugin")


def socket_name(resource: str) -> str:
    """``vke.volcengine.com/rdma`` -> ``rdma-cni-rdma.sock``."""
    tail = resource.rsplit("/", 1)[-1]
    return "rdma-cni-" + re.sub(r"[^A-Za-z0-9_.-]", "-", tail) + ".sock"


def to_proto(dev: Device) -> pb.Device:
    topo = pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in dev.numa]) if dev.numa else None
    return pb.Device(ID=dev.id, health=HEALTHY if dev.healthy else UNHEALTHY, topology=topo)


def _chained() -> str | None:
    return None


def _agent(context: Any) -> str:
    """The client's user agent (``grpc-go/...`` for the kubelet; see streams.py)."""
    for key, value in context.invocation_metadata() or ():
        if key == "user-agent":
            return str(value)
    return ""


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    def __init__(self, inventory: Inventory, exists: Callable[[str], bool],
                 nccl_env_path: str | None, stop: threading.Event,
                 nccl_env_seen_at: str | None = None,
                 chain_problem: Callable[[], str | None] = _chained) -> None:
        self.inv = inventory
        self.exists = exists
        self.nccl_env_path = nccl_env_path
        self.nccl_env_seen_at = nccl_env_seen_at
        self.stop = stop
        self.chain_problem = chain_problem
        self.streams = Streams(inventory.wake)

    def nccl_env_mount(self) -> str | None:
        """The host path of nccl_env.sh to mount, when the host has it (checked where
        this process sees the host's file: ``nccl_env_seen_at``, else the path itself)."""
        if not self.nccl_env_path:
            return None
        if self.nccl_env_seen_at:
            found = os.path.isfile(self.nccl_env_seen_at)
        else:
            found = self.exists(self.nccl_env_path)
        if not found:
            log.warning("%s is not on the host (seen at %s): containers get no nccl_env.sh",
                        self.nccl_env_path, self.nccl_env_seen_at or self.nccl_env_path)
        return self.nccl_env_path if found else None

    def GetDevicePluginOptions(self, request: pb.Empty, context: Any) -> pb.DevicePluginOptions:
        self.streams.options_asked(_agent(context))  # the kubelet's stream comes next
        return pb.DevicePluginOptions(get_preferred_allocation_available=True)

    def ListAndWatch(self, request: pb.Empty, context: Any) -> Iterator[pb.ListAndWatchResponse]:
        """The device list, again at each change. At most :data:`STREAMS` of one
        registration (a process holding streams open must not take the threads that
        answer Allocate): past that the oldest one ends (:mod:`.streams`)."""
        stream = self.streams.admit(_agent(context))
        try:
            yield from self._watch(context, stream)
        finally:
            self.streams.leave(stream)

    def _watch(self, context: Any, stream: Stream) -> Iterator[pb.ListAndWatchResponse]:
        seen = -1

        def ended() -> bool:
            return self.streams.ended(stream)

        while context.is_active() and not self.stop.is_set() and not ended():
            version, devices = self.inv.wait(seen, timeout=1.0, until=ended)
            if version != seen and not ended():
                seen = version
                yield pb.ListAndWatchResponse(devices=[to_proto(d) for d in devices])

    def GetPreferredAllocation(self, request: Any, context: Any) -> pb.PreferredAllocationResponse:
        """The IDs to give each container. A request naming more IDs, or asking for more,
        than the plugin advertises (the kubelet's are those, less the ones in use) is
        INVALID_ARGUMENT."""
        from rdma_cni.kube.deviceplugin.devices import preferred_allocation

        out = []
        by_id = self.inv.by_id
        for req in request.container_requests:
            sizes = (len(req.available_deviceIDs), len(req.must_include_deviceIDs),
                     req.allocation_size)
            if max(sizes) > len(by_id):
                msg = (f"preferred allocation of {sizes[2]} of {sizes[0]} device IDs "
                       f"({sizes[1]} must be in): {len(by_id)} are advertised")
                log.warning("%s", msg)
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, msg)
                raise RuntimeError(msg)  # abort raises; a stand-in context may not
            ids = preferred_allocation(list(req.available_deviceIDs),
                                       list(req.must_include_deviceIDs),
                                       req.allocation_size, by_id)
            out.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return pb.PreferredAllocationResponse(container_responses=out)

    def _refuse_unchained(self, context: Any) -> None:
        """Fail the allocation (so the kubelet does not start the pod) while the node's
        CNI config does not chain rdma-cni: the pod would get no RDMA interface."""
        problem = self.chain_problem()
        if problem is None:
            return
        msg = (f"refusing to allocate {self.inv.settings.resource}: {problem}, so the pod "
               "would start without its RDMA interfaces (is the rdma-cni DaemonSet's "
               "cni-watch container running?)")
        log.warning("%s", msg)
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, msg)
        raise RuntimeError(msg)  # abort raises; a stand-in context may not

    def Allocate(self, request: pb.AllocateRequest, context: Any) -> pb.AllocateResponse:
        self._refuse_unchained(context)
        out = []
        nccl = self.nccl_env_mount()
        for req in request.container_requests:
            ids = list(req.devices_ids)
            a = container_allocation(ids, self._allocatable(ids, context), self.exists, nccl)
            out.append(pb.ContainerAllocateResponse(
                envs=a.envs,
                devices=[pb.DeviceSpec(container_path=c, host_path=h, permissions=p)
                         for c, h, p in a.devices],
                mounts=[pb.Mount(container_path=c, host_path=h, read_only=ro)
                        for c, h, ro in a.mounts],
            ))
        return pb.AllocateResponse(container_responses=out)

    def _allocatable(self, ids: list[str], context: Any) -> dict[str, Device]:
        """The devices to give (:meth:`Inventory.allocatable`): an ID not listed is
        NOT_FOUND; an Unhealthy one, or one whose RDMA device is gone, FAILED_PRECONDITION
        (the kubelet fails the pod's admission rather than start it without its NIC)."""
        try:
            return self.inv.allocatable(ids)
        except KeyError as err:
            code, msg = grpc.StatusCode.NOT_FOUND, f"failed to allocate: {err.args[0]}"
        except CniError as err:
            code, msg = grpc.StatusCode.FAILED_PRECONDITION, f"failed to allocate: {err.msg}"
        log.warning("%s", msg)
        context.abort(code, msg)
        raise RuntimeError(msg)  # abort raises; a stand-in context may not

    def PreStartContainer(self, request: Any, context: Any) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


def register(kubelet_socket: str, endpoint: str, resource: str, timeout: float = 5.0) -> None:
    """Register with the kubelet; raises grpc.RpcError on failure."""
    with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
        stub = pb_grpc.RegistrationStub(channel)
        opts = pb.DevicePluginOptions(get_preferred_allocation_available=True)
        stub.Register(pb.RegisterRequest(version=API_VERSION, endpoint=endpoint,
                                         resource_name=resource, options=opts),
                      timeout=timeout, wait_for_ready=False)


class DevicePlugin:
    """Serve, register, watch. ``run()`` blocks until ``stop`` is set."""

    def __init__(self, inventory: Inventory, plugin_dir: str, *,
                 exists: Callable[[str], bool] = os.path.exists,
                 nccl_env_path: str | None = None, nccl_env_seen_at: str | None = None,
                 poll: float = 5.0, chain_problem: Callable[[], str | None] = _chained,
                 status_file: str | None = None) -> None:
        self.inv = inventory
        self.dir = plugin_dir
        self.endpoint = socket_name(inventory.settings.resource)
        self.path = os.path.join(plugin_dir, self.endpoint)
        self.kubelet = os.path.join(plugin_dir, KUBELET_SOCKET)
        self.poll = poll
        self.stop = threading.Event()
        self.serving = threading.Event()  # set once the gRPC server accepts connections
        self.servicer = DevicePluginServicer(inventory, exists, nccl_env_path, self.stop,
                                             nccl_env_seen_at, chain_problem)
        self._server: grpc.Server | None = None
        self._registered: tuple[int, int, int] | None = None
        self.registrations = 0
        self.status_file = status_file

    def _status(self) -> None:
        if self.status_file:
            status.write(self.status_file, self.inv.settings.resource, self.endpoint,
                         self._registered)

    def _serve(self) -> None:
        self._halt_server()
        if os.path.exists(self.path):
            os.unlink(self.path)
        # streams of this registration and of the one before (ending within a second)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2 * STREAMS +
                                                        UNARY_WORKERS))
        pb_grpc.add_DevicePluginServicer_to_server(self.servicer, server)
        server.add_insecure_port(f"unix://{self.path}")
        server.start()
        self._server = server
        self._registered = None
        self._status()
        self.serving.set()
        log.info("serving %s on %s", self.inv.settings.resource, self.path)

    def _halt_server(self) -> None:
        self.serving.clear()
        if self._server is not None:
            self._server.stop(grace=1.0).wait()
            self._server = None

    def _maybe_register(self) -> None:
        ident = status.ident(self.kubelet)
        if ident is None or ident == self._registered:
            return
        self.servicer.streams.new_generation()
        try:
            register(self.kubelet, self.endpoint, self.inv.settings.resource)
        except grpc.RpcError as err:
            log.warning("failed to register %s with kubelet at %s: %s",
                        self.inv.settings.resource, self.kubelet, err.details() or err.code())
            return
        self._registered = ident
        self._status()
        self.registrations += 1
        log.info("registered %s with kubelet at %s", self.inv.settings.resource, self.kubelet)

    def step(self) -> None:
        """One poll: health, our socket (the kubelet wipes it on restart), registration.
        A socket that cannot be served (its directory gone for a moment) is tried again
        at the next poll; so is a node that cannot be read (the last list stands)."""
        try:
            self.inv.refresh()
        except (CniError, OSError) as err:  # a NIC renamed or removed as it was read
            log.warning("failed to read the NICs of %s: %s (the last list stands)",
                        self.inv.settings.resource, err)
        if self._server is None or not os.path.exists(self.path):
            try:
                self._serve()
            except (OSError, RuntimeError) as err:  # grpc's failure to bind is a RuntimeError
                self._server = None
                log.warning("failed to serve %s on %s: %s (trying again)",
                            self.inv.settings.resource, self.path, err)
                return
        self._maybe_register()
        beat("device-plugin", self.poll, socket=self.path, kubelet=self.kubelet,
             registered=list(self._registered) if self._registered else None)

    def run(self) -> None:
        try:
            self.step()
            while not self.stop.wait(self.poll):
                self.step()
        finally:
            self.inv.close()
            self._halt_server()
            self._registered = None
            self._status()
            if os.path.exists(self.path):
                os.unlink(self.path)
