"""NIC claims: one owned record per claimed netdev (``nics/<netdev>``), created
exclusively and holding its owner, as :mod:`rdma_cni.store.claims` keeps address
reservations. The netdev's name is checked before it becomes a path. See
:mod:`rdma_cni.store.core` for the layout, corrupt records and concurrency.

A claim also holds the interface as ADD planned it (``plan``, the state record's form
of it: :func:`rdma_cni.store.records.claim_plan`): the NIC's identity and its host
configuration, read from the host before the NIC moved. DEL of a key whose state
record is unreadable (:mod:`rdma_cni.datapath.salvage`) takes the NIC back by that
identity and restores that configuration, never what the pod shows. Claims of earlier
releases hold no plan (``_owner_of`` ignores keys it does not know, so they read the
new ones as before)."""

from __future__ import annotations

import os
from typing import Any

from rdma_cni.errors import ConfigError, shown
from rdma_cni.store.claims import UNKNOWN_OWNER, Claims, Owner, key_of
from rdma_cni.store.files import Corrupt, read_record, remove, scan
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.names import valid_netdev


class NicClaims(Claims):
    """The NIC claims of :class:`rdma_cni.store.core.Store`, on its owned records."""

    nics_dir: str

    def _nic_path(self, netdev: str) -> str:
        if not valid_netdev(netdev):
            raise ConfigError(f"invalid netdev name {shown(netdev)}: need 1-15 of [A-Za-z0-9_.-]")
        return os.path.join(self.nics_dir, netdev)

    def claim_nic(self, netdev: str, key: AttachmentKey, ifname: str,
                  plan: dict[str, Any] | None = None) -> bool:
        """Claim ``netdev``; True if now (or already) claimed by (key, ifname). ``plan``:
        the interface as ADD planned it, kept with the claim (see the module's docstring)."""
        path = self._nic_path(netdev)
        return self._claim(self.nics_dir, os.path.basename(path), key, ifname,
                           {"plan": plan} if plan else None)

    def claimed_plans(self, key: AttachmentKey) -> dict[str, tuple[str, dict[str, Any] | None]]:
        """netdev -> (ifname, the plan its claim holds, or None) of ``key``'s NIC claims."""
        out: dict[str, tuple[str, dict[str, Any] | None]] = {}
        for name in scan(self.nics_dir):
            try:
                rec = read_record(os.path.join(self.nics_dir, name))
                if rec is None or key_of(rec) != key or not isinstance(rec.get("ifname"), str):
                    continue
            except Corrupt:
                continue
            plan = rec.get("plan")
            out[name] = rec["ifname"], plan if isinstance(plan, dict) else None
        return out

    def nic_owner(self, netdev: str) -> Owner | None:
        return self._owner_at(self._nic_path(netdev))

    def nic_claims(self) -> dict[str, Owner]:
        out: dict[str, Owner] = {}
        for name in scan(self.nics_dir):
            owner = self._owner_at(os.path.join(self.nics_dir, name))
            if owner is not None:
                out[name] = owner
        return out

    def release_nics(self, key: AttachmentKey, ifname: str | None = None) -> int:
        freed = 0
        if key == UNKNOWN_OWNER:
            return 0
        with self.lock():
            for netdev, (k, ifn) in self.nic_claims().items():
                if k == key and (ifname is None or ifn == ifname):
                    freed += remove(os.path.join(self.nics_dir, netdev))  # no fsync: boot.py
        return freed
