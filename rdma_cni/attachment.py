"""The attachment key: what libcni caches a result under and GC names in
``cni.dev/valid-attachments``. State, reservations and NIC claims hang off it.

Values come from the runtime and are never used as path components: the store
names files by :meth:`AttachmentKey.digest` and keeps the plain values inside.
"""

from __future__ import annotations

from typing import NamedTuple


class AttachmentKey(NamedTuple):
    """Immutable, hashable and ordered (a NamedTuple: no dataclass machinery on the
    exec path)."""

    network: str
    container_id: str
    ifname: str

    def digest(self) -> str:
        import hashlib

        raw = "\x00".join((self.network, self.container_id, self.ifname)).encode()
        return hashlib.sha256(raw).hexdigest()[:40]

    def as_dict(self) -> dict[str, str]:
        return {"network": self.network, "containerID": self.container_id, "ifname": self.ifname}

    @classmethod
    def from_dict(cls, d: dict[str, str]) -> AttachmentKey:
        return cls(d["network"], d["containerID"], d["ifname"])
