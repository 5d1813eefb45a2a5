"""Two stand-in nodes in the VM, for RDMA traffic between pods (tests/vm/README.md).

The switch is a netns with one bridge per rail (the RDMA fabric) and one for the pods'
primary network. A node is a netns with one veth NIC per rail plugged into the rail's
bridge (rail k: subnet ``RAILS[k]``.0/24, node i holds .1+64i and hands pods
.2+64i-.62+64i through ``ipam.ranges``) and its own plugin chain (the host plugin as
``install`` lays it out, run in the node netns, its own data dir). Pods are netns
with a veth eth0 on the primary bridge (203.0.113.0/24).

Soft-RoCE stand-ins (measured on the VM's kernel, README "Tests"):
- ``nic_rxe``: an rxe on the node's NIC. Pods behind IPVLAN/macvlan get their GIDs in
  its table, but rxe's UDP socket lives only in the NIC's netns, so across nodes the
  replies to a pod are dropped (``Udp NoPorts`` in the pod); on one node rxe loops two
  pods' GIDs back to each other (only IPVLAN: macvlan pods have their own MACs).
- ``pod_rxe``: an rxe on the pod's own interface (inside the pod): it carries the
  pod's own addresses, routes and ARP settings across the fabric.
- exclusive mode: the rxe is made on the moved NIC inside the pod and follows it
  (``rdma dev set <rxe> netns <pod>``, RDMA netns mode exclusive): an rxe made before
  the move dies with it.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cnirunner import Chain, Pod, data_files, plugin_conf, sh, unique_prefix

RAILS = ("198.51.100", "198.18.0")
PRIMARY = "203.0.113"
VERIFY_PORT = 18515


def rdma(*args: str, ns: str | None = None, check: bool = True) -> str:
    argv = ["rdma", *args]
    return sh(*(["ip", "netns", "exec", ns, *argv] if ns else argv), check=check)


def rxe_serves_netns() -> bool:
    """Whether this kernel's rxe has per-network-namespace sockets (rxe_ns.c; e.g.
    trixie-backports' 7.3): its symbols are in /proc/kallsyms once rdma_rxe is loaded.
    Debian 12's 6.1 has none: rxe routes and listens in the initial netns only."""
    try:
        with open("/proc/kallsyms", encoding="ascii", errors="replace") as f:
            return any("rxe_ns_pernet_" in line for line in f)
    except OSError:
        return False


def rdma_netns_mode() -> str:
    return "exclusive" if "netns exclusive" in rdma("system", "show") else "shared"


def set_rdma_netns_mode(mode: str, timeout: float = 60.0) -> None:
    """``rdma system set netns MODE``: the kernel refuses (EBUSY) while any netns but
    the initial one exists, dying ones included: retried until they are gone."""
    deadline = time.monotonic() + timeout
    while True:
        proc = subprocess.run(["rdma", "system", "set", "netns", mode], capture_output=True,
                              text=True, check=False)
        if proc.returncode == 0 or rdma_netns_mode() == mode:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"rdma system set netns {mode}: {proc.stderr.strip()}")
        time.sleep(0.5)


@dataclass
class Node:
    """A stand-in node: its netns, NICs (one per rail) and plugin chain."""

    name: str
    ns: str
    index: int
    nics: list[str]
    chain: Chain
    data_dir: Path
    rxes: list[str] = field(default_factory=list)

    def nic_ip(self, rail: int) -> str:
        return f"{RAILS[rail]}.{1 + 64 * self.index}"


