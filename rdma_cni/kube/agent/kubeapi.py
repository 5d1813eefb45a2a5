"""The agent's Kubernetes side beyond the network-status annotation: the pods on this
node and Events (on a pod, or on the node), through the official client.

Events are deduplicated per (object, reason) for :data:`REPEAT` seconds so a
standing condition does not flood the API.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from rdma_cni.kube.agent.podreport import PodInfo
from rdma_cni.models.subconfig import API_TIMEOUT, core_v1_api
from rdma_cni.node.origin import recorded_node, same_node
from rdma_cni.store.state import AttachmentState
from rdma_cni.vocab.kinds import Status

log = logging.getLogger("rdma_cni.kube.agent.reconciler")
REPEAT = 3600.0
COMPONENT = "rdma-cni-agent"
STATUS_ANNOTATION = "k8s.volcengine.com/network-status"


# -- network-status annotation ---------------------------------------------------
def _pod_entries(st: AttachmentState) -> list[dict[str, Any]]:
    res_ifaces = (st.result or {}).get("interfaces") or []
    macs = {i.get("name"): i.get("mac") for i in res_ifaces if isinstance(i, dict)}
    network = st.key.network if st.key else ""
    out = []
    for iface in st.interfaces:
        out.append({
            "name": network, "interface": iface.name,
            "ips": [str(a.ip) for a in iface.addresses],
            "mac": str(macs.get(iface.name) or iface.mac or ""),
            "nic": iface.nic, "mode": st.mode,
        })
    return out


def status_payloads(states: Sequence[AttachmentState], names: set[str] | None = None,
                    sandboxes: dict[str, str] | None = None
                    ) -> dict[tuple[str, str, str], str]:
    """(namespace, name, uid) -> annotation value, for every pod with ready attachments:
    of this node (``names``: what it may be called; None: every record) and, where the
    runtime's list is known (``sandboxes``), of a sandbox it has ready. A pod whose sandbox
    was re-created showed the old sandbox's interfaces and addresses beside the new
    one's until the old record went, and another node's records (a shared data dir)
    were published as this node's."""
    pods: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for st in states:
        pod = st.pod
        if st.status != Status.READY or "/" not in pod:
            continue
        if names is not None and not same_node(recorded_node(st), names):
            continue
        if sandboxes is not None and st.key is not None and \
                sandboxes.get(st.key.container_id) != "ready":
            continue
        ns, name = pod.split("/", 1)
        pods.setdefault((ns, name, st.pod_uid), []).extend(_pod_entries(st))
    return {k: json.dumps(sorted(v, key=lambda e: e["interface"]), sort_keys=True)
            for k, v in pods.items() if v}


class PodApi(Protocol):
    def get(self, namespace: str, name: str) -> tuple[str, str | None] | None:
        """(uid, current annotation) or None if the pod is gone."""

    def patch(self, namespace: str, name: str, value: str) -> None: ...


class KubePodApi:
    """:class:`PodApi` over the official client (in-cluster config)."""

    def __init__(self) -> None:
        self.api = core_v1_api()

    def get(self, namespace: str, name: str) -> tuple[str, str | None] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            pod = self.api.read_namespaced_pod(name, namespace, _request_timeout=API_TIMEOUT)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        annotations = pod.metadata.annotations or {}
        return str(pod.metadata.uid or ""), annotations.get(STATUS_ANNOTATION)

    def patch(self, namespace: str, name: str, value: str) -> None:
        body = {"metadata": {"annotations": {STATUS_ANNOTATION: value}}}
        self.api.patch_namespaced_pod(name, namespace, body, _request_timeout=API_TIMEOUT)


def publish(states: Sequence[AttachmentState], api: PodApi, names: set[str] | None = None,
            sandboxes: dict[str, str] | None = None) -> int:
    """Patch pods whose annotation differs (same UID only); the number patched
    (``names``, ``sandboxes``: see :func:`status_payloads`)."""
    patched = 0
    for (ns, name, uid), value in sorted(status_payloads(states, names, sandboxes).items()):
        try:
            current = api.get(ns, name)
            if current is None or (uid and current[0] != uid) or current[1] == value:
                continue
            api.patch(ns, name, value)
            patched += 1
        except Exception as e:  # API errors must not stop the reconciler
            log.warning("failed to annotate pod %s/%s: %s", ns, name, e)
    return patched


class ClusterApi(Protocol):
    def node_pods(self, node: str) -> list[PodInfo]: ...

    def event(self, obj: dict[str, str], reason: str, message: str, kind: str) -> None:
        """Record an Event on ``obj`` ({"kind", "namespace", "name", "uid"})."""


def pod_info(pod: Any) -> PodInfo:
    """A :class:`PodInfo` from a client ``V1Pod``."""
    meta, status = pod.metadata, pod.status
    conds = tuple((str(c.type), str(c.status)) for c in (status.conditions or [])) \
        if status else ()
    return PodInfo(namespace=str(meta.namespace), name=str(meta.name), uid=str(meta.uid or ""),
                   annotations=dict(meta.annotations or {}),
                   phase=str(status.phase or "") if status else "", conditions=conds)


class KubeCluster:
    """:class:`ClusterApi` over a ``CoreV1Api``."""

    def __init__(self, api: Any) -> None:
        self.api = api

    def node_pods(self, node: str) -> list[PodInfo]:
        pods = self.api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}",
                                                    _request_timeout=API_TIMEOUT)
        return [pod_info(p) for p in pods.items]

    def event(self, obj: dict[str, str], reason: str, message: str, kind: str) -> None:
        from kubernetes import client

        now = datetime.datetime.now(datetime.UTC)
        namespace = obj.get("namespace") or "default"
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{obj['name']}.rdma-cni."),
            involved_object=client.V1ObjectReference(
                kind=obj["kind"], name=obj["name"], namespace=obj.get("namespace") or None,
                uid=obj.get("uid") or None, api_version="v1"),
            reason=reason, message=message[:1024], type=kind, count=1,
            first_timestamp=now, last_timestamp=now,
            source=client.V1EventSource(component=COMPONENT, host=obj.get("host") or None))
        self.api.create_namespaced_event(namespace, body, _request_timeout=API_TIMEOUT)


class Reporter:
    """Emits Events through ``api`` (may be None: log only), at most once per REPEAT."""

    def __init__(self, api: ClusterApi | None, clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.clock = clock
        self.sent: dict[tuple[str, str, str], float] = {}

    def report(self, obj: dict[str, str], reason: str, message: str,
               kind: str = "Warning") -> bool:
        """True when an Event was sent now."""
        ident = (obj.get("kind", ""), obj.get("uid") or obj.get("name", ""), reason)
        now = self.clock()
        if now - self.sent.get(ident, -REPEAT) < REPEAT or self.api is None:
            return False
        try:
            self.api.event(obj, reason, message, kind)
        except Exception as e:  # API errors must not stop the reconciler
            log.warning("failed to record event %s on %s %s: %s", reason, obj.get("kind"),
                        obj.get("name"), e)
            return False
        self.sent[ident] = now
        return True

    def recent(self) -> list[list[Any]]:
        """The Events sent within REPEAT, for the status file (kept across restarts)."""
        now = self.clock()
        return [[*ident, t] for ident, t in sorted(self.sent.items()) if now - t < REPEAT]

    def restore(self, items: object) -> None:
        for item in items if isinstance(items, list) else []:
            if isinstance(item, list) and len(item) == 4 and \
                    all(isinstance(v, str) for v in item[:3]) and \
                    isinstance(item[3], int | float):
                self.sent[(item[0], item[1], item[2])] = float(item[3])
