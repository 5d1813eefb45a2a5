"""The device plugin's view of the node: NICs, their health, the device list.

``Inventory.refresh()`` re-reads sysfs; when the device list changes (a port
leaves ACTIVE, a netdev disappears or comes back, capacity changes) it bumps a
version and wakes ``ListAndWatch`` streams waiting in ``wait()``.

NICs are remembered by device ID. A NIC seen once and then gone stays listed,
Unhealthy, under its last known identity, until a NIC of the node shows its device ID
again under another name; with ``devices`` pinned, a pinned netdev gone is listed as
the NIC last seen under its name, unless a NIC of the node has that device ID now (the
kubelet would get one ID twice, Healthy and Unhealthy). A NIC once seen with an RDMA
device and now without one is Unhealthy: a pod given it would get no uverbs device.
Where the mode moves the NIC into its pod (exclusive), a NIC gone from the host that
the store says a pod holds (its claim, ``claimed``, told by the PCI address the claim
records, not by a name another NIC may take) is in use, not broken, and stays
Healthy: the kubelet's allocatable counts Healthy devices only, and the scheduler
subtracts the pods' requests from it, so an in-use NIC reported Unhealthy would be
counted twice and keep a pod Pending with NICs free.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import NicUnavailable, shown
from rdma_cni.kube.deviceplugin.devices import Device, build_devices, nic_healthy
from rdma_cni.node.discovery import discover, rdma_now
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
        claimed: Callable[[], Mapping[str, str | None]] | None = None,
    ) -> None:
        self.settings = settings
        self.sysfs = sysfs
        self.free_addresses = free_addresses
        self.primary = primary
        # the store's NIC claims: netdev -> the claimed NIC's PCI address (None: not
        # recorded); read only where NICs move
        self.claimed = claimed if settings.mode.traits.moves_nic else None
        self._known: dict[str, Nic] = {}  # device ID -> the NIC as last seen on the host
        self._names: dict[str, str] = {}  # netdev -> the device ID last seen under it
        self._rdma: set[str] = set()  # device IDs once seen with an RDMA device
        self._slots: dict[str, int] = {}  # device ID -> its last capacity
        self._cond = threading.Condition()
        self.version = 0
        self.devices: list[Device] = []
        self.by_id: dict[str, Device] = {}
        self.closed = False

    def _scan(self) -> tuple[list[Nic], dict[str, bool]]:
        """The NICs to list and their health, both by device ID."""
        current = discover(self.sysfs, self.settings.pinned)
        if self.primary is not None:  # the node's own NIC is never advertised
            own = self.primary([n.netdev for n in current], self.settings.node_ips)
            current = keep_off(current, own, pinned=False)
        here = [n for n in current if self.sysfs.exists(f"sys/class/net/{n.netdev}")]
        for nic in here:
            self._known[nic.device_id] = nic
            self._names[nic.netdev] = nic.device_id
            if nic.ibdev is not None:
                self._rdma.add(nic.device_id)
        ids = {n.device_id for n in here}
        if self.settings.pinned is None:
            gone = [n for i, n in self._known.items() if i not in ids]
            nics = sorted(here + gone, key=lambda n: (n.netdev, n.device_id))
        else:
            nics = self._pinned(current, ids)
        in_pods = self._in_pods([n for n in nics if n.device_id not in ids])
        health = {n.device_id: nic_healthy(n, n.device_id in ids or n.device_id in in_pods)
                  and not (n.ibdev is None and n.device_id in self._rdma) for n in nics}
        return nics, health

    def _pinned(self, current: list[Nic], ids: set[str]) -> list[Nic]:
        """The pinned netdevs in config order: a missing one as last seen under its name,
        unless a NIC of the node has that device ID now (the kubelet would get the ID
        twice, Healthy and not), or an entry before it took it; else as discovery gives
        it (no PCI function: its name is its ID)."""
        out: list[Nic] = []
        taken = set(ids)
        for nic in current:
            seen = self._known.get(self._names.get(nic.netdev, ""))
            if nic.device_id not in ids and seen is not None and seen.device_id not in taken:
                nic = seen
            taken.add(nic.device_id)
            out.append(nic)
        return out

    def _in_pods(self, gone: list[Nic]) -> set[str]:
        """The device IDs of the NICs gone from the host that a pod holds (none unless
        NICs move): a claim names the NIC's PCI function (its record's identity), else,
        for a claim without one or a NIC whose PCI function names it not alone, its name.
        Never by name alone where the claim says which NIC it is: a host NIC renamed to
        the claimed one's old name is another NIC."""
        if not gone or self.claimed is None:
            return set()
        claims = self.claimed()
        pcis = {p.lower() for p in claims.values() if p}
        return {n.device_id for n in gone if _held(n, claims, pcis)}

    def _capacity(self, nic: Nic, healthy: bool) -> int:
        """Free addresses of the NIC's range; the last healthy reading while unhealthy
        (so a flapping NIC keeps its device IDs, Unhealthy, instead of losing them)."""
        key = nic.device_id
        if healthy or key not in self._slots:
            cap = max(self.free_addresses(nic), 0)
            if healthy or cap > 0:
                self._slots[key] = cap
        return self._slots.get(key, 0)

    def _host_slots(self, nics: Sequence[Nic], health: dict[str, bool]) -> int:
        if not nics:
            return 0
        return host_slots(self.settings, [self._capacity(n, health[n.device_id]) for n in nics])

    def compute(self) -> list[Device]:
        nics, health = self._scan()
        know = getattr(self.free_addresses, "know", None)  # PoolSizes: NICs read together
        if know is not None:
            know([n.netdev for n in nics])
        by_host = self.settings.capacity is Capacity.HOST_SLOTS
        host = self._host_slots(nics, health) if by_host else 0

        def slots(nic: Nic) -> int:
            return nic_slots(self.settings, self._capacity(nic, health[nic.device_id]))

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

    def allocatable(self, ids: Sequence[str]) -> dict[str, Device]:
        """The devices ``ids`` name as Allocate gives them: each listed (else KeyError)
        and Healthy, its NICs' RDMA devices still theirs, their uverbs devices read
        again now (else :class:`NicUnavailable`): a NIC gone from the node is never
        served, nor the uverbs device its old name now has (another NIC's). A NIC a pod
        holds (exclusive: its RDMA device moved with it) is given as last seen: the
        kubelet gives it once that pod ended, and it comes back at the pod's DEL."""
        by_id = self.by_id
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            raise KeyError(f"unknown device IDs {', '.join(shown(i) for i in unknown)}")
        out: dict[str, Device] = {}
        for dev_id in dict.fromkeys(ids):
            dev = by_id[dev_id]
            nics = [self._now(n) for n in dev.nics]
            if not dev.healthy or any(n is None for n in nics):
                why = "is Unhealthy" if not dev.healthy else "has lost its RDMA device"
                raise NicUnavailable(f"device {shown(dev_id)} {why}: not allocated")
            out[dev_id] = replace(dev, nics=tuple(n for n in nics if n is not None))
        return out

    def _now(self, nic: Nic) -> Nic | None:
        fresh = rdma_now(self.sysfs, nic)
        if fresh is None and nic.device_id in self._in_pods([nic]):
            return nic
        return fresh

    def wait(self, seen: int, timeout: float,
             until: Callable[[], bool] | None = None) -> tuple[int, list[Device]]:
        """Block until the version differs from ``seen`` (or timeout, close, or ``until()``
        once :meth:`wake` is called)."""
        with self._cond:
            self._cond.wait_for(lambda: self.version != seen or self.closed
                                or (until is not None and until()), timeout)
            return self.version, list(self.devices)

    def wake(self) -> None:
        """Wake the waiters of :meth:`wait` to check their ``until``."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


def _held(nic: Nic, claims: Mapping[str, str | None], pcis: set[str]) -> bool:
    """Whether a claim is ``nic``'s (see :meth:`Inventory._in_pods`)."""
    if nic.pci and not nic.shares_function:
        return nic.pci.lower() in pcis or (nic.netdev in claims and not claims[nic.netdev])
    return nic.netdev in claims
