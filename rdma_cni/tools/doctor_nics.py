"""``doctor`` checks of the RDMA NICs: presence and port state, the subnet size the
shared modes need, and the RDMA subsystem netns mode (DESIGN §2, §3).

Addresses are read over rtnetlink through the netlink adapter (``ip_addrs``, the one
place doctor calls it); the RDMA netns mode comes from ``node.rdma_mode``, the same
reader ADD uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from ipaddress import IPv4Interface
from typing import Any

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import CniError
from rdma_cni.node.discovery import discover, missing
from rdma_cni.node.rdma_mode import check_mode
from rdma_cni.tools.doctor_report import Check
from rdma_cni.vocab.modes import RdmaNetnsMode, names_where, parse
from rdma_cni.vocab.nic import Nic


def ip_addrs(netdev: str) -> list[IPv4Interface]:
    """IPv4 addresses of a host netdev, read over rtnetlink (the netlink adapter)."""
    from rdma_cni.adapters.netlink import Netlink

    try:
        nl = Netlink.here()
    except (CniError, OSError):
        return []
    try:
        link = nl.link(netdev)
        return [] if link is None else [a for _, a in nl.addresses(link.index)]
    except CniError:
        return []
    finally:
        nl.close()


def check_nics(config: dict[str, Any], sysfs: Sysfs) -> tuple[Check, list[Nic]]:
    pinned = config.get("devices") or None
    nics = discover(sysfs, pinned)
    gone = missing(sysfs, nics)
    if gone:
        return Check(
            "nics",
            "fail",
            f"configured devices missing: {', '.join(gone)}",
            "fix `devices` in the plugin config or bring the NICs back",
        ), nics
    if not nics:
        return Check(
            "nics",
            "fail",
            "no RoCE NIC found (no netdev with an Ethernet RDMA port)",
            "load the NIC driver (mlx5_ib) or pin `devices`",
        ), nics
    down = [
        f"{n.netdev} ({n.ibdev}:{n.port} {n.state})"
        for n in nics
        if n.ibdev and n.state != "ACTIVE"
    ]
    if down:
        return Check(
            "nics",
            "fail",
            "RDMA ports not ACTIVE: " + ", ".join(down),
            "check cabling, switch port and `ip link` state",
        ), nics
    desc = ", ".join(f"{n.netdev}={n.ibdev or '-'}" for n in nics)
    return Check("nics", "ok", f"{len(nics)} NIC(s): {desc}"), nics


def check_netmasks(
    mode: str, nics: Sequence[Nic], addrs: Callable[[str], list[IPv4Interface]]
) -> Check:
    known = parse(mode)
    limit = known.traits.max_prefix if known else None
    if limit is None:
        return Check("netmask", "ok", f"not needed in mode {mode or 'unset'}")
    bad = []
    for nic in nics:
        ifs = addrs(nic.netdev)
        if not ifs:
            bad.append(f"{nic.netdev} has no IPv4 address")
        bad += [f"{nic.netdev} {i.with_prefixlen}" for i in ifs if i.network.prefixlen >= limit]
    if bad:
        return Check(
            "netmask", "fail", "; ".join(bad),
            f"give each RDMA NIC an IPv4 subnet shorter than /{limit}"
        )
    return Check("netmask", "ok", f"every NIC subnet is shorter than /{limit}")


def check_netns(mode: str, netns_mode: str | None) -> Check:
    if netns_mode is None:
        return Check(
            "rdma-netns",
            "warn",
            "RDMA netns mode unknown (no RDMA netlink: the RDMA subsystem is not loaded)",
            "load ib_core (modprobe ib_core) and the NIC's RDMA driver",
        )
    try:
        check_mode(mode, netns_mode)
    except CniError as e:
        return Check(
            "rdma-netns",
            "fail",
            str(e),
            "set `options ib_core netns_mode=1` and reboot, or use mode "
            + names_where(lambda t: RdmaNetnsMode.EXCLUSIVE in t.rdma_netns),
        )
    return Check("rdma-netns", "ok", f"RDMA netns mode {netns_mode} fits mode {mode} "
                 f"(it needs {_needed(mode)})")


def _needed(mode: str) -> str:
    """The RDMA netns modes node mode ``mode`` works under, as doctor names them."""
    known = parse(mode)
    return " or ".join(known.traits.rdma_netns) if known else "a known mode"

