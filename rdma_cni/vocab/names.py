"""The name rules, with one regex for a netdev name (what the kernel takes as an
interface name and the store as a file name): 1-15 of ``[A-Za-z0-9_.-]``, not ``.``
or ``..``. On it: a pod interface name (:func:`check_ifname`: not ``all``, ``default``,
``lo`` or ``eth0`` either), a host netdev of the config (:func:`check_host_netdev`: not ``lo``). The
runtime's ``CNI_IFNAME`` follows the CNI spec's looser rule instead
(:func:`cni_ifname_ok`). Pure; the ``check_*`` raise ValueError (the models'
validators)."""

from __future__ import annotations

import re

from rdma_cni.errors import shown

_NETDEV_RE = re.compile(r"[A-Za-z0-9_.-]{1,15}")
# "all" and "default" name /proc/sys/net/*/conf/ entries: the kernel refuses them for a netdev
RESERVED_IFNAMES = frozenset((".", "..", "all", "default", "lo", "eth0"))
_CNI_IFNAME_BAD = re.compile(r"[/:\s\x00]")


def valid_netdev(name: str) -> bool:
    return bool(_NETDEV_RE.fullmatch(name)) and name not in (".", "..")


def check_ifname(value: str) -> str:
    """A pod interface name of an annotation block."""
    if not _NETDEV_RE.fullmatch(value) or value in RESERVED_IFNAMES:
        raise ValueError(
            f"interface name {shown(value)} is invalid: 1-15 characters of [A-Za-z0-9_.-], "
            "not '.', '..', 'all', 'default', 'lo' or 'eth0'"
        )
    return value


def check_host_netdev(value: str) -> str:
    """A host netdev name (unlike a pod interface name, eth0 is a legitimate RDMA NIC)."""
    if not valid_netdev(value) or value == "lo":
        raise ValueError(f"netdev name {shown(value)} is invalid: 1-15 characters of "
                         "[A-Za-z0-9_.-], not '.', '..' or 'lo' (never an RDMA NIC)")
    return value


def cni_ifname_ok(value: str) -> bool:
    """The runtime's CNI_IFNAME: at most 15 bytes (IFNAMSIZ counts bytes, as the kernel
    and the reference skel do), not ``.`` or ``..``, without ``/``, ``:``, whitespace
    or NUL."""
    too_long = len(value.encode("utf-8", "surrogatepass")) > 15
    return not (too_long or value in (".", "..") or _CNI_IFNAME_BAD.search(value))
