"""Kubelet adapter: which device IDs the kubelet gave a pod.

Two sources, both read-only:

- the PodResources API (``v1.PodResourcesLister`` on a unix socket): ``Get``
  (kubelet >= 1.27, feature gate ``KubeletPodResourcesGet``), else ``List``
  filtered by namespace and name;
- the device manager checkpoint ``kubelet_internal_checkpoint`` (JSON), whose
  ``DeviceIDs`` is a map NUMA node -> IDs since k8s 1.20 and a plain list before.

Both return ``None`` when the source does not exist on this node, ``[]`` when it
exists but does not give the pod that resource. The gRPC client (grpcunary) and the
messages are imported lazily: this module sits on the CNI hot path.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from rdma_cni.errors import IOFailure, SourceSilent, TryAgain

__all__ = ["checkpoint_devices", "checkpoint_owners", "pod_resources_candidates",
           "pod_resources_devices"]


def pod_resources_devices(
    socket: str, namespace: str, name: str, resource: str, timeout: float
) -> list[str] | None:
    """Device IDs of ``resource`` held by pod ``namespace/name`` per the PodResources API.

    Returns None when ``socket`` does not exist, [] when the pod is not listed or
    holds none. Raises TryAgain past ``timeout`` seconds or when two pods of that
    name are listed with different devices, IOFailure on other errors.
    """
    found = pod_resources_candidates(socket, namespace, name, resource, timeout)
    if found is None:
        return None
    if len({tuple(sorted(c)) for c in found}) > 1:
        raise TryAgain(f"failed to tell which devices belong to pod {namespace}/{name}: the "
                       "kubelet lists two pods of that name (an earlier one still terminating)")
    return found[0] if found else []


def pod_resources_candidates(
    socket: str, namespace: str, name: str, resource: str, timeout: float
) -> list[list[str]] | None:
    """The device IDs of ``resource`` of every pod listed as ``namespace/name`` (a pod
    recreated under the same name may briefly be listed twice: PodResources v1 has
    no UID). None when ``socket`` does not exist, [] when no pod of that name is listed."""
    if not os.path.exists(socket):
        return None
    from rdma_cni.adapters import grpcunary
    from rdma_cni.proto import podresources_v1_pb2 as pb

    deadline = time.monotonic() + timeout
    pod_ref = f"{namespace}/{name}"
    try:
        pods = _get_pods(socket, pb, namespace, name, deadline)
    except grpcunary.RpcError as err:
        raise _rpc_error(err, socket, pod_ref) from None
    return [_devices_of(pod, resource) for pod in pods]


_SERVICE = "/v1.PodResourcesLister/"


def _ask(socket: str, method: str, request: Any, answer_type: Any, deadline: float) -> Any:
    from rdma_cni.adapters import grpcunary

    left = max(deadline - time.monotonic(), 0.001)
    raw = grpcunary.call(socket, _SERVICE + method, request.SerializeToString(), left)
    try:
        return answer_type.FromString(raw)
    except Exception as err:  # protobuf's DecodeError: the answer is not that message
        raise grpcunary.RpcError(grpcunary.INTERNAL,
                                 f"undecodable {method} answer: {err}") from None


def _get_pods(socket: str, pb: Any, namespace: str, name: str, deadline: float) -> list[Any]:
    """The pod's PodResources via Get, or every List entry of that name when Get is
    unavailable or does not know the pod."""
    from rdma_cni.adapters import grpcunary

    req = pb.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
    try:
        return [_ask(socket, "Get", req, pb.GetPodResourcesResponse, deadline).pod_resources]
    except grpcunary.RpcError as err:
        # Old kubelets lack Get (UNIMPLEMENTED); with the feature gate off, or when
        # the pod is unknown, the kubelet answers a plain error (UNKNOWN), and some
        # answer NOT_FOUND for an unknown pod.
        if err.code not in (grpcunary.UNIMPLEMENTED, grpcunary.UNKNOWN, grpcunary.NOT_FOUND):
            raise
    listing = _ask(socket, "List", pb.ListPodResourcesRequest(), pb.ListPodResourcesResponse,
                   deadline)
    return [pod for pod in listing.pod_resources
            if pod.namespace == namespace and pod.name == name]


def _devices_of(pod: Any, resource: str) -> list[str]:
    ids: list[str] = []
    # Restartable init containers (sidecars) are reported among `containers`.
    for container in pod.containers:
        for dev in container.devices:
            if dev.resource_name == resource:
                ids.extend(dev.device_ids)
    return ids


def _rpc_error(err: Any, socket: str, pod_ref: str) -> Exception:
    from rdma_cni.adapters import grpcunary

    if err.code in (grpcunary.DEADLINE_EXCEEDED, grpcunary.UNAVAILABLE):
        # a kubelet restarting (nothing listens), stalled or with its queue full
        return SourceSilent(
            f"failed to query pod resources of {pod_ref} from kubelet at {socket}: "
            f"{err.name}: {err.details or err.name}"
        )
    return IOFailure(
        f"failed to query pod resources of {pod_ref} from kubelet at {socket}: "
        f"{err.name}: {err.details or err.name}"
    )


def checkpoint_devices(path: str, pod_uid: str, resource: str) -> list[str] | None:
    """Device IDs of ``resource`` held by pod ``pod_uid`` per the kubelet checkpoint.

    Returns None when ``path`` does not exist, [] when the pod has none there.
    Raises IOFailure (naming the file) when it cannot be read or parsed.
    """
    owners = checkpoint_owners(path, resource)
    return None if owners is None else owners.get(pod_uid, [])


def checkpoint_owners(path: str, resource: str) -> dict[str, list[str]] | None:
    """Pod UID -> device IDs of ``resource`` per the kubelet checkpoint (None: no file)."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    except OSError as err:
        reason = err.strerror or err
        raise IOFailure(f"failed to read kubelet checkpoint {path}: {reason}") from None
    try:
        return parse_owners(raw, resource)
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise IOFailure(f"failed to parse kubelet checkpoint {path}: {err}") from None


