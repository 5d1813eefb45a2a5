"""Builder of fake sysfs (and /proc/net) trees for tests.

Usage::

    fs = FakeSys(tmp_path)
    fs.netdev("eth1", pci="0000:3b:00.0", numa=1)
    fs.ibdev("mlx5_0", pci="0000:3b:00.0", netdev="eth1", uverbs="uverbs0")
    fs.gid("mlx5_0", 1, 3, "::ffff:192.0.2.10", "RoCE v2", "eth1")
    sysfs = Sysfs(str(tmp_path))

Every GID slot of a port exists (``slots``); unfilled slots behave like the
kernel's: ``gids/<i>`` reads a zero GID and ``gid_attrs/{types,ndevs}/<i>``
fail to read (EINVAL in the kernel; here the path is a directory, so open()
or read() fails with EISDIR). ``unreadable(rel)`` makes any file fail the same
way. Symlinks are relative, like the kernel's, so trees can be moved.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Generator
from ipaddress import IPv4Address, IPv4Interface, IPv6Address
from pathlib import Path

from rdma_cni.adapters.sysfs import Sysfs

ZERO_GID = IPv6Address(0).exploded


class FakeSys:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.pod_addrs: list[tuple[str, str]] = []  # (ifname, "ip/prefix")

    # -- low level -----------------------------------------------------
    def write(self, rel: str, text: str) -> Path:
        path = self.root / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if text.endswith("\n") else text + "\n")
        return path

    def symlink(self, rel: str, target_rel: str) -> None:
        link = self.root / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        target = self.root / target_rel
        target.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(target, link.parent))

    def unreadable(self, rel: str) -> None:
        """Make ``rel`` exist but fail to read (like an EINVAL sysfs attribute)."""
        path = self.root / rel
        if path.is_file() or path.is_symlink():
            path.unlink()
        path.mkdir(parents=True, exist_ok=True)

    # -- devices -------------------------------------------------------
    def pci(self, addr: str, numa: int = -1) -> str:
        rel = f"sys/devices/pci0000:00/{addr}"
        if numa >= 0 or not (self.root / rel / "numa_node").exists():
            self.write(f"{rel}/numa_node", str(numa))
        return rel

    def netdev(
        self,
        name: str,
        *,
        pci: str | None = None,
        numa: int = -1,
        mac: str = "02:00:00:00:00:01",
        operstate: str = "up",
        mtu: int = 1500,
        ifindex: int = 2,
        dev_port: int | None = None,
        master: str | None = None,
        lower: str | None = None,
    ) -> None:
        base = f"sys/devices/virtual/net/{name}"
        if pci is not None:
            base = f"{self.pci(pci, numa)}/net/{name}"
            self.symlink(f"{base}/device", f"sys/devices/pci0000:00/{pci}")
        for key, val in (
            ("address", mac),
            ("operstate", operstate),
            ("mtu", mtu),
            ("ifindex", ifindex),
        ):
            self.write(f"{base}/{key}", str(val))
        if dev_port is not None:
            self.write(f"{base}/dev_port", str(dev_port))
        self.symlink(f"sys/class/net/{name}", base)
        if master is not None:
            self.symlink(f"{base}/master", f"sys/devices/virtual/net/{master}")
            self.stack(master, name)
        if lower is not None:
            self.stack(name, lower)

    def stack(self, upper: str, lower: str) -> None:
        """``upper`` sits on ``lower`` (a bond on its slave, a VLAN on its NIC): the
        kernel's ``lower_<name>`` and ``upper_<name>`` links of the two."""
        self.symlink(f"sys/class/net/{upper}/lower_{lower}", self._real(lower))
        self.symlink(f"sys/class/net/{lower}/upper_{upper}", self._real(upper))

    def _real(self, netdev: str) -> str:
        link = self.root / "sys/class/net" / netdev
        if link.is_symlink():
            return os.path.relpath(link.resolve(), self.root)
        return f"sys/devices/virtual/net/{netdev}"

    def ibdev(
        self,
        name: str,
        *,
        pci: str | None = None,
        numa: int = -1,
        ports: dict[int, str] | None = None,
        state: str = "4: ACTIVE",
        rate: str = "100 Gb/sec (4X EDR)",
        uverbs: str | None = None,
        slots: int = 8,
    ) -> None:
        base = f"sys/class/infiniband/{name}"
        if pci is not None:
            dev = self.pci(pci, numa)
            real = f"{dev}/infiniband/{name}"
            self.symlink(base, real)
            self.symlink(f"{real}/device", dev)
            if uverbs:
                self.write(f"{dev}/infiniband_verbs/{uverbs}/ibdev", name)
        else:
            (self.root / base).mkdir(parents=True, exist_ok=True)
        for port, link in (ports or {1: "Ethernet"}).items():
            pbase = f"{base}/ports/{port}"
            self.write(f"{pbase}/link_layer", link)
            self.write(f"{pbase}/state", state)
            self.write(f"{pbase}/rate", rate)
            for i in range(slots):
                self.empty_slot(name, port, i)
        if uverbs:
            self.write(f"sys/class/infiniband_verbs/{uverbs}/ibdev", name)

    def empty_slot(self, ibdev: str, port: int, index: int) -> None:
        pbase = f"sys/class/infiniband/{ibdev}/ports/{port}"
        self.write(f"{pbase}/gids/{index}", ZERO_GID)
        self.unreadable(f"{pbase}/gid_attrs/types/{index}")
        self.unreadable(f"{pbase}/gid_attrs/ndevs/{index}")

    def gid(
        self,
        ibdev: str,
        port: int,
        index: int,
        gid: str,
        gid_type: str = "RoCE v2",
        ndev: str | None = None,
    ) -> None:
        pbase = f"sys/class/infiniband/{ibdev}/ports/{port}"
        self.write(f"{pbase}/gids/{index}", IPv6Address(gid).exploded)
        self.write(f"{pbase}/gid_attrs/types/{index}", gid_type)
        if ndev is None:
            self.unreadable(f"{pbase}/gid_attrs/ndevs/{index}")
        else:
            self.write(f"{pbase}/gid_attrs/ndevs/{index}", ndev)

    def roce_pair(self, ibdev: str, port: int, index: int, ip: str, ndev: str) -> None:
        """The kernel's pair for one IPv4 address: RoCE v1 at index, v2 at index+1."""
        self.gid(ibdev, port, index, f"::ffff:{ip}", "IB/RoCE v1", ndev)
        self.gid(ibdev, port, index + 1, f"::ffff:{ip}", "RoCE v2", ndev)

    # -- the pod's own addresses (/proc/net of the netns) ---------------
    def pod_addr(self, ifname: str, cidr: str) -> None:
        """Record an IPv4 address of the netns and rewrite proc/net/{fib_trie,route}."""
        self.pod_addrs.append((ifname, cidr))
        self._write_proc()

    def _write_proc(self) -> None:
        trie = [
            "Main:",
            "  +-- 0.0.0.0/0 3 0 5",
            "Local:",
            "  +-- 0.0.0.0/0 3 0 5",
            "     |-- 127.0.0.1",
            "        /32 host LOCAL",
        ]
        route = [
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"
        ]
        for ifname, cidr in self.pod_addrs:
            iface = IPv4Interface(cidr)
            trie += [f"     |-- {iface.ip}", "        /32 host LOCAL"]
            net = iface.network
            route.append(
                f"{ifname}\t{_le(net.network_address)}\t00000000\t0001\t0\t0\t0\t"
                f"{_le(net.netmask)}\t0\t0\t0"
            )
        self.write("proc/net/fib_trie", "\n".join(trie))
        self.write("proc/net/route", "\n".join(route))


def _le(addr: IPv4Address) -> str:
    return int(addr).to_bytes(4, "big")[::-1].hex().upper()


class CountingSysfs(Sysfs):
    """A Sysfs that records every path it is asked about."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.asked: list[str] = []

    def read(self, rel: str) -> str | None:
        self.asked.append(rel)
        return super().read(rel)

    def listdir(self, rel: str) -> list[str]:
        self.asked.append(rel)
        return super().listdir(rel)

    def each(self, rel: str) -> Generator[tuple[str, str], None, None]:
        self.asked.append(rel)
        return super().each(rel)

    def exists(self, rel: str) -> bool:
        self.asked.append(rel)
        return super().exists(rel)

    def realpath(self, rel: str) -> str | None:
        self.asked.append(rel)
        return super().realpath(rel)
