"""CRI adapter: which pod sandboxes the container runtime has (runtime.v1).

containerd and CRI-O both serve ``runtime.v1.RuntimeService`` on a unix socket:
containerd at :data:`CONTAINERD_SOCKET`, CRI-O at :data:`CRIO_SOCKET`. The agent
asks ``ListPodSandbox`` (every sandbox, ready or not) and, before releasing an
attachment, ``PodSandboxStatus`` of that one sandbox, which answers NOT_FOUND
only when the runtime has no such sandbox. The sandbox ID is the CNI container
ID the runtime passed to ADD.

The gRPC client (adapters/grpcunary.py) is imported lazily (the agent's start-up stays
light); messages come from ``rdma_cni/proto/cri_v1.proto`` and are sent on the real
method paths.
"""

from __future__ import annotations

import os
from typing import Any

from rdma_cni.errors import IOFailure

__all__ = ["CONTAINERD_SOCKET", "CRIO_SOCKET", "CriClient", "CriUnavailable", "default_socket"]

CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
CRIO_SOCKET = "/var/run/crio/crio.sock"
SERVICE = "/runtime.v1.RuntimeService/"
READY = "ready"
NOT_READY = "notready"


class CriUnavailable(IOFailure):
    """The runtime could not be asked (no socket, refused, deadline, error)."""


def default_socket(candidates: tuple[str, ...] = (CONTAINERD_SOCKET, CRIO_SOCKET)) -> str:
    """The first runtime socket that exists, else containerd's path."""
    for path in candidates:
        if os.path.exists(path):
            return path
    return candidates[0]


class CriClient:
    """A minimal runtime.v1 client over ``socket`` with a per-call ``timeout``."""

    def __init__(self, socket: str, timeout: float = 5.0) -> None:
        self.socket = socket
        self.timeout = timeout

    def _call(self, method: str, request: Any, response_type: Any) -> Any:
        from rdma_cni.adapters import grpcunary

        if not os.path.exists(self.socket):
            raise CriUnavailable(f"failed to ask the runtime at {self.socket}: no such socket")
        try:
            raw = grpcunary.call(self.socket, SERVICE + method, request.SerializeToString(),
                                 self.timeout)
            return response_type.FromString(raw)
        except grpcunary.RpcError as err:
            if err.code == grpcunary.NOT_FOUND and method == "PodSandboxStatus":
                return None
            raise CriUnavailable(f"failed to ask the runtime at {self.socket} ({method}): "
                                 f"{err.name}: {err.details}".rstrip(": ")) from None
        except Exception as err:  # protobuf's DecodeError: not the message asked for
            raise CriUnavailable(f"failed to ask the runtime at {self.socket} ({method}): "
                                 f"undecodable answer: {err}") from None

    def version(self) -> str:
        from rdma_cni.proto import cri_v1_pb2 as pb

        resp = self._call("Version", pb.VersionRequest(version="v1"), pb.VersionResponse)
        return f"{resp.runtime_name} {resp.runtime_version}".strip()

    def sandboxes(self) -> dict[str, str]:
        """Sandbox ID -> ``ready`` / ``notready``, for every sandbox the runtime has."""
        from rdma_cni.proto import cri_v1_pb2 as pb

        resp = self._call("ListPodSandbox", pb.ListPodSandboxRequest(),
                          pb.ListPodSandboxResponse)
        return {s.id: _state(pb, s.state) for s in resp.items}

    def sandbox_state(self, sandbox_id: str) -> str | None:
        """``ready`` / ``notready`` of one sandbox; None when the runtime has no such sandbox."""
        from rdma_cni.proto import cri_v1_pb2 as pb

        resp = self._call("PodSandboxStatus", pb.PodSandboxStatusRequest(
            pod_sandbox_id=sandbox_id), pb.PodSandboxStatusResponse)
        if resp is None:
            return None
        return _state(pb, resp.status.state)


def _state(pb: Any, value: int) -> str:
    return READY if value == pb.SANDBOX_READY else NOT_READY
