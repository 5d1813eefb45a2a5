"""Throwaway namespaces for the benchmark: a "node" netns with veth stand-in NICs
(peers in a "fabric" netns), and pod netns with a primary-like ``eth0``.

Only TEST-NET ranges are used: the stand-in NICs are ``rdma<k>`` with
198.18.<k>.1/24 (peer 198.18.<k>.254 in the fabric netns, which is also the
"HPC" gateway for 198.19.<k>.0/24); pod ``eth0`` addresses are in 198.51.100.0/24.

The node and fabric netns are made from the host (:func:`make_node`); pods are made
by the driver running inside the node netns (:class:`Pods`), so their bind mounts
live in that driver's mount namespace only: they vanish with it, and
:func:`destroy` removes any file left behind in ``/run/netns``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

NETNS_DIR = "/run/netns"
N_NICS = 8


def sh(*argv: str, stdin: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def ip_batch(lines: Iterable[str], netns: str | None = None) -> None:
    """Several ``ip`` commands in one exec (``ip [-n ns] -batch -``)."""
    argv = ["ip", *(["-n", netns] if netns else []), "-batch", "-"]
    text = "\n".join(lines) + "\n"
    if text.strip():
        sh(*argv, stdin=text)


def ip_json(netns: str | None, *args: str) -> list[dict[str, Any]]:
    out = sh("ip", "-j", *(["-n", netns] if netns else []), *args).strip()
    return json.loads(out) if out else []


def nic(k: int) -> str:
    return f"rdma{k}"


def nic_subnet(k: int) -> str:
    return f"198.18.{k}.0/24"


def nic_gateway(k: int) -> str:
    return f"198.18.{k}.254"


@dataclass(frozen=True)
class Names:
    """Names of one run's namespaces: every one starts with ``prefix``."""

    prefix: str

    @property
    def node(self) -> str:
        return f"{self.prefix}n"

    @property
    def fabric(self) -> str:
        return f"{self.prefix}f"

    def pod(self, n: int) -> str:
        return f"{self.prefix}p{n}"


def make_node(names: Names, n_nics: int = N_NICS) -> None:
    """The node netns with ``n_nics`` veth stand-in NICs and their HPC routes."""
    for ns in (names.node, names.fabric):
        sh("ip", "netns", "add", ns)
    node, fabric = ["link set lo up"], ["link set lo up"]
    for k in range(n_nics):
        node += [f"link add {nic(k)} type veth peer name f{nic(k)} netns {names.fabric}",
                 f"addr add 198.18.{k}.1/24 dev {nic(k)}", f"link set {nic(k)} up",
                 f"route add 198.19.{k}.0/24 via {nic_gateway(k)} dev {nic(k)}"]
        fabric += [f"addr add {nic_gateway(k)}/24 dev f{nic(k)}", f"link set f{nic(k)} up"]
    ip_batch(node[:1] + [ln for ln in node[1:] if ln.startswith("link add")], names.node)
    ip_batch(fabric, names.fabric)
    ip_batch([ln for ln in node[1:] if not ln.startswith("link add")], names.node)


def destroy(names: Names) -> list[str]:
    """Delete every netns of this run (host side); returns what was removed."""
    gone = []
    for entry in sorted(os.listdir(NETNS_DIR)) if os.path.isdir(NETNS_DIR) else []:
        if not entry.startswith(names.prefix):
            continue
        path = os.path.join(NETNS_DIR, entry)
        sh("ip", "netns", "del", entry, check=False)
        if os.path.lexists(path):  # a pod made in the driver's mount ns: only the file is here
            os.unlink(path)
        gone.append(entry)
    return gone


@dataclass
class Pod:
    name: str
    index: int

    @property
    def path(self) -> str:
        return f"/var/run/netns/{self.name}"

    def links(self) -> list[str]:
        return sorted(lk["ifname"] for lk in ip_json(self.name, "link", "show"))

    def extra_addrs(self) -> list[str]:
        """IPv4 addresses on interfaces other than ``lo`` and the primary's ``eth0``."""
        return [a["local"] for lk in ip_json(self.name, "-4", "addr", "show")
                if lk["ifname"] not in ("lo", "eth0")
                for a in lk.get("addr_info", [])]


@dataclass
class Pods:
    """Pod netns made from inside the node netns (the benchmark driver)."""

    names: Names
    live: list[Pod] = field(default_factory=list)
    made: int = 0

    def create(self, count: int) -> list[Pod]:
        pods = [Pod(self.names.pod(self.made + i), self.made + i) for i in range(count)]
        self.made += count
        lines = [f"netns add {p.name}" for p in pods]
        lines += [f"link add vb{p.index} type veth peer name eth0 netns {p.name}" for p in pods]
        ip_batch(lines)
        self.live += pods
        ip_batch([f"link set vb{p.index} up" for p in pods])
        for p in pods:
            ip_batch(["link set lo up", f"addr add 198.51.100.{2 + p.index % 250}/24 dev eth0",
                      "link set eth0 up", "route add default via 198.51.100.1 dev eth0 onlink"],
                     p.name)
        return pods

    def delete(self, pods: Sequence[Pod]) -> None:
        ip_batch([f"netns del {p.name}" for p in pods if os.path.lexists(p.path)])
        gone = {p.name for p in pods}
        self.live = [p for p in self.live if p.name not in gone]

    def close(self) -> None:
        self.delete(list(self.live))


def leftovers(pods: Sequence[Pod]) -> dict[str, list[str]]:
    """Pods whose links are not exactly ``lo`` and ``eth0`` (after DEL)."""
    out = {}
    for p in pods:
        links = p.links()
        if links != ["eth0", "lo"]:
            out[p.name] = links
    return out


def node_strays(expected_nics: int) -> list[str]:
    """Links in the node netns (the current one) that are neither NICs nor pod veths."""
    names = [lk["ifname"] for lk in ip_json(None, "link", "show")]
    ok = {"lo", *(nic(k) for k in range(expected_nics))}
    return [n for n in names if n not in ok and not n.startswith("vb")]


def rerun_in_node(tag: str, script: str) -> int:
    """Run ``script`` again, with this process's arguments plus ``--prefix`` and
    ``--tmp``, inside a throwaway node netns (:func:`make_node`) named after ``tag``;
    the netns and the temp dir are removed when it ends."""
    names = Names(f"{tag}{os.getpid() % 100000}")
    tmp = tempfile.mkdtemp(prefix="rdma-cni-bench.")
    try:
        make_node(names)
        return subprocess.call(["ip", "netns", "exec", names.node, sys.executable, script,
                                *sys.argv[1:], "--prefix", names.prefix, "--tmp", tmp])
    finally:
        destroy(names)
        subprocess.run(["rm", "-rf", tmp], check=False)


def node_main(p: argparse.ArgumentParser, tag: str, script: str,
              inner: Callable[[argparse.Namespace], int]) -> int:
    """A tool's entry: its arguments parsed (with the hidden ``--prefix`` and ``--tmp``);
    ``inner`` run inside the node netns, or ``script`` run again in one first
    (:func:`rerun_in_node`)."""
    p.add_argument("--prefix", help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    args = p.parse_args()
    return inner(args) if args.prefix else rerun_in_node(tag, script)
