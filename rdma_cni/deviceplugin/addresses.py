"""How many pod addresses a NIC's range holds (caps shared-multi / shared-host slots).

An approximation of the IPAM range (DESIGN §4) good enough for capacity: the
NIC's subnet minus network, broadcast, one gateway and every host address in
it. ``ipam.ranges`` narrowing is not applied here. The host's addresses come from
``ip -j -4 addr`` (iproute2), read at most once per ``ttl`` seconds.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

from rdma_cni.discovery import Nic

Addr = tuple[str, str, int]  # (ifname, ip, prefixlen)


def free_in_subnet(nic_addrs: Sequence[tuple[str, int]], host_ips: Sequence[str]) -> int:
    """Free pod addresses in the subnet of the NIC's lowest address (0 for /30 and longer)."""
    if not nic_addrs:
        return 0
    ip, prefix = min(nic_addrs, key=lambda a: ipaddress.IPv4Address(a[0]))
    if prefix >= 30:
        return 0
    net = ipaddress.IPv4Network(f"{ip}/{prefix}", strict=False)
    taken = {h for h in host_ips if ipaddress.IPv4Address(h) in net}
    return max(net.num_addresses - 3 - len(taken), 0)


def parse_ip_json(text: str) -> list[Addr]:
    """(ifname, ip, prefixlen) of every IPv4 address in ``ip -j -4 addr`` output."""
    out: list[Addr] = []
    for link in json.loads(text or "[]"):
        for a in link.get("addr_info", []):
            if a.get("family") == "inet":
                out.append((link.get("ifname", ""), a["local"], int(a["prefixlen"])))
    return out


def _ip_addr() -> list[Addr]:
    proc = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True,
                          text=True, timeout=5, check=False)
    return parse_ip_json(proc.stdout) if proc.returncode == 0 else []


class HostFreeAddresses:
    """The default ``free_addresses(nic) -> int``; ``reader`` is injectable."""

    def __init__(self, reader: Callable[[], list[Addr]] = _ip_addr, ttl: float = 30.0) -> None:
        self.reader = reader
        self.ttl = ttl
        self._at = -1e18
        self._addrs: list[Addr] = []

    def _snapshot(self) -> list[Addr]:
        now = time.monotonic()
        if now - self._at > self.ttl:
            self._addrs, self._at = self.reader(), now
        return self._addrs

    def __call__(self, nic: Nic | Any) -> int:
        addrs = self._snapshot()
        own = [(ip, p) for name, ip, p in addrs if name == nic.netdev]
        return free_in_subnet(own, [ip for _, ip, _ in addrs])
