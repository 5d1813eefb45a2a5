"""Smoke tests proving the VM tier: ipvlan, dummy, virtio PCI NICs, Soft-RoCE GIDs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import vmkit
from support.netns import ip, ip_json
from support.proc import sh, wait_for
from vmkit import Rxe

pytestmark = [pytest.mark.vm, pytest.mark.root]


def _ipvlan_child(parent: str, netns: str, cidr: str) -> str:
    """Create an ipvlan L2 child of `parent` directly in `netns` (like VKE), address it, up."""
    tmp = vmkit.unique_name("tmp")
    name = vmkit.unique_name("ipv")
    ip(
        None, "link", "add", "link", parent, "name", tmp, "netns", netns, "type", "ipvlan",
        "mode", "l2"
    )
    ip(netns, "link", "set", tmp, "name", name)
    ip(netns, "addr", "add", cidr, "dev", name)
    ip(netns, "link", "set", name, "up")
    return name


def test_ipvlan_l2_child_in_netns_on_dummy(
    make_dummy: Callable[[], str], make_netns: Callable[[], str]
) -> None:
    parent = make_dummy()
    ns = make_netns()
    child = _ipvlan_child(parent, ns, "192.0.2.10/24")

    [link] = ip_json(ns, "-d", "link", "show", "dev", child)
    assert link["linkinfo"]["info_kind"] == "ipvlan"
    assert link["linkinfo"]["info_data"]["mode"] == "l2"
    assert link["mtu"] == ip_json(None, "link", "show", "dev", parent)[0]["mtu"]
    assert vmkit.ipv4_addrs(child, netns=ns) == ["192.0.2.10/24"]
    assert not vmkit.link_exists(child)  # not in the root netns


def test_rxe_gid_follows_ipvlan_child_address(rxe: Rxe, make_netns: Callable[[], str]) -> None:
    ns = make_netns()
    child = _ipvlan_child(rxe.netdev, ns, "198.51.100.21/24")

    assert wait_for(
        lambda: vmkit.roce_v2_gid_for(rxe.name, "198.51.100.21", child) is not None
    ), f"no RoCE v2 GID for 198.51.100.21 on {child}: {vmkit.read_gids(rxe.name)}"
    gid = vmkit.roce_v2_gid_for(rxe.name, "198.51.100.21", child)
    assert gid is not None
    raw = Path(f"/sys/class/infiniband/{rxe.name}/ports/1/gids/{gid.index}").read_text()
    assert str(gid.gid) == "::ffff:c633:6415" and raw.strip().endswith("ffff:c633:6415")

    ip(ns, "addr", "del", "198.51.100.21/24", "dev", child)
    assert wait_for(
        lambda: all(g.ipv4 is None for g in vmkit.read_gids(rxe.name) if g.ndev == child)
    ), f"GID of 198.51.100.21 still present: {vmkit.read_gids(rxe.name)}"


def test_virtio_nic_is_pci_and_returns_when_netns_dies(virtio_nics: list[str]) -> None:
    nic = virtio_nics[-1]
    pci = vmkit.pci_address(nic)
    assert pci is not None and Path("/sys/bus/pci/devices", pci).exists()
    ns = vmkit.unique_name("vmns")
    sh("ip", "netns", "add", ns)
    try:
        ip(None, "link", "set", nic, "netns", ns)
        assert not vmkit.link_exists(nic)
        assert vmkit.link_exists(nic, netns=ns)
    finally:
        sh("ip", "netns", "delete", ns)
    assert wait_for(lambda: vmkit.link_exists(nic)), f"{nic} did not come back"
    assert vmkit.pci_address(nic) == pci
    ip(None, "link", "set", nic, "up")