def parse_checkpoint(raw: str, pod_uid: str, resource: str) -> list[str]:
    """Pure parser of the checkpoint text; raises ValueError/TypeError on bad shapes."""
    return parse_owners(raw, resource).get(pod_uid, [])


def parse_owners(raw: str, resource: str) -> dict[str, list[str]]:
    """Pod UID -> IDs of ``resource`` in the checkpoint text; ValueError/TypeError on bad shapes."""
    doc = json.loads(raw)
    if not isinstance(doc, dict) or not isinstance(doc.get("Data"), dict):
        raise ValueError("no Data object")
    entries = doc["Data"].get("PodDeviceEntries")
    if entries is None:  # Go encodes an empty slice as null
        entries = []
    if not isinstance(entries, list):
        raise TypeError("PodDeviceEntries is not a list")
    owners: dict[str, list[str]] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise TypeError("a PodDeviceEntries item is not an object")
        if entry.get("ResourceName") == resource and isinstance(entry.get("PodUID"), str):
            owners.setdefault(entry["PodUID"], []).extend(_entry_ids(entry.get("DeviceIDs")))
    return owners


def _entry_ids(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, dict):  # k8s >= 1.20: {"<numa node>": [ids]}
        groups = [value[k] for k in sorted(value, key=_numa_key)]
    elif isinstance(value, list):  # older kubelets: [ids]
        groups = [value]
    else:
        raise TypeError(f"DeviceIDs is a {type(value).__name__}, not a map or list")
    ids: list[str] = []
    for group in groups:
        if group is None:
            continue
        if not isinstance(group, list) or not all(isinstance(i, str) for i in group):
            raise TypeError("DeviceIDs holds something other than lists of strings")
        ids.extend(group)
    return ids


def _numa_key(key: str) -> tuple[int, str]:
    try:
        return (int(key), key)
    except ValueError:
        return (1 << 30, key)
