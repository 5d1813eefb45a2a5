"""The attachment key: what libcni caches a result under and GC names in
``cni.dev/valid-attachments``. State, reservations and NIC claims hang off it.

Values come from the runtime and are never used as path components: the store
names files by :meth:`AttachmentKey.digest` and keeps the plain values inside.

Several RDMA networks on one node are several rdma-cni entries of the one conflist
the runtime uses: libcni gives them the same (name, container ID, ifname), so each
entry's key also carries its ``cniConfName`` as ``instance``. The default network
(``cniConfName`` ``rdma``) has instance ``""``, and a key with instance ``""`` has
the digest and record form of release 0.1.0: state written by it still loads.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from rdma_cni import defaults


class AttachmentKey(NamedTuple):
    """Immutable, hashable and ordered (a NamedTuple: no dataclass machinery on the
    exec path)."""

    network: str
    container_id: str
    ifname: str
    instance: str = ""  # the entry's cniConfName, "" for the default ("rdma")

    def digest(self) -> str:
        """The store's file name of the attachment (computed once per key and process)."""
        return _digest(self.network, self.container_id, self.ifname, self.instance)

    def as_dict(self) -> dict[str, str]:
        d = {"network": self.network, "containerID": self.container_id, "ifname": self.ifname}
        if self.instance:
            d["instance"] = self.instance
        return d

    @classmethod
    def from_dict(cls, d: dict[str, str]) -> AttachmentKey:
        instance = d.get("instance", "")
        return cls(d["network"], d["containerID"], d["ifname"],
                   instance if isinstance(instance, str) else "")

    @property
    def legacy(self) -> AttachmentKey | None:
        """The key release 0.1.0 used for this attachment, when it differs."""
        return self._replace(instance="") if self.instance else None


@functools.lru_cache(maxsize=1024)
def _digest(network: str, container_id: str, ifname: str, instance: str) -> str:
    try:  # CPython's own SHA-256, built into Debian's interpreter; hashlib loads OpenSSL's
        from _sha256 import sha256  # (libcrypto: about 4 ms of each exec'd in-process ADD)
    except ImportError:
        from hashlib import sha256

    parts = [network, container_id, ifname]
    if instance:
        parts.append(instance)
    # surrogatepass: an environment's undecodable bytes (CNI_IFNAME) and JSON's lone
    # "\udXXX" escapes (a network name) have a key too; valid text encodes as before
    return sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:40]


DEFAULT_INSTANCE = defaults.CNI_CONF_NAME


def instance_of(conf: dict[str, object]) -> str:
    """The key's instance for a raw network config: its cniConfName, "" for the default."""
    name = conf.get("cniConfName", DEFAULT_INSTANCE)
    return name if isinstance(name, str) and name != DEFAULT_INSTANCE else ""
