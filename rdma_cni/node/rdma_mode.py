"""The RDMA subsystem netns mode (``rdma system``: shared or exclusive), DESIGN §2.

``read_netns_mode`` asks RDMA netlink (``RDMA_NLDEV_CMD_SYS_GET``), the way ADD
does, so no ``rdma`` tool is needed. It returns None when the kernel has no RDMA
netlink (no ib_core): callers decide what unknown means (the CNI proceeds,
``doctor`` warns).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rdma_cni.errors import NicUnavailable
from rdma_cni.vocab.modes import RdmaNetnsMode, parse

if TYPE_CHECKING:
    from rdma_cni.adapters.rdmanl import RdmaNetlink


def read_netns_mode(rdma: RdmaNetlink | None = None) -> RdmaNetnsMode | None:
    """The RDMA netns mode, or None when unknown."""
    if rdma is None:
        from rdma_cni.adapters.rdmanl import RdmaNetlink

        rdma = RdmaNetlink()
    return rdma.netns_mode()


def check_mode(node_mode: str, netns_mode: str | None) -> None:
    """Refuse a node mode under an RDMA netns mode it does not work under (error 104:
    the shared modes under the exclusive one). Unknown modes are not refused here."""
    mode = parse(node_mode)
    if mode is None or netns_mode is None or netns_mode in mode.traits.rdma_netns:
        return
    want = " or ".join(mode.traits.rdma_netns)
    raise NicUnavailable(
        f"failed to use RDMA in mode {node_mode}: the RDMA subsystem netns mode is "
        f"{netns_mode}, mode {node_mode} needs it {want} (rdma system set netns {want}, "
        "at boot)"
    )
