"""An exclusive NIC's alternative names (IFLA_ALT_IFNAME) on its way back to the host.

ADD records the ones it has on the host (its identity's ``altnames``). A pod with
CAP_NET_ADMIN can give the NIC more: another NIC's host name (on the host, ``ip link
show rnic1`` and the next ADD of ``rnic1`` then found this NIC: one NIC stood for
another) or its own host name (the rename home failed, EEXIST). Every name ADD did not
record is deleted before the NIC is renamed or moved (:func:`clean_altnames`), and a
recorded one the pod deleted is put back on the host (:func:`restore_altnames`). A
record of an earlier release names none: then only a name that is the NIC's own host
name or is taken on the host is deleted (the others cannot be told from the host's). A
recorded name the host has given another link while the NIC was away is deleted too:
the kernel refuses to move a link whose alternative name the target netns has."""

from __future__ import annotations

import logging
from collections.abc import Callable

from rdma_cni.errors import escaped, shown
from rdma_cni.vocab.netlink import NetlinkFailure
from rdma_cni.vocab.plan import IfacePlan
from rdma_cni.vocab.ports import NetlinkPort

log = logging.getLogger("rdma_cni")


def recorded(p: IfacePlan) -> list[str] | None:
    """The alternative names ADD recorded (None: the record has none)."""
    names = p.identity.get("altnames")
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else None


def clean_altnames(nl: NetlinkPort, name: str, p: IfacePlan,
                   taken: Callable[[str], bool]) -> None:
    """Delete the alternative names of ``name`` (the NIC, in ``nl``'s netns) that ADD did
    not record; ``taken``: whether the host has a link of that name (other than the NIC)."""
    link = nl.link(name)
    if link is None:
        return
    keep = recorded(p)
    for alt in link.altnames:
        if taken(alt):  # the move would fail (EEXIST) for as long as the host keeps it
            why = "the host has given another link meanwhile"
        elif alt in (keep or ()) or (keep is None and alt != p.nic):
            continue
        else:
            why = "a pod gave it"
        log.warning("exclusive NIC %s returns without the alternative name %s: %s",
                    p.nic, escaped(alt), why)
        nl.del_altname(name, alt, f"delete the alternative name {shown(alt)} of {name} "
                       f"in {nl.label}")


def restore_altnames(host: NetlinkPort, name: str, p: IfacePlan) -> None:
    """Put back on the host the recorded alternative names ``name`` lacks; one the host
    has given another link meanwhile is left out (a warning)."""
    link = host.link(name)
    for alt in recorded(p) or ():
        if link is None or alt in link.altnames:
            continue
        try:
            host.add_altname(name, alt, f"restore the alternative name {shown(alt)} of {name}")
        except NetlinkFailure as exc:
            log.warning("%s", exc.msg)
