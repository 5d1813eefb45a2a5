"""Pods that asked for RDMA interfaces but have none (pure).

A pod on this node whose ``k8s.volcengine.com/pod-networks`` annotation has
blocks for our network (``cniConfName``), whose sandbox is ready (the pod's
``PodReadyToStartContainers`` / ``PodHasNetwork`` condition, or phase Running),
and that has no ready attachment in our store (matched by pod UID, else by
namespace/name) started without its RDMA interfaces: typically the primary CNI
rewrote its conflist and dropped our entry just before the pod started.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rdma_cni.errors import CniError
from rdma_cni.models.annotation import ANNOTATION, parse_blocks
from rdma_cni.store.state import AttachmentState
from rdma_cni.vocab.kinds import Status

SANDBOX_CONDITIONS = ("PodReadyToStartContainers", "PodHasNetwork")


@dataclass(frozen=True)
class PodInfo:
    """What the agent needs of a pod (from the Kubernetes API)."""

    namespace: str
    name: str
    uid: str
    annotations: dict[str, str]
    phase: str = ""
    conditions: tuple[tuple[str, str], ...] = ()  # (type, status)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def sandbox_ready(self) -> bool:
        if self.phase == "Running":
            return True
        return any(t in SANDBOX_CONDITIONS and s == "True" for t, s in self.conditions)


def blocks_asked(pod: PodInfo, conf_name: str) -> int:
    """How many of the pod's annotation blocks are ours (0 when absent or malformed)."""
    text = pod.annotations.get(ANNOTATION)
    if text is None:
        return 0
    try:
        blocks = parse_blocks(text)
    except CniError:
        return 0
    return sum(1 for b in blocks if b["cniConf"]["name"] == conf_name)


def _served(states: Sequence[AttachmentState]) -> tuple[set[str], set[str]]:
    uids, refs = set(), set()
    for st in states:
        if st.status != Status.READY or not st.interfaces:
            continue
        if st.pod_uid:
            uids.add(st.pod_uid)
        else:
            refs.add(st.pod)
    return uids, refs


def without_rdma(pods: Sequence[PodInfo], states: Sequence[AttachmentState],
                 conf_name: str) -> list[tuple[PodInfo, int]]:
    """(pod, blocks asked) for each ready pod that asked for RDMA and has no attachment."""
    uids, refs = _served(states)
    out = []
    for pod in pods:
        asked = blocks_asked(pod, conf_name)
        if not asked or not pod.sandbox_ready():
            continue
        if (pod.uid and pod.uid in uids) or pod.ref in refs:
            continue
        out.append((pod, asked))
    return sorted(out, key=lambda item: item[0].ref)
