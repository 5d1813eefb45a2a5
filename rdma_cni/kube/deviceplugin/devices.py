"""Pure device-plugin logic: the advertised devices, preferred allocation, Allocate.

Device IDs (DESIGN §8): exclusive and shared, one device per NIC with the NIC's
``device_id`` (PCI address, else netdev); shared-multi, ``<id>@<n>`` slots per
NIC; shared-host, ``host-<n>`` devices that each stand for every NIC.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from rdma_cni.vocab.modes import Capacity, Mode
from rdma_cni.vocab.nic import Nic

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
NCCL_ENV_CONTAINER_PATH = "/usr/local/bin/nccl_env.sh"
RDMA_CM = "/dev/infiniband/rdma_cm"


@dataclass(frozen=True)
class Device:
    """One advertised device: its NICs (several for shared-host) and NUMA nodes."""

    id: str
    nics: tuple[Nic, ...]
    healthy: bool
    numa: tuple[int, ...] = ()


def nic_healthy(nic: Nic, present: bool) -> bool:
    """A NIC is healthy while its netdev exists and its RDMA port (if any) is ACTIVE."""
    if not present:
        return False
    return nic.ibdev is None or (nic.state or "").upper() == "ACTIVE"


def _numa_of(nics: Sequence[Nic]) -> tuple[int, ...]:
    return tuple(sorted({n.numa for n in nics if n.numa is not None and n.numa >= 0}))


def build_devices(
    mode: str,
    nics: Sequence[Nic],
    healthy: Mapping[str, bool],
    slots: Callable[[Nic], int],
    host_slots: int = 0,
) -> list[Device]:
    """The device list for ``mode``'s :class:`Capacity` rule; ``healthy`` by device ID,
    ``slots(nic)`` is the per-NIC slot count and ``host_slots`` the host-wide count (both
    already capped by the caller). Where pods take their addresses from the NIC's subnet,
    a NIC with none to give (no pool: its addresses gone, a prefix IPAM refuses) is
    Unhealthy: every pod given it would fail its ADD."""
    traits = Mode.of(mode).traits
    rule = traits.capacity
    if rule is Capacity.HOST_SLOTS:
        if not nics:
            return []
        ok = all(healthy.get(n.device_id, False) for n in nics)
        return [Device(f"host-{i}", tuple(nics), ok, _numa_of(nics)) for i in range(host_slots)]
    out: list[Device] = []
    for nic in nics:
        ok = healthy.get(nic.device_id, False)
        if rule is Capacity.SLOTS_PER_NIC:
            out += [Device(f"{nic.device_id}@{i}", (nic,), ok, _numa_of([nic]))
                    for i in range(slots(nic))]
        else:
            ok = ok and (not traits.pod_ipam or slots(nic) > 0)
            out.append(Device(nic.device_id, (nic,), ok, _numa_of([nic])))
    return out


def _slot_key(dev_id: str) -> tuple[str, int, str]:
    base, _, slot = dev_id.partition("@")
    return (base, int(slot) if slot.isdigit() else -1, dev_id)


def preferred_allocation(
    available: Sequence[str], must: Sequence[str], size: int, devices: Mapping[str, Device]
) -> list[str]:
    """Pick ``size`` IDs: all of ``must``, then on the fewest NUMA nodes (nodes already
    used by ``must`` first, then the fullest), and within them distinct NICs first."""
    chosen = list(dict.fromkeys(must))
    taken = set(chosen)
    pool = sorted({a for a in available if a not in taken}, key=_slot_key)
    used = Counter(_nic_key(devices, c) for c in chosen)
    by_node: dict[int, list[str]] = {}
    for a in pool:
        by_node.setdefault(_node_key(devices, a), []).append(a)
    pinned = {_node_key(devices, c) for c in chosen}
    for node in sorted(by_node, key=lambda n: (n not in pinned, -len(by_node[n]), n)):
        if len(chosen) >= size:
            break
        chosen += _spread(by_node[node], size - len(chosen), used, devices)
    return chosen


def _spread(cands: Sequence[str], need: int, used: Counter[str],
            devices: Mapping[str, Device]) -> list[str]:
    """Up to ``need`` of ``cands``, each the first (in ``cands``' order) of a NIC used
    least so far; ``used`` counts them. A heap of each NIC's next candidate: O(n log n)."""
    queues: dict[str, deque[int]] = {}
    for i, a in enumerate(cands):
        queues.setdefault(_nic_key(devices, a), deque()).append(i)
    heap = [(used[k], q[0], k) for k, q in queues.items()]
    heapq.heapify(heap)
    out: list[str] = []
    while heap and len(out) < need:
        _, i, key = heapq.heappop(heap)
        out.append(cands[i])
        used[key] += 1
        queue = queues[key]
        queue.popleft()
        if queue:
            heapq.heappush(heap, (used[key], queue[0], key))
    return out


def _nic_key(devices: Mapping[str, Device], dev_id: str) -> str:
    dev = devices.get(dev_id)
    return ",".join(n.netdev for n in dev.nics) if dev else dev_id


def _node_key(devices: Mapping[str, Device], dev_id: str) -> int:
    dev = devices.get(dev_id)
    return dev.numa[0] if dev and len(dev.numa) == 1 else -1


@dataclass
class ContainerAllocation:
    envs: dict[str, str] = field(default_factory=dict)
    devices: list[tuple[str, str, str]] = field(default_factory=list)  # (ctr, host, perms)
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)  # (ctr, host, ro)


def container_allocation(
    ids: Sequence[str],
    devices: Mapping[str, Device],
    exists: Callable[[str], bool],
    nccl_env_host_path: str | None,
) -> ContainerAllocation:
    """What the kubelet must give a container holding ``ids``: the NICs' uverbs
    character devices and rdma_cm (those that exist), env vars, and nccl_env.sh from
    ``nccl_env_host_path`` (the caller passes it only when the host has the file)."""
    unknown = [i for i in ids if i not in devices]
    if unknown:
        raise KeyError(f"unknown device IDs {', '.join(unknown)}")
    nics: dict[str, Nic] = {}
    for dev_id in ids:
        for nic in devices[dev_id].nics:
            nics.setdefault(nic.netdev, nic)
    alloc = ContainerAllocation()
    paths = [f"/dev/infiniband/{n.uverbs}" for n in nics.values() if n.uverbs] + [RDMA_CM]
    for path in dict.fromkeys(paths):
        if exists(path):
            alloc.devices.append((path, path, "rw"))
    ibdevs = sorted({n.ibdev for n in nics.values() if n.ibdev})
    alloc.envs["RDMA_CNI_DEVICE_IDS"] = ",".join(sorted(ids, key=_slot_key))
    alloc.envs["RDMA_CNI_DEVICES"] = ",".join(ibdevs)
    if nccl_env_host_path:
        alloc.mounts.append((NCCL_ENV_CONTAINER_PATH, nccl_env_host_path, True))
    return alloc
