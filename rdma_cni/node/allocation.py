"""Which NICs a pod gets (DESIGN §3 "Which NICs", §8 "Allocation").

``lookup`` asks the allocation sources in order and says what the kubelet gave
the pod; ``assign`` turns that answer into one parent netdev per interface block.
Both are pure: the sources are callables (bind them with ``kubelet_sources``) and
device-ID resolution is a callable too, so tests need neither sockets nor sysfs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from rdma_cni.errors import (
    AllocationError,
    CniError,
    ConfigError,
    NicUnavailable,
    SourceSilent,
    clipped,
    shown,
)
from rdma_cni.node.discovery import normalize_ids
from rdma_cni.records import record
from rdma_cni.vocab.modes import RESOURCE_RDMA, Mode, NicRule

log = logging.getLogger("rdma_cni")

Source = Callable[[], "list[str] | None"]

SRC_DEVICE_ID = "runtimeConfig.deviceID"
SRC_POD_RESOURCES = "podresources"
SRC_CHECKPOINT = "checkpoint"
SRC_CONFIG = "config"
SRC_NONE = "none"


class NicLike(Protocol):
    @property
    def netdev(self) -> str: ...


@record
class AllocationAnswer:
    """``ids`` None: no kubelet source exists (or ``allocation: config``)."""

    ids: list[str] | None
    source: str


@record
class PodRef:
    namespace: str
    name: str
    uid: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def lookup(
    *,
    allocation: str = "auto",
    device_id: str | None = None,
    pod_resources: Source | None = None,
    checkpoint: Source | None = None,
) -> AllocationAnswer:
    """DESIGN §8: deviceID, then PodResources, then checkpoint.

    A source answering None does not exist; [] means it exists but the pod holds
    none of the resource (then later sources may still know it). The answer is
    None only when no source exists at all. A source that does not answer
    (SourceSilent: a kubelet restarting or stalled) leaves it to the next; when that
    knows no devices of the pod either, the silence is the answer (try again).
    """
    if allocation == "config":
        return AllocationAnswer(None, SRC_CONFIG)
    if allocation != "auto":
        raise ConfigError(f"invalid allocation {shown(allocation)}: want auto or config")
    if device_id:
        return AllocationAnswer([device_id], SRC_DEVICE_ID)
    return _ask(pod_resources, checkpoint)


def _ask(pod_resources: Source | None, checkpoint: Source | None) -> AllocationAnswer:
    found: AllocationAnswer | None = None
    silent: SourceSilent | None = None
    for name, source in ((SRC_POD_RESOURCES, pod_resources), (SRC_CHECKPOINT, checkpoint)):
        if source is None:
            continue
        try:
            ids = source()
        except SourceSilent as err:  # a restarting or stalled kubelet: the next source
            silent = err
            continue
        if ids:
            if silent is not None:
                log.warning("%s; the allocation is the %s's", silent.msg, name)
            return AllocationAnswer(list(ids), name)
        if ids is not None and found is None:
            found = AllocationAnswer([], name)
    if silent is not None:  # "none" is no answer while the kubelet's own is missing
        raise silent
    return found or AllocationAnswer(None, SRC_NONE)


def kubelet_sources(
    pod: PodRef,
    resource: str,
    *,
    pod_resources_socket: str,
    checkpoint_file: str,
    timeout: float,
) -> tuple[Source, Source]:
    """The real (PodResources, checkpoint) sources for ``lookup``."""
    from rdma_cni.adapters import kubelet

    # a request that names no pod (no K8S_POD_NAME or K8S_POD_UID in CNI_ARGS) is listed
    # by no source that exists: it gets [] from it, never "no source" (DESIGN §8)
    def from_api() -> list[str] | None:
        if not pod.name:
            return [] if os.path.exists(pod_resources_socket) else None
        found = kubelet.pod_resources_candidates(
            pod_resources_socket, pod.namespace, pod.name, resource, timeout
        )
        if found is None:
            return None
        return _generation(pod, found, resource, checkpoint_file)

    def from_checkpoint() -> list[str] | None:
        if not pod.uid:
            return None if kubelet.checkpoint_owners(checkpoint_file, resource) is None else []
        return kubelet.checkpoint_devices(checkpoint_file, pod.uid, resource)

    return from_api, from_checkpoint


def _generation(pod: PodRef, found: list[list[str]], resource: str,
                checkpoint_file: str) -> list[str]:
    """PodResources has no UID: tell this pod's devices from an earlier pod of the same
    name through the checkpoint (keyed by UID); see :mod:`rdma_cni.node.podgen`."""
    from rdma_cni.adapters import kubelet
    from rdma_cni.errors import IOFailure
    from rdma_cni.node.podgen import pick_generation

    owners: dict[str, list[str]] | None = None
    if pod.uid:
        try:
            owners = kubelet.checkpoint_owners(checkpoint_file, resource)
        except IOFailure:
            owners = None  # an unreadable checkpoint cannot tell; PodResources alone
    own = None if owners is None else owners.get(pod.uid, [])
    return pick_generation(str(pod), found, own, owners or {})


def assign(
    mode: str,
    nics: Sequence[NicLike],
    ids: list[str] | None,
    n_blocks: int,
    *,
    resolve: Callable[[str], NicLike],
    pod: str = "",
    resource: str = RESOURCE_RDMA,
    busy: Collection[str] = (),
) -> list[str]:
    """Parent netdevs for the pod's blocks, by the mode's :class:`NicRule`
    (shared-host: one per NIC, in NIC order).

    ``ids`` None means no kubelet source: NICs come from ``nics`` in order,
    skipping ``busy`` netdevs when each NIC serves one pod. ``resolve`` maps a
    device ID (suffix already stripped) to its NIC and raises AllocationError if unknown.
    """
    rule = Mode.of(mode).traits.nics
    if ids is None:
        return _assign_unallocated(rule, nics, n_blocks, busy)
    who = f"pod {clipped(pod, 256)}" if pod else \
        "a request that names no pod (no K8S_POD_NAME in CNI_ARGS)"
    if not ids:
        raise AllocationError(
            f"{who} has no {resource} allocated: request it in the pod spec "
            "to get RDMA interfaces"
        )
    allocated = [] if rule is NicRule.EVERY else _distinct_netdevs(normalize_ids(ids), resolve)

    def too_few(have: int) -> CniError:
        return AllocationError(
            f"{who} asks for {n_blocks} RDMA interfaces but has {have} "
            f"distinct NICs of {resource} allocated ({_ids_shown(ids)}): in {mode} mode "
            "each interface needs its own NIC"
        )

    return _by_rule(rule, [nic.netdev for nic in nics], allocated, n_blocks, too_few)


def _ids_shown(ids: Sequence[str], most: int = 8) -> str:
    """Device IDs as a message lists them (never trusted to be short or printable): each
    escaped and cut, at most ``most`` of them."""
    more = f" and {len(ids) - most} more" if len(ids) > most else ""
    return ", ".join(clipped(i, 64) for i in ids[:most]) + more


def _by_rule(rule: NicRule, every: list[str], candidates: list[str], n_blocks: int,
             too_few: Callable[[int], CniError]) -> list[str]:
    """The NICs of ``n_blocks`` blocks: ``every`` NIC of the node, ``candidates``
    round-robin, or one distinct candidate each (``too_few(have)`` when short)."""
    if rule is NicRule.EVERY:
        return every
    if rule is NicRule.SPREAD:
        return [candidates[i % len(candidates)] for i in range(n_blocks)]
    if len(candidates) < n_blocks:
        raise too_few(len(candidates))
    return candidates[:n_blocks]


def _distinct_netdevs(ids: list[str], resolve: Callable[[str], NicLike]) -> list[str]:
    out: list[str] = []
    for dev_id in ids:
        netdev = resolve(dev_id).netdev
        if netdev not in out:
            out.append(netdev)
    return out


def _assign_unallocated(
    rule: NicRule, nics: Sequence[NicLike], n_blocks: int, busy: Collection[str]
) -> list[str]:
    names = [nic.netdev for nic in nics]
    if not names and rule is not NicRule.EVERY:
        raise AllocationError("no RDMA NICs on this node (discovered or in devices)")
    if rule is NicRule.OWN and len(names) < n_blocks:
        raise AllocationError(
            f"{n_blocks} RDMA interfaces asked for but the node has {len(names)} NICs "
            f"({', '.join(names)})"
        )
    free = [n for n in names if n not in busy] if rule is NicRule.OWN else names

    def too_few(have: int) -> CniError:
        return NicUnavailable(
            f"{n_blocks} RDMA interfaces asked for but only {have} of "
            f"{len(names)} NICs are free (serving other pods: "
            f"{', '.join(n for n in names if n in busy)})"
        )

    return _by_rule(rule, names, free, n_blocks, too_few)
