"""The name an exclusive NIC comes back to the host under: its own, or one of its own
making when the host has taken that meanwhile."""

from __future__ import annotations

import logging
from collections.abc import Callable

from rdma_cni.errors import IOFailure
from rdma_cni.vocab.plan import IfacePlan

log = logging.getLogger("rdma_cni")


def fallback_name(p: IfacePlan) -> str:
    """A host name of its own for a returning NIC whose name is taken: ``rdma`` and its
    whole PCI address (``0000:48:00.0``: ``rdma000048000``), else its MAC's last digits,
    else its old name's. Two NICs of a node never share one (the last six characters of
    the PCI address did: ``0000:48:00.0`` and ``0000:88:00.0``)."""
    ident = str(p.identity.get("pci") or p.identity.get("mac") or p.nic)
    return "rdma" + "".join(c for c in ident if c.isascii() and c.isalnum())[-11:]


def home_name(p: IfacePlan, taken: Callable[[str], bool], index: int) -> str:
    """The name a returning NIC gets on the host: its own, else :func:`fallback_name`,
    else one from its interface index (``index``; a NIC is never left out because a
    name is taken)."""
    for name in (p.nic, fallback_name(p), f"rdmaif{index}"):
        if not taken(name):
            if name != p.nic:
                log.warning("host name %s of the returning NIC is taken: it comes back as %s",
                            p.nic, name)
            return name
    raise IOFailure(f"failed to return {p.nic}: the names {p.nic}, {fallback_name(p)} and "
                    f"rdmaif{index} are all taken on the host")
