"""The RDMA subsystem netns mode (``rdma system``: shared or exclusive), DESIGN §2.

``read_netns_mode`` asks RDMA netlink (``RDMA_NLDEV_CMD_SYS_GET``), the way ADD
does, so no ``rdma`` tool is needed. It returns None when the kernel has no RDMA
netlink (no ib_core): callers decide what unknown means (the CNI proceeds,
``doctor`` warns).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rdma_cni.errors import NicUnavailable

if TYPE_CHECKING:
    from rdma_cni.adapters.rdmanl import RdmaNetlink

SHARED_MODES = ("shared", "shared-multi", "shared-host")


def read_netns_mode(rdma: RdmaNetlink | None = None) -> str | None:
    """ "shared" | "exclusive", or None when unknown."""
    if rdma is None:
        from rdma_cni.adapters.rdmanl import RdmaNetlink

        rdma = RdmaNetlink()
    return rdma.netns_mode()


def check_mode(node_mode: str, netns_mode: str | None) -> None:
    """Refuse a shared node mode under the exclusive RDMA netns mode (error 104)."""
    if node_mode in SHARED_MODES and netns_mode == "exclusive":
        raise NicUnavailable(
            f"failed to use RDMA in mode {node_mode}: the RDMA subsystem netns mode is "
            "exclusive, shared modes need it shared (rdma system set netns shared, at boot)"
        )
