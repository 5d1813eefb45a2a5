"""A strictly read-only view of the plugin's data dir, for the readers that must never
change it (the exporter, the device plugin, ``rdma-cni ls``).

:class:`rdma_cni.store.core.Store` readers tidy up as they go (orphaned temp files
are deleted, corrupt state records moved aside). The exporter may run in a
container that cannot see the plugin's PIDs, so a live writer's temp file would
look orphaned, and a container may see the data dir read-only: these readers must
never change it. They read the same layout (see :mod:`rdma_cni.store.core`) and skip
anything they cannot parse (:attr:`StoreView.unreadable` counts the state records).
"""

from __future__ import annotations

import os
from ipaddress import IPv4Address, IPv4Network
from typing import Any

from rdma_cni import jsondoc
from rdma_cni.regfile import read_regular
from rdma_cni.store.atomic import TMP as _TMP
from rdma_cni.store.core import MAX_READ, Store, pool_dirname
from rdma_cni.store.state import AttachmentState, StateError

_MAX_RECORD = MAX_READ


def _names(directory: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(directory) if not n.startswith(_TMP))
    except OSError:
        return []


def _record(path: str) -> dict[str, Any] | None:
    try:  # a FIFO in a record's place must not hold the reader: it reads as none
        raw = read_regular(path, _MAX_RECORD)
        rec: dict[str, Any] = jsondoc.decode(raw, _MAX_RECORD, dict)
    except (OSError, jsondoc.JsonRefused):
        return None
    return rec


class StoreView:
    def __init__(self, data_dir: str) -> None:
        self.layout = Store(data_dir)
        self.unreadable = 0  # state records the last states() skipped

    def states(self) -> list[AttachmentState]:
        """Parsable state records (``state/*.json`` with a ``key`` object)."""
        out, self.unreadable = [], 0
        for name in (n for n in _names(self.layout.state_dir) if n.endswith(".json")):
            rec = _record(os.path.join(self.layout.state_dir, name))
            try:
                if rec is None or not isinstance(rec.get("key"), dict):
                    raise StateError(name)
                out.append(AttachmentState.from_json(rec))
            except StateError:
                self.unreadable += 1
        return out

    def reserved(self, pool: str) -> set[IPv4Address]:
        """Addresses reserved in ``pool`` (a subnet CIDR), readable or not: the
        by-address layout and the per-subnet one of releases up to 0.1.0."""
        net = IPv4Network(pool)
        legacy = os.path.join(self.layout.ips_dir, pool_dirname(pool))
        out = set()
        for name in [*_names(self.layout.addrs_dir), *_names(legacy)]:
            try:
                ip = IPv4Address(name)
            except ValueError:
                continue
            if ip in net:
                out.add(ip)
        return out

    def nic_claims(self) -> list[str]:
        """Netdevs claimed by a pod (shared and exclusive modes)."""
        return _names(self.layout.nics_dir)

    def nic_claim_pcis(self) -> dict[str, str | None]:
        """Each claimed netdev -> the PCI address of the NIC its claim's plan names (its
        identity, read before the NIC moved); None for a claim without one (an earlier
        release's, a NIC with no PCI function, a record that cannot be read)."""
        out: dict[str, str | None] = {}
        for name in self.nic_claims():
            rec = _record(os.path.join(self.layout.nics_dir, name)) or {}
            plan = rec.get("plan")
            ident = plan.get("identity") if isinstance(plan, dict) else None
            pci = ident.get("pci") if isinstance(ident, dict) else None
            out[name] = pci.lower() if isinstance(pci, str) and pci else None
        return out
