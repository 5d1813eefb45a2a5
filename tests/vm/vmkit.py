"""Helpers for VM-tier tests: stand-in NICs, network namespaces, Soft-RoCE, GID tables.

Everything shells out to iproute2 (`ip`, `rdma`) so tests observe the kernel the
way an operator would; `ip -j` and sysfs are the oracles. Names stay <= 15 chars.
"""

from __future__ import annotations

import errno
import ipaddress
import itertools
import os
from dataclasses import dataclass
from pathlib import Path

from support.netns import ip, ip_json
from support.proc import sh

_counter = itertools.count()


def unique_name(prefix: str) -> str:
    """A short interface/netns name, unique within this process (<= 15 chars)."""
    return f"{prefix[:6]}{os.getpid() % 1000}x{next(_counter)}"[:15]


def link_exists(name: str, netns: str | None = None) -> bool:
    try:
        ip(netns, "link", "show", "dev", name)
    except RuntimeError:
        return False
    return True


def ipv4_addrs(name: str, netns: str | None = None) -> list[str]:
    """Addresses of `name` as 'a.b.c.d/len', from `ip -j addr show`."""
    out: list[str] = []
    for link in ip_json(netns, "addr", "show", "dev", name):
        for a in link.get("addr_info", []):
            if a.get("family") == "inet":
                out.append(f"{a['local']}/{a['prefixlen']}")
    return out


def virtio_nics(sys_root: str = "/sys") -> list[str]:
    """Netdevs driven by virtio_net on a PCI device: the VM's physical-NIC stand-ins."""
    found = []
    for dev in sorted(Path(sys_root, "class/net").iterdir()):
        driver = dev / "device" / "driver"
        if driver.exists() and driver.resolve().name == "virtio_net":
            found.append(dev.name)
    return found


def pci_address(netdev: str, sys_root: str = "/sys") -> str | None:
    """The PCI address above a netdev's device (virtio sits one level below PCI)."""
    try:
        dev = Path(sys_root, "class/net", netdev, "device").resolve(strict=True)
    except OSError:
        return None
    for part in (dev, *dev.parents):
        if (part / "subsystem").exists() and (part / "subsystem").resolve().name == "pci":
            return part.name
    return None


@dataclass(frozen=True)
class Gid:
    index: int
    gid: ipaddress.IPv6Address
    ndev: str
    type: str

    @property
    def ipv4(self) -> ipaddress.IPv4Address | None:
        return self.gid.ipv4_mapped


def _read_attr(path: Path) -> str | None:
    """A gid_attrs file; None for an empty slot (the kernel answers EINVAL)."""
    try:
        return path.read_text().strip()
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT):
            return None
        raise


def read_gids(ibdev: str, port: int = 1, sys_root: str = "/sys") -> list[Gid]:
    """Populated GID slots of an RDMA port, with their ndev and type."""
    base = Path(sys_root, "class/infiniband", ibdev, "ports", str(port))
    gids = []
    for entry in sorted((base / "gids").iterdir(), key=lambda p: int(p.name)):
        ndev = _read_attr(base / "gid_attrs/ndevs" / entry.name)
        gtype = _read_attr(base / "gid_attrs/types" / entry.name)
        if ndev is None or gtype is None:
            continue
        value = ipaddress.IPv6Address(entry.read_text().strip())
        gids.append(Gid(int(entry.name), value, ndev, gtype))
    return gids


def roce_v2_gid_for(ibdev: str, addr: str, ndev: str, sys_root: str = "/sys") -> Gid | None:
    """The RoCE v2 GID ::ffff:<addr> owned by `ndev`, if present."""
    want = ipaddress.IPv4Address(addr)
    for g in read_gids(ibdev, sys_root=sys_root):
        if g.ipv4 == want and g.ndev == ndev and g.type == "RoCE v2":
            return g
    return None


@dataclass(frozen=True)
class Rxe:
    """A Soft-RoCE device `name` bound to netdev `netdev`."""

    name: str
    netdev: str


def add_rxe(name: str, netdev: str) -> None:
    sh("rdma", "link", "add", name, "type", "rxe", "netdev", netdev)


def delete_rxe(name: str) -> None:
    if Path("/sys/class/infiniband", name).exists():
        sh("rdma", "link", "delete", name)