class TwoNodes:
    """The switch, two nodes and their pods; everything removed by :meth:`close`."""

    def __init__(self, tmp: Path, plugin: Sequence[str], mode: str, rails: int = 1,
                 nic_rxe: bool = False, ipam: bool = True) -> None:
        self.prefix = unique_prefix()
        self.switch = f"{self.prefix}s"
        self.pods: list[Pod] = []
        self.rxes: list[tuple[str, str | None]] = []  # (rxe, netns it was made from)
        self.netns = [self.switch]
        sh("ip", "netns", "add", self.switch)
        cmds = [f"link add name br{k} type bridge" for k in range(rails)]
        cmds += ["link add name pri type bridge"]
        cmds += [f"link set dev {b} up" for b in [*(f"br{k}" for k in range(rails)), "pri"]]
        sh("ip", "-n", self.switch, "-batch", "-", input="\n".join(cmds) + "\n")
        self.ipam = ipam  # ipam.ranges: each node hands pods its own part of the subnet
        self.nodes = [self._node(tmp, plugin, mode, i, rails, nic_rxe) for i in range(2)]

    def _node(self, tmp: Path, plugin: Sequence[str], mode: str, index: int, rails: int,
              nic_rxe: bool) -> Node:
        name = "ab"[index]
        ns = f"{self.prefix}{name}"
        sh("ip", "netns", "add", ns)
        self.netns.append(ns)
        sh("ip", "-n", ns, "link", "set", "dev", "lo", "up")
        nics, ranges = [], {}
        for k in range(rails):
            nic = f"rnic{k}"
            self._plug(ns, nic, f"br{k}", f"{RAILS[k]}.{1 + 64 * index}/24")
            nics.append(nic)
            ranges[f"{RAILS[k]}.0/24"] = {"rangeStart": f"{RAILS[k]}.{2 + 64 * index}",
                                          "rangeEnd": f"{RAILS[k]}.{62 + 64 * index}"}
        data = tmp / name
        conf = plugin_conf(mode, nics, data, **({"ipam": {"ranges": ranges}} if self.ipam else {}))
        node = Node(name, ns, index, nics, Chain(conf, node_ns=ns, binary=list(plugin)),
                    data / "data")
        if nic_rxe:
            node.rxes = [self.rxe(f"rxe{name}{k}", nic, ns) for k, nic in enumerate(nics)]
        return node

    def _plug(self, ns: str, name: str, bridge: str, cidr: str | None) -> None:
        """A veth ``name`` in ``ns``, its peer a port of ``bridge`` in the switch."""
        peer = f"{ns[-6:]}{name}"[-15:]
        sh("ip", "-n", ns, "link", "add", "name", name, "type", "veth", "peer", "name", peer,
           "netns", self.switch)
        sh("ip", "-n", self.switch, "link", "set", "dev", peer, "master", bridge, "up")
        cmds = ([f"addr add {cidr} dev {name}"] if cidr else []) + [f"link set dev {name} up"]
        sh("ip", "-n", ns, "-batch", "-", input="\n".join(cmds) + "\n")

    def pod(self, node: Node, blocks: Sequence[dict[str, Any]] | None, cid: str) -> Pod:
        """A pod on ``node`` (eth0 on the primary network), then the plugin's ADD."""
        pod = Pod(f"{self.prefix}p{len(self.pods)}")
        sh("ip", "netns", "add", pod.name)
        self.pods.append(pod)
        eth0 = f"{PRIMARY}.{10 + len(self.pods)}"
        sh("ip", "-n", pod.name, "link", "set", "dev", "lo", "up")
        self._plug(pod.name, "eth0", "pri", f"{eth0}/24")
        sh("ip", "-n", pod.name, "route", "add", "default", "via", f"{PRIMARY}.1", "dev",
           "eth0", "onlink")
        run = node.chain.add(cid, pod.path, blocks or [], pod=cid,
                             prev=_primary(pod.path, eth0))
        assert run.rc == 0, run
        return pod

    def rxe(self, name: str, netdev: str, ns: str | None, move: bool = False) -> str:
        """Soft-RoCE on ``netdev`` of ``ns``; ``move``: into ``ns`` (RDMA netns mode
        exclusive makes it in the initial netns)."""
        rdma("link", "add", name, "type", "rxe", "netdev", netdev, ns=ns)
        self.rxes.append((name, ns))
        if move and ns:
            rdma("dev", "set", name, "netns", ns)
        return name

    def pod_rxe(self, pod: Pod, ifname: str = "eth1", move: bool = False) -> str:
        """The stand-in for a pod's RoCE function: an rxe on the pod's own interface."""
        return self.rxe(f"rxp{pod.name[-3:]}{ifname[-1]}", ifname, pod.name, move)

    def delete_rxe(self, name: str, ns: str | None) -> None:
        rdma("link", "delete", name, ns=ns, check=False)

    def ip(self, pod: Pod, ifname: str = "eth1") -> str:
        out = sh("ip", "-n", pod.name, "-4", "-o", "addr", "show", "dev", ifname)
        return out.split()[3].split("/")[0]

    def close(self) -> None:
        for name, ns in reversed(self.rxes):
            self.delete_rxe(name, ns)
        names = [p.name for p in self.pods] + self.netns
        sh("ip", "-force", "-batch", "-",
           input="".join(f"netns del {n}\n" for n in names), check=False)

    def clean(self) -> list[str]:
        """Data files the nodes still hold (empty once every pod had its DEL)."""
        return [f for n in self.nodes for f in data_files(n.data_dir)]


def _primary(sandbox: str, eth0: str) -> dict[str, Any]:
    from cnirunner import vpc_result

    return vpc_result(sandbox, f"{eth0}/24", gateway=f"{PRIMARY}.1")


@contextlib.contextmanager
def two_nodes(tmp: Path, plugin: Sequence[str], mode: str, **kw: Any) -> Iterator[TwoNodes]:
    rig = TwoNodes(tmp, plugin, mode, **kw)
    try:
        yield rig
    finally:
        rig.close()


def pod_exec(pod: Pod, *argv: str, env: dict[str, str] | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run in the pod netns (``ip netns exec`` remounts /sys for it), no NCCL_* inherited."""
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    return subprocess.run(["ip", "netns", "exec", pod.name, *argv], capture_output=True,
                          text=True, env={**base, **(env or {})}, timeout=timeout, check=False)


def verify_pair(binary: Sequence[str], listener: Pod, connector: Pod, peer_ip: str,
                *extra: str, env_l: dict[str, str] | None = None,
                env_c: dict[str, str] | None = None,
                ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """``rdma-cni verify --listen`` in one pod, ``--peer`` in the other; both results."""
    import os

    args = ["verify", "--json", "--iters", "20", "--writes", "5", "--size", "16384",
            "--timeout", "90", *extra]
    base = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    server = subprocess.Popen(["ip", "netns", "exec", listener.name, *binary, *args,
                               "--listen"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**base, **(env_l or {})})
    try:
        client = pod_exec(connector, *binary, *args, "--peer", peer_ip, env=env_c)
        out, err = server.communicate(timeout=200)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return subprocess.CompletedProcess(server.args, server.returncode, out, err), client
