"""The device plugin's view of the node: NICs, their health, the device list.

``Inventory.refresh()`` re-reads sysfs; when the device list changes (a port
leaves ACTIVE, a netdev disappears or comes back, capacity changes) it bumps a
version and wakes ``ListAndWatch`` streams waiting in ``wait()``.

A NIC seen once and then gone stays listed, Unhealthy, under its last known identity,
until a NIC of the node shows its device ID again under another name. A NIC once seen
with an RDMA device and now without one is Unhealthy: a pod given it would get no
uverbs device. Where the mode moves the NIC into its pod (exclusive), a NIC gone from
the host that the store says a pod holds (its claim, ``claimed``) is in use, not
broken, and stays Healthy: the kubelet's allocatable counts Healthy devices only, and
the scheduler subtracts the pods' requests from it, so an in-use NIC reported
Unhealthy would be counted twice and keep a pod Pending with NICs free.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.kube.deviceplugin.devices import Device, build_devices, nic_healthy
from rdma_cni.node.discovery import discover
from rdma_cni.node.pools import NodeSettings, host_slots, nic_slots
from rdma_cni.node.primary import PrimaryReader, keep_off
from rdma_cni.vocab.modes import Capacity
from rdma_cni.vocab.nic import Nic

PluginSettings = NodeSettings


class Inventory:
    def __init__(
        self,
        settings: PluginSettings,
        sysfs: Sysfs,
        free_addresses: Callable[[Nic], int],
        primary: PrimaryReader | None = None,
        claimed: Callable[[], Collection[str]] | None = None,
    ) -> None:
        self.settings = settings
        self.sysfs = sysfs
        self.free_addresses = free_addresses
        self.primary = primary
        # the netdevs pods hold (the store's NIC claims); read only where NICs move
        self.claimed = claimed if settings.mode.traits.moves_nic else None
        self._known: dict[str, Nic] = {}
        self._rdma: set[str] = set()  # netdevs once seen with an RDMA device
        self._slots: dict[str, int] = {}
        self._cond = threading.Condition()
        self.version = 0
        self.devices: list[Device] = []
        self.by_id: dict[str, Device] = {}
        self.closed = False

    def _scan(self) -> tuple[list[Nic], dict[str, bool]]:
        current = discover(self.sysfs, self.settings.pinned)
        if self.primary is not None:  # the node's own NIC is never advertised
            own = self.primary([n.netdev for n in current], self.settings.node_ips)
            current = keep_off(current, own, pinned=False)
        present = {n.netdev: self.sysfs.exists(f"sys/class/net/{n.netdev}") for n in current}
        nics: list[Nic] = []
        for nic in current:
            if present[nic.netdev]:
                self._known[nic.netdev] = nic
                if nic.ibdev is not None:
                    self._rdma.add(nic.netdev)
            nics.append(nic if present[nic.netdev] else self._known.get(nic.netdev, nic))
        if self.settings.pinned is None:
            nics = sorted(nics + self._gone(nics, present), key=lambda n: n.netdev)
            present.update({n.netdev: False for n in nics if n.netdev not in present})
        in_pods = self._in_pods([n.netdev for n in nics if not present[n.netdev]])
        health = {n.netdev: nic_healthy(n, present[n.netdev] or n.netdev in in_pods)
                  and not (n.ibdev is None and n.netdev in self._rdma) for n in nics}
        return nics, health

    def _gone(self, nics: list[Nic], present: dict[str, bool]) -> list[Nic]:
        """NICs seen before and gone now; not one whose device ID a NIC of the node has
        again under another name (the kubelet would get that ID twice, Healthy and not)."""
        ids = {n.device_id for n in nics}
        for name in [name for name, n in self._known.items()
                     if name not in present and n.device_id in ids]:
            del self._known[name]
        return [n for name, n in self._known.items() if name not in present]

    def _in_pods(self, gone: list[str]) -> Collection[str]:
        """Which of the netdevs gone from the host a pod holds (empty unless NICs move)."""
        if not gone or self.claimed is None:
            return ()
        return set(gone) & set(self.claimed())

    def _capacity(self, nic: Nic, healthy: bool) -> int:
        """Free addresses of the NIC's range; the last healthy reading while unhealthy
        (so a flapping NIC keeps its device IDs, Unhealthy, instead of losing them)."""
        if healthy or nic.netdev not in self._slots:
            cap = max(self.free_addresses(nic), 0)
            if healthy or cap > 0:
                self._slots[nic.netdev] = cap
        return self._slots.get(nic.netdev, 0)

    def _host_slots(self, nics: Sequence[Nic], health: dict[str, bool]) -> int:
        if not nics:
            return 0
        return host_slots(self.settings, [self._capacity(n, health[n.netdev]) for n in nics])

    def compute(self) -> list[Device]:
        nics, health = self._scan()
        know = getattr(self.free_addresses, "know", None)  # PoolSizes: NICs read together
        if know is not None:
            know([n.netdev for n in nics])
        by_host = self.settings.capacity is Capacity.HOST_SLOTS
        host = self._host_slots(nics, health) if by_host else 0

        def slots(nic: Nic) -> int:
            return nic_slots(self.settings, self._capacity(nic, health[nic.netdev]))

        return build_devices(self.settings.mode, nics, health, slots, host)

    def refresh(self) -> bool:
        """Re-read the node; True (and streams woken) when the list changed."""
        devices = self.compute()
        with self._cond:
            if devices == self.devices and self.version:
                return False
            self.devices = devices
            self.by_id = {d.id: d for d in devices}
            self.version += 1
            self._cond.notify_all()
            return True

    def wait(self, seen: int, timeout: float) -> tuple[int, list[Device]]:
        """Block until the version differs from ``seen`` (or timeout/close)."""
        with self._cond:
            self._cond.wait_for(lambda: self.version != seen or self.closed, timeout)
            return self.version, list(self.devices)

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()
