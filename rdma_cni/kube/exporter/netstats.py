"""The exporter's real readers of the OS: pod interface counters through
rtnetlink inside the pod's netns (IFLA_STATS64; ``/sys/class/net`` would show
the netns that mounted sysfs, not the pod's), and (from :mod:`rdma_cni.node.pools`)
the host NICs' addresses."""

from __future__ import annotations

import os
from collections.abc import Sequence

from rdma_cni.adapters import netns
from rdma_cni.adapters.netlink import Netlink
from rdma_cni.kube.exporter.attachments import IfStats
from rdma_cni.node.pools import host_nics


def pod_stats(path: str, ifnames: Sequence[str]) -> dict[str, IfStats]:
    """Counters of ``ifnames`` in the netns at ``path`` (NetnsGone if it vanished)."""
    fd = netns.open_netns(path)
    home = netns.host_fd()
    try:
        nl = Netlink.inside(fd, home, f"netns {path}")
    finally:
        os.close(fd)
        os.close(home)
    try:
        return {name: IfStats(st.rx_bytes, st.tx_bytes, st.rx_packets, st.tx_packets)
                for name, st in nl.link_stats(ifnames).items()}
    finally:
        nl.close()


__all__ = ["host_nics", "pod_stats"]
