"""The settings of a link (:class:`rdma_cni.vocab.ports.NetlinkPort`'s part of them
beyond name, state, MTU, MAC and alias): flags, queue length, alternative names, and its
IPv4 and IPv6 settings, which a move to another netns resets. The base of
:class:`rdma_cni.adapters.netlink.Netlink`, over its channel ``_nl``."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import Any

from rdma_cni.adapters import procsys
from rdma_cni.adapters.netlink_l3 import Layer3
from rdma_cni.adapters.netlink_l3 import filtered as _filtered
from rdma_cni.adapters.rtnl import (
    RTM_DELLINKPROP,
    RTM_GETLINK,
    RTM_NEWLINKPROP,
    RTM_SETLINK,
    ifinfmsg,
)
from rdma_cni.adapters.rtnlmsg import inet6_mode_attrs, ipv4_conf_attrs, link_conf_of
from rdma_cni.records import replace
from rdma_cni.vocab.netlink import IPV4_DEVCONF, Link, LinkConf, NetlinkFailure, not_found


class LinkSettings(Layer3):
    """Link settings over ``_nl``; ``_known``: the links found by name until this port
    changes them; ``_netns``: the netns the port's socket is in, when it was entered."""

    _known: dict[str, Link]
    _netns: int | None

    def _set(self, name: str, action: str, attrs: list[tuple[str, Any]], flags: int = 0,
             change: int = 0, **after: Any) -> None:
        """One RTM_SETLINK of the link named ``name`` (the kernel finds it by name);
        ``after``: the fields of a known link that the change sets (it is forgotten when
        there are none: e.g. a move to another netns)."""
        known = self._known.pop(name, None)
        try:
            with _filtered(action):
                self._nl.request(ifinfmsg, RTM_SETLINK, 0, [("IFLA_IFNAME", name), *attrs],
                                 flags=flags, change=change)
        except NetlinkFailure as exc:
            if exc.errno == errno.ENODEV:
                raise not_found(action, name, self.label) from None
            raise
        if known is not None and after:
            self._known[name] = replace(known, **after)

    def set_flags(self, name: str, flags: int, mask: int, action: str) -> None:
        self._set(name, action, [], flags=flags & mask, change=mask)

    def set_txqlen(self, name: str, txqlen: int, action: str) -> None:
        self._set(name, action, [("IFLA_TXQLEN", txqlen)])

    def add_altname(self, name: str, altname: str, action: str) -> None:
        self._altname(RTM_NEWLINKPROP, name, altname, action, ())

    def del_altname(self, name: str, altname: str, action: str) -> None:
        self._altname(RTM_DELLINKPROP, name, altname, action, (errno.ENOENT, errno.ENODATA))

    def _altname(self, kind: int, name: str, altname: str, action: str,
                 absent: tuple[int, ...]) -> None:
        link = self.link(name)
        if link is None:
            raise not_found(action, name, self.label)
        self._known.clear()  # a name found through an alternative name changed too
        with _filtered(action, absent):
            self._nl.request(ifinfmsg, kind, 0, [("IFLA_PROP_LIST", {"attrs": [
                ("IFLA_ALT_IFNAME", altname)]})], index=link.index)

    def link_conf(self, name: str) -> LinkConf | None:
        msgs: list[Any] = []
        with _filtered(f"look up {name} in {self.label}", (errno.ENODEV,)):
            msgs = self._nl.request(ifinfmsg, RTM_GETLINK, 0, [("IFLA_IFNAME", name)])
        return link_conf_of(msgs[0]) if msgs else None

    def set_ipv6_conf(self, name: str, values: Sequence[tuple[str, int]], action: str) -> None:
        try:
            procsys.write_ipv6_conf(name, values, self._netns)
        except OSError as exc:
            raise NetlinkFailure(f"failed to {action}: {exc.strerror or exc}",
                                 exc.errno or errno.EIO) from None

    def set_inet6_mode(self, name: str, mode: int, action: str) -> None:
        self._set(name, action, inet6_mode_attrs(mode))

    def set_ipv4_conf(self, name: str, values: Sequence[tuple[str, int]], action: str) -> None:
        # through netlink, not /proc/sys: a lookup there grows with the netns that have
        # had one (four writes: 0.14 ms on a quiet node, 0.67 ms with 512 such pods,
        # bench/floor_steps.py), and /proc/sys is read-only in a container's view
        known = self._known.get(name)
        self._set(name, action, ipv4_conf_attrs([(IPV4_DEVCONF[k], v) for k, v in values]))
        if known is not None:  # none of what a link is known by: still known after
            self._known[name] = known
