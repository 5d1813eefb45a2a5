"""rtnetlink of one netns: the one implementation of
:class:`rdma_cni.vocab.ports.NetlinkPort` over the kernel.

One :class:`Netlink` is one socket bound to the netns it was created in
(:class:`rdma_cni.adapters.rtnl.Channel`); every step of an invocation in that netns
reuses it. Requests are packed and answers read from pyroute2's message layouts by
:mod:`rdma_cni.adapters.rtnlcodec` and :mod:`rdma_cni.adapters.rtnlanswer`.
Links are addressed by name where the kernel allows it (set, move, delete: one
message, no lookup); addresses, routes and rules are its base class's
(:mod:`rdma_cni.adapters.netlink_l3`). Every call goes through one errno filter
(:func:`rdma_cni.adapters.netlink_l3.filtered`):
the errnos that mean "already so" are success, every other becomes a
:class:`NetlinkFailure` naming the action and the object.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Sequence
from typing import Any

from rdma_cni.adapters import netns
from rdma_cni.adapters.netlink_l3 import NEW
from rdma_cni.adapters.netlink_l3 import filtered as _filtered
from rdma_cni.adapters.netlink_settings import LinkSettings
from rdma_cni.adapters.rtnl import (
    RTM_DELLINK,
    RTM_GETLINK,
    RTM_GETNSID,
    RTM_NEWLINK,
    RTM_SETLINK,
    Channel,
    ifinfmsg,
    nsidmsg,
)
from rdma_cni.adapters.rtnlmsg import (
    link_of,
    nsid_of,
    stats_of,
)
from rdma_cni.adapters.rtnlunlist import SetupError, delete_unlisted
from rdma_cni.records import replace
from rdma_cni.vocab.kinds import LinkKind
from rdma_cni.vocab.netlink import (
    RT_TABLE_MAIN,
    Link,
    LinkStats,
    NetlinkFailure,
    Route,
    not_found,
)

IPVLAN_MODE_L2 = 0
MACVLAN_MODE_BRIDGE = 4
IFF_UP = 1
__all__ = ["RT_TABLE_MAIN", "Link", "LinkStats", "Netlink", "NetlinkFailure", "Route"]


class Netlink(LinkSettings):
    """A netlink socket in one netns: the kernel's :class:`NetlinkPort` (links here,
    their settings in :class:`LinkSettings`, addresses, routes and rules in
    :class:`Layer3`)."""

    def __init__(self, chan: Channel, label: str, netns_fd: int | None = None) -> None:
        self._nl = chan
        self.label = label
        #: the netns this port's socket is in, when it was entered for it (borrowed: the
        #: caller keeps it open while the port is used); its link deletions then return
        #: once the kernel has unlisted the links (:mod:`rdma_cni.adapters.rtnlunlist`)
        self._netns = netns_fd
        #: links found by name, until this port changes them (a port lives for one request)
        self._known: dict[str, Link] = {}

    @classmethod
    def here(cls, label: str = "host") -> Netlink:
        return cls(Channel(), label)

    @classmethod
    def inside(cls, fd: int, home: int, label: str) -> Netlink:
        with netns.entered(fd, home):
            return cls(Channel(), label, fd)

    def close(self) -> None:
        self._nl.close()

    # links: reads ------------------------------------------------------
    def links(self) -> list[Link]:
        out: list[Link] = []
        with _filtered(f"list links in {self.label}"):
            out = [link_of(m) for m in self._nl.dump(ifinfmsg, RTM_GETLINK)]
        return out

    def link(self, name: str) -> Link | None:
        known = self._known.get(name)
        if known is not None:
            return known
        msgs: list[Any] = []
        with _filtered(f"look up {name} in {self.label}", (errno.ENODEV,)):
            # one RTM_GETLINK by name: a dump would decode every link of the node
            msgs = self._nl.request(ifinfmsg, RTM_GETLINK, 0, [("IFLA_IFNAME", name)])
        if not msgs:
            return None
        self._known[name] = found = link_of(msgs[0])
        return found

    def link_at(self, index: int, netnsid: int | None = None) -> Link | None:
        msgs: list[Any] = []
        where = self.label if netnsid is None else f"netns id {netnsid} of {self.label}"
        # IFLA_TARGET_NETNSID (pyroute2's older name); an id this netns does not know: EINVAL
        attrs = [] if netnsid is None else [("IFLA_IF_NETNSID", netnsid)]
        with _filtered(f"look up link {index} in {where}", (errno.ENODEV, errno.EINVAL)):
            msgs = self._nl.request(ifinfmsg, RTM_GETLINK, 0, attrs, index=index)
        return link_of(msgs[0]) if msgs else None

    def netnsid(self, fd: int) -> int | None:
        msgs: list[Any] = []
        with _filtered(f"read the id of a netns in {self.label}"):
            msgs = self._nl.request(nsidmsg, RTM_GETNSID, 0, [("NETNSA_FD", fd)])
        return nsid_of(msgs[0]) if msgs else None

    def link_stats(self, names: Iterable[str]) -> dict[str, LinkStats]:
        wanted, out = set(names), {}
        with _filtered(f"read link counters in {self.label}"):
            for msg in self._nl.dump(ifinfmsg, RTM_GETLINK):
                name = msg.get_attr("IFLA_IFNAME")
                st = stats_of(msg) if name in wanted else None
                if st is not None:
                    out[name] = st
        return out

    # links: changes ----------------------------------------------------
    def create_sublink(self, kind: str, name: str, parent: Link, target_fd: int,
                       mtu: int, mac: str | None) -> None:
        attrs: list[tuple[str, Any]] = [("IFLA_IFNAME", name), ("IFLA_LINK", parent.index),
                                        ("IFLA_NET_NS_FD", target_fd), ("IFLA_MTU", mtu)]
        if kind == LinkKind.MACVLAN:
            data = [("IFLA_MACVLAN_MODE", MACVLAN_MODE_BRIDGE)]
            if mac:
                attrs.append(("IFLA_ADDRESS", mac))
        else:
            data = [("IFLA_IPVLAN_MODE", IPVLAN_MODE_L2)]
        attrs.append(("IFLA_LINKINFO", {"attrs": [("IFLA_INFO_KIND", kind),
                                                  ("IFLA_INFO_DATA", {"attrs": data})]}))
        with _filtered(f"create {kind} {name} on {parent.name}"):
            self._nl.request(ifinfmsg, RTM_NEWLINK, NEW, attrs)

    def move_to_netns(self, name: str, target_fd: int, action: str) -> None:
        self._set(name, action, [("IFLA_NET_NS_FD", target_fd)])
        # what other links show of it changes too: a veth peer's IFLA_LINK, its netns id
        self._known.clear()

    def rename(self, name: str, new: str, alias: str, action: str) -> None:
        link = self.link(name)
        if link is None:
            raise not_found(action, name, self.label)
        self._known.pop(name, None)
        self._known.pop(new, None)
        with _filtered(action):
            self._nl.request(ifinfmsg, RTM_SETLINK, 0,
                             [("IFLA_IFNAME", new), ("IFLA_IFALIAS", alias)], index=link.index)
        self._known[new] = replace(link, name=new, alias=alias or None)

    def set_up(self, name: str, action: str, mtu: int | None = None) -> None:
        self._set(name, action, [("IFLA_MTU", mtu)] if mtu else [], flags=IFF_UP, change=IFF_UP,
                  up=True, **({"mtu": mtu} if mtu else {}))

    def set_down(self, name: str, action: str) -> None:
        self._set(name, action, [], flags=0, change=IFF_UP, up=False)

    def set_mtu(self, name: str, mtu: int, action: str) -> None:
        self._set(name, action, [("IFLA_MTU", mtu)], mtu=mtu)

    def set_alias(self, name: str, alias: str, action: str) -> None:
        self._set(name, action, [("IFLA_IFALIAS", alias)], alias=alias or None)

    def set_mac(self, name: str, mac: str, action: str) -> None:
        self._set(name, action, [("IFLA_ADDRESS", mac)], mac=mac)

    def delete_link(self, name: str) -> bool:
        return self._delete_one([("IFLA_IFNAME", name)], name, {})

    def delete_link_at(self, index: int) -> bool:
        return self._delete_one([], f"link {index}", {"index": index})

    def _delete_one(self, attrs: list[tuple[str, Any]], what: str, fields: dict[str, int]
                    ) -> bool:
        self._known.clear()
        gone = False
        with _filtered(f"delete {what} in {self.label}", (errno.ENODEV,)):
            self._nl.request(ifinfmsg, RTM_DELLINK, 0, attrs, **fields)
            gone = True
        return gone

    def delete_links(self, names: Sequence[str]) -> None:
        """Delete the links (absent ones skipped) and return once the kernel has
        unlisted them, when this port knows its netns (its freeing of them, after the
        system's RCU callbacks, finishes on a thread: :mod:`rdma_cni.adapters.rtnlunlist`).
        Two or more are marked with a link group of their own and deleted as that group
        in one RTM_DELLINK: the kernel unregisters them together and waits for the
        network's grace period once, where one delete each waits once each (about 25 ms
        a link)."""
        wanted = list(dict.fromkeys(names))
        if len(wanted) < 2:
            if self._netns is None or not wanted:
                return super().delete_links(wanted)
            link = self.link(wanted[0])
            if link is not None:
                self._known.pop(link.name, None)
                self._delete([("IFLA_IFNAME", link.name)], [link.index], link.name)
            return None
        group = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF or 1  # never group 0
        marked: list[tuple[int, str]] = []  # (index: 0 when not looked up, name)
        for name in wanted:
            link = self.link(name) if self._netns is not None else None
            try:
                self._set(name, f"mark {name} for deletion in {self.label}",
                          [("IFLA_GROUP", group)])
            except NetlinkFailure as exc:
                if exc.errno != errno.ENODEV:
                    raise
                continue  # already gone
            marked.append((link.index if link is not None else 0, name))
        if not marked:
            return None
        try:
            self._delete([("IFLA_GROUP", group)], [i for i, _ in marked],
                         ", ".join(n for _, n in marked))
        except NetlinkFailure:  # e.g. a kernel without group deletion: one by one
            super().delete_links([n for _, n in marked])
        return None

    def _delete(self, attrs: list[tuple[str, Any]], indexes: list[int], what: str) -> None:
        """One RTM_DELLINK; with the netns known and every link's index, answered once
        the links are unlisted."""
        with _filtered(f"delete {what} in {self.label}", (errno.ENODEV,)):
            if self._netns is not None and 0 not in indexes:
                try:
                    return delete_unlisted(self._netns, attrs, indexes,
                                           lambda i: self.link_at(i) is None)
                except SetupError:  # no thread or socket for it: sent and answered here
                    pass
            self._nl.request(ifinfmsg, RTM_DELLINK, 0, attrs)
