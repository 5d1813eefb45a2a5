"""Per node: RDMA slots allocated vs capacity (DESIGN §8) and IPAM addresses
per NIC, from the NICs (discovery), their host addresses (an injectable
:class:`HostReader`) and the store's reservations and claims.

Capacity by the mode's :class:`rdma_cni.vocab.modes.Capacity` rule: one slot per NIC
(shared, exclusive); ``min(slotsPerNic, pool share)`` per NIC (shared-multi);
``min(hostSlots, smallest pool share)`` (shared-host), a NIC's pool share being its part
of a pool NICs on one subnet share (:func:`rdma_cni.node.pools.shares`). Allocated: claimed NICs,
pod interfaces, attachments respectively.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from ipaddress import IPv4Address

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.ipam.allocator import Pool
from rdma_cni.node.discovery import discover
from rdma_cni.node.pools import HostReader, NodeSettings, build_pools, shares, slot_capacity
from rdma_cni.node.primary import PrimaryReader
from rdma_cni.store.view import StoreView
from rdma_cni.vocab.modes import Capacity
from rdma_cni.vocab.nic import HostNic

log = logging.getLogger("rdma_cni.kube.exporter")
__all__ = ["CapacityCollector", "HostNic", "HostReader", "Settings"]


Settings = NodeSettings


def free_in(pool: Pool, reserved: set[IPv4Address]) -> tuple[int, int]:
    """(reserved assignable addresses, free addresses) of ``pool``."""
    used = sum(1 for ip in reserved if pool.in_range(ip) and ip not in pool.excluded)
    return used, max(pool.size() - used, 0)


def capacity(settings: Settings, nics: Sequence[str], pools: Mapping[str, Pool]) -> int:
    """As the device plugin counts it: NICs sharing a pool share its addresses."""
    share = shares(pools)
    return slot_capacity(settings, [share.get(n, 0) for n in nics])


def allocated(settings: Settings, view: StoreView, nics: Sequence[str]) -> int:
    if settings.capacity is Capacity.PER_NIC:
        return len(set(view.nic_claims()) & set(nics))
    states = view.states()
    if settings.capacity is Capacity.SLOTS_PER_NIC:
        return sum(len(s.interfaces) for s in states)
    return sum(1 for s in states if s.interfaces)


class CapacityCollector:
    name = "capacity"

    def __init__(self, settings: Settings, sysfs: Sysfs, view: StoreView,
                 host: HostReader, primary: PrimaryReader | None = None) -> None:
        self.settings = settings
        self.sysfs = sysfs
        self.view = view
        self.host = host
        self.primary = primary

    def collect(self) -> Iterator[Metric]:
        names = [n.netdev for n in discover(self.sysfs, self.settings.pinned)]
        if self.primary is not None:  # as the device plugin: never the node's own NIC
            own = self.primary(names, self.settings.node_ips)
            names = [n for n in names if n not in own]
        facts, host_addrs = self.host(names)
        present = [n for n in names if n in facts]
        nics = present + self._in_pods(present)
        pools = (build_pools(facts, host_addrs, self.settings.ranges)
                 if self.settings.mode.traits.pod_ipam else {})
        res = [self.settings.resource]
        cap = GaugeMetricFamily("rdma_cni_slots_capacity", "RDMA device-plugin slots this "
                                "node offers", labels=["resource", "mode"])
        cap.add_metric([*res, self.settings.mode], capacity(self.settings, nics, pools))
        used = GaugeMetricFamily("rdma_cni_slots_allocated", "RDMA slots in use by pods "
                                 "(from the plugin's state)", labels=["resource", "mode"])
        used.add_metric([*res, self.settings.mode], allocated(self.settings, self.view, nics))
        yield cap
        yield used
        yield from self._ipam(pools)

    def _in_pods(self, present: Sequence[str]) -> list[str]:
        """Where the mode moves NICs into pods (exclusive): the claimed NICs the host no
        longer shows (a pod holds them), which the node's capacity counts as the device
        plugin does (it keeps them Healthy)."""
        if not self.settings.mode.traits.moves_nic:
            return []
        on_host = set(self.sysfs.listdir("sys/class/net"))
        wanted = set(self.settings.pinned) if self.settings.pinned is not None else None
        return sorted(n for n in self.view.nic_claims() if n not in on_host and
                      (wanted is None or n in wanted) and n not in present)

    def _ipam(self, pools: Mapping[str, Pool]) -> Iterator[Metric]:
        lab = ["nic", "subnet"]
        size = GaugeMetricFamily("rdma_cni_ipam_pool_addresses",
                                 "Assignable pod addresses in the NIC's range", labels=lab)
        held = GaugeMetricFamily("rdma_cni_ipam_reserved_addresses",
                                 "Addresses of the NIC's range reserved by pods", labels=lab)
        free = GaugeMetricFamily("rdma_cni_ipam_free_addresses",
                                 "Addresses of the NIC's range still free", labels=lab)
        for nic, pool in sorted(pools.items()):
            used, left = free_in(pool, self.view.reserved(pool.name))
            size.add_metric([nic, pool.name], pool.size())
            held.add_metric([nic, pool.name], used)
            free.add_metric([nic, pool.name], left)
        yield from (size, held, free)
