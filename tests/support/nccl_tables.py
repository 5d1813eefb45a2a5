"""Generated GID tables for the nccl_env differential test (one tree per seed).

``table(seed, root)`` writes a sysfs and /proc/net tree under ``root`` with FakeSys and
returns the environment to run both implementations with (NCCL_ENV_IFACES,
NCCL_ENV_SOCKET_IFNAME) and a one-line description for failure messages. A seed draws:
one to three RDMA devices (``ports`` missing, a port without GID files, one or two
ports), GIDs at indices 0-15 of type RoCE v1 or v2 whose value is IPv4-mapped (from a
small pool, so addresses repeat across slots, devices and netdevs), global IPv6 or
link-local, owned by a pod interface, the socket interface, a host netdev, a netdev of
another netns (absent from ``sys/class/net``) or nothing (empty ``ndevs``); the pod's
netdevs with names the kernel accepts but a shell does not like; its local addresses
(``fib_trie``, sometimes missing) and routes (``route``, sometimes missing); sometimes
pinned interfaces and a socket interface other than eth0. Only the values a kernel
writes: GIDs in its exploded form, no whitespace in names.
"""

from __future__ import annotations

import random
from ipaddress import IPv4Address
from pathlib import Path

from support.fakes.sysfs import FakeSys

IBDEVS = ("mlx5_0", "mlx5_1", "rxe0", "mlx5_bond_0", "ib$x", "a'b", "q*", "[h]", ".ib")
POD_NAMES = ("eth1", "eth2", "eth10", "net1", "eth01", "rdma0", "e.x-1", "a$b", "x'y",
             "p*q", "[z]", ".hid", "-n", "1234", "=", "!", "eth\\1", "a\"b")
SOCKETS = ("eth0", "eth0", "eth0", "eth1", "e;0", "")
HOST_NDEVS = ("ens1", "ens2f0", "bond0")
ABSENT_NDEVS = ("eth3", "eth7", "net9")
ADDRS = ("192.0.2.1", "192.0.2.10", "192.0.2.11", "192.0.2.20", "192.0.2.130",
         "198.51.100.1", "198.51.100.10", "198.51.100.11", "203.0.113.5", "198.18.0.1",
         "198.19.255.254", "0.0.0.1", "255.255.255.254")
V1 = "IB/RoCE v1"
V2 = "RoCE v2"


def _gid_value(rnd: random.Random) -> str:
    kind = rnd.random()
    if kind < 0.75:
        return f"::ffff:{rnd.choice(ADDRS)}"
    if kind < 0.9:
        return f"fe80::{rnd.randrange(1, 0xFFFF):x}"
    return f"2001:db8::{rnd.randrange(1, 0xFFFF):x}"


def _ndev(rnd: random.Random, pod: list[str], socket: str) -> str | None:
    pools = [pod or ["eth1"], pod or ["eth1"], [socket or "eth0"], list(HOST_NDEVS),
             list(ABSENT_NDEVS), [""]]
    name = rnd.choice(rnd.choice(pools))
    return name or None


def _ports(fs: FakeSys, rnd: random.Random) -> list[tuple[str, int]]:
    """The RDMA devices; returns the ports with GID files."""
    live = []
    for ibdev in rnd.sample(IBDEVS, rnd.randrange(1, 4)):
        shape = rnd.random()
        if shape < 0.05:
            (fs.root / "sys/class/infiniband" / ibdev).mkdir(parents=True)  # no ports
            continue
        ports = [1, 2] if shape > 0.8 else [1]
        fs.ibdev(ibdev, ports={p: "Ethernet" for p in ports}, slots=rnd.choice((0, 4, 8)))
        live += [(ibdev, p) for p in ports if rnd.random() > 0.08]  # else no GID files
    return live


def _gids(fs: FakeSys, rnd: random.Random, pod: dict[str, str], socket: str) -> None:
    """Each pod interface's pair (mostly), then other GIDs in the free slots."""
    live = _ports(fs, rnd)
    if not live:
        return
    used: set[tuple[str, int, int]] = set()
    shared = rnd.randrange(0, 14)
    for name, ip in pod.items():
        ibdev, port = rnd.choice(live)
        index = shared if rnd.random() < 0.45 else rnd.randrange(0, 14)
        if rnd.random() < 0.9 and not {(ibdev, port, index), (ibdev, port, index + 1)} & used:
            fs.roce_pair(ibdev, port, index, ip, name)
            used |= {(ibdev, port, index), (ibdev, port, index + 1)}
    names = list(pod)
    for ibdev, port in live:
        for index in rnd.sample(range(16), rnd.randrange(0, 6)):
            if (ibdev, port, index) not in used:
                gtype = V2 if rnd.random() < 0.7 else V1
                fs.gid(ibdev, port, index, _gid_value(rnd), gtype, _ndev(rnd, names, socket))


def _proc(fs: FakeSys, rnd: random.Random, pod: dict[str, str], names: list[str]) -> None:
    """fib_trie with the netns's local addresses, route with some interfaces."""
    locals_ = {ip for ip in pod.values() if rnd.random() < 0.9}
    locals_ |= set(rnd.sample(ADDRS, rnd.randrange(0, 3)))
    trie = ["Main:", "  +-- 0.0.0.0/0 3 0 5", "Local:", "  +-- 0.0.0.0/0 3 0 5",
            "     |-- 127.0.0.1", "        /32 host LOCAL"]
    for ip in sorted(locals_, key=IPv4Address):
        trie += [f"     |-- {ip}", "        /32 host LOCAL"]
        if rnd.random() < 0.3:
            trie += ["        /24 link UNICAST"]
    route = ["Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU"]
    for name in rnd.sample(names, rnd.randrange(0, len(names) + 1)):
        route.append(f"{name}\t0002000C\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0")
    if rnd.random() > 0.1:
        fs.write("proc/net/fib_trie", "\n".join(trie))
    if rnd.random() > 0.2:
        fs.write("proc/net/route", "\n".join(route))


def _env(rnd: random.Random, pod: list[str], socket: str) -> dict[str, str]:
    env = {"NCCL_ENV_SOCKET_IFNAME": socket} if socket != "eth0" or rnd.random() < 0.5 else {}
    if rnd.random() < 0.2:
        pinned = rnd.sample([*pod, "eth7", "lo"], rnd.randrange(0, min(3, len(pod) + 2)))
        env["NCCL_ENV_IFACES"] = rnd.choice((",", " ", ", ", "\t", ",,", " \r")).join(pinned)
    return env


def table(seed: int, root: Path) -> tuple[dict[str, str], str]:
    """Write seed's tree under root: (the environment to run with, a description)."""
    rnd = random.Random(seed)
    fs = FakeSys(root)
    socket = rnd.choice(SOCKETS)
    names = rnd.sample(POD_NAMES, rnd.randrange(0, 4))
    pod = dict(zip(names, rnd.sample(ADDRS, len(names)), strict=True))
    for name in ["lo", socket or "eth0", *names, *rnd.sample(HOST_NDEVS, 1)]:
        fs.netdev(name)
    _gids(fs, rnd, pod, socket)
    _proc(fs, rnd, pod, ["lo", socket or "eth0", *names])
    env = _env(rnd, names, socket)
    return env, f"seed {seed}: pod {pod}, socket {socket!r}, env {env}"
