"""Links a pod stacks on an exclusive NIC (a macvlan, a VLAN: IFLA_LINK names the NIC as
their lower device). They survive the NIC's move out of the pod's netns and keep
sending through it, on the host or in the next pod that gets it, with the addresses
the first pod gave them: DEL deletes them, by index, once the NIC has left the pod for
the private netns it passes through (nothing new can be stacked on it there). Links
stacked on those are deleted too, the uppermost first. A link the pod moved on into a
netns of its own is out of sight (README, exclusive mode: not restored)."""

from __future__ import annotations

import logging

from rdma_cni.vocab.netlink import Link
from rdma_cni.vocab.ports import NetlinkPort

log = logging.getLogger("rdma_cni")


def stacked(links: list[Link], index: int, netnsid: int | None) -> list[Link]:
    """The links of ``links`` stacked on link ``index`` of the netns this one knows by
    ``netnsid`` (None: this netns), and the links stacked on those, uppermost first."""
    found = [lk for lk in links if lk.iflink == index and lk.link_netnsid == netnsid
             and (netnsid is not None or lk.index != index)]
    seen = {lk.index for lk in found}
    at = 0
    while at < len(found):
        ups = [lk for lk in links if lk.iflink == found[at].index and lk.link_netnsid is None
               and lk.index not in seen]
        seen.update(lk.index for lk in ups)
        found += ups
        at += 1
    return found[::-1]


def drop_stacked(pod: NetlinkPort, index: int, netns_fd: int, nic: str) -> None:
    """Delete the links of ``pod``'s netns stacked on link ``index`` of the netns
    ``netns_fd`` (the NIC, just moved there from the pod)."""
    links = pod.links()  # first: listing gives that netns an id in the pod's, if needed
    netnsid = pod.netnsid(netns_fd)
    if netnsid is None:
        return  # nothing in the pod's netns refers to it
    for link in stacked(links, index, netnsid):
        log.warning("DEL of exclusive NIC %s: deleting link %d the pod stacked on it",
                    nic, link.index)
        pod.delete_link_at(link.index)
