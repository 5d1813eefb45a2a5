"""NCCL environment for the RDMA interfaces of a pod (DESIGN §5).

Pods run ``scripts/nccl_env.sh`` (POSIX sh, mounted at ``/usr/local/bin/nccl_env.sh``);
this module is the same algorithm for ``rdma-cni nccl-env`` and for ``verify``'s view of
in-memory GID tables. ``tests/unit/test_nccl_env_differential.py`` runs the subcommand
and the script on generated GID tables and requires the same output, so a change to one
that the other does not make fails there. The algorithm:

1. The pod's IPv4 addresses are the ``/32 host LOCAL`` entries of
   ``/proc/net/fib_trie`` (per netns, needs no iproute2).
2. The pod's RDMA interfaces (unless given explicitly) are the netdevs of
   ``/sys/class/net`` other than ``lo`` and the socket interface that either
   have a route in ``/proc/net/route`` or own a RoCE v2 GID ``::ffff:<ip>``
   with ``<ip>`` local. Each must own such a GID, else error: GIDs of other
   pods (same ndev name, other address) never count. Several: lowest address.
   Without a readable fib_trie the GID's own address is used, and an
   interface owning GIDs with several addresses is an error.
3. ``NCCL_IB_HCA`` = ``=`` + ``ibdev:port`` per interface, in natural interface
   order, de-duplicated; ``NCCL_SOCKET_IFNAME`` = the socket interface.
4. Equal GID indices: ``NCCL_IB_GID_INDEX``. Differing: ``NCCL_IB_ADDR_RANGE``
   = the smallest CIDR covering the pod GIDs' addresses, only when no other
   RoCE v2 IPv4 GID on those HCA ports falls inside it (any larger range
   contains it, so there is no other candidate); else error.

Link-local and RoCE v1 GIDs are never exported.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from ipaddress import IPv4Address, IPv4Network

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import CniError, NicUnavailable
from rdma_cni.node.gids import find_roce_v2, roce_v2_ipv4, scan
from rdma_cni.vocab.nic import Gid


class NcclEnvError(NicUnavailable):
    """The NCCL variables cannot be computed safely (code 104)."""


def natural_key(name: str) -> tuple[str, int, str]:
    m = re.match(r"^(.*?)(\d*)$", name)
    prefix, num = (m.group(1), m.group(2)) if m else (name, "")
    return prefix, int(num) if num else -1, name


def read_local_ipv4(sysfs: Sysfs) -> set[IPv4Address] | None:
    """Local IPv4 addresses of this netns from proc/net/fib_trie, None if unreadable."""
    text = sysfs.read("proc/net/fib_trie")
    if text is None:
        return None
    out: set[IPv4Address] = set()
    last = ""
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "|--":
            last = words[1]
        elif words[:3] == ["/32", "host", "LOCAL"] and last:
            out.add(IPv4Address(last))
    return out


def route_ifaces(sysfs: Sysfs) -> set[str]:
    text = sysfs.read("proc/net/route") or ""
    return {ln.split()[0] for ln in text.splitlines()[1:] if ln.split()}


def _addresses(v2: Sequence[Gid], ifname: str, local: set[IPv4Address] | None) -> list[IPv4Address]:
    ips = {g.ipv4 for g in v2 if g.ndev == ifname and g.ipv4 is not None}
    return sorted(ip for ip in ips if local is None or ip in local)


def discover_pod_ifaces(
    sysfs: Sysfs,
    socket_ifname: str = "eth0",
    only: Sequence[str] | None = None,
    gids: Sequence[Gid] | None = None,
) -> dict[str, IPv4Address]:
    """``ifname -> IPv4`` of the pod's RDMA interfaces, in natural name order."""
    names = set(sysfs.listdir("sys/class/net")) - {"lo", socket_ifname}
    local = read_local_ipv4(sysfs)
    v2 = [g for g in roce_v2_ipv4(gids if gids is not None else scan(sysfs)) if g.ndev in names]
    if only is not None:
        absent = [n for n in only if n not in names]
        if absent:
            raise NcclEnvError(f"failed to find pod interface(s) {', '.join(absent)}: not present")
        cands = set(only)
    else:
        owners = {g.ndev for g in v2 if local is None or g.ipv4 in local}
        cands = (route_ifaces(sysfs) & names) | {n for n in owners if n}
    out: dict[str, IPv4Address] = {}
    for ifname in sorted(cands, key=natural_key):
        ips = _addresses(v2, ifname, local)
        if not ips:
            raise NcclEnvError(
                f"failed to find the RoCE v2 GID of pod interface {ifname}: no GID ::ffff:<ip> "
                "owned by it matches an IPv4 address of this pod"
            )
        if local is None and len(ips) > 1:
            raise NcclEnvError(
                f"failed to pick the address of pod interface {ifname}: /proc/net/fib_trie is "
                f"unreadable and GIDs name several ({', '.join(map(str, ips))})"
            )
        out[ifname] = ips[0]
    if not out:
        raise NcclEnvError(
            f"failed to find RDMA interfaces in the pod: none besides lo and {socket_ifname}"
        )
    return out


def select_gids(gids: Iterable[Gid], pod_ifaces: Mapping[str, IPv4Address]) -> list[Gid]:
    """The one RoCE v2 GID ``::ffff:<ip>`` owned by each pod interface."""
    if not pod_ifaces:
        raise NcclEnvError("failed to compute NCCL variables: the pod has no RDMA interfaces")
    all_gids = list(gids)
    chosen: list[Gid] = []
    for ifname, ip in pod_ifaces.items():
        match = find_roce_v2(all_gids, None, ifname, ip)
        if not match:
            raise NcclEnvError(
                f"failed to find a RoCE v2 GID ::ffff:{ip} owned by pod interface {ifname} "
                "on any RDMA device"
            )
        if len(match) > 1:
            where = ", ".join(f"{g.ibdev}:{g.port} index {g.index}" for g in match)
            raise NcclEnvError(
                f"failed to pick the GID of pod interface {ifname}: "
                f"::ffff:{ip} is on several HCAs ({where})"
            )
        chosen.append(match[0])
    return chosen


def covering_network(ips: Sequence[IPv4Address]) -> IPv4Network:
    """The smallest CIDR containing every address."""
    ints = [int(ip) for ip in ips]
    prefix = 32
    while prefix > 0 and len({i >> (32 - prefix) for i in ints}) > 1:
        prefix -= 1
    return IPv4Network((ints[0] >> (32 - prefix) << (32 - prefix), prefix))


def clean_range(chosen: Sequence[Gid], gids: Iterable[Gid]) -> IPv4Network:
    """The NCCL_IB_ADDR_RANGE matching the chosen GIDs and no other one on their HCAs."""
    net = covering_network([g.ipv4 for g in chosen if g.ipv4 is not None])
    hcas = {(g.ibdev, g.port) for g in chosen}
    keys = {(g.ibdev, g.port, g.index) for g in chosen}
    for g in roce_v2_ipv4(gids):
        if (g.ibdev, g.port) in hcas and (g.ibdev, g.port, g.index) not in keys and g.ipv4 in net:
            raise NcclEnvError(
                "failed to choose NCCL_IB_ADDR_RANGE: GID indices differ and the smallest "
                f"range covering the pod GIDs, {net}, also matches {g.ipv4} "
                f"({g.ibdev}:{g.port} index {g.index}, ndev {g.ndev})"
            )
    return net


def env_for(chosen: Sequence[Gid], gids: Iterable[Gid], socket_ifname: str) -> dict[str, str]:
    hcas = list(dict.fromkeys(f"{g.ibdev}:{g.port}" for g in chosen))
    env = {"NCCL_IB_HCA": "=" + ",".join(hcas)}
    indices = {g.index for g in chosen}
    if len(indices) == 1:
        env["NCCL_IB_GID_INDEX"] = str(indices.pop())
    else:
        env["NCCL_IB_ADDR_RANGE"] = str(clean_range(chosen, gids))
    env["NCCL_SOCKET_IFNAME"] = socket_ifname
    return env


def compute(
    sysfs: Sysfs,
    pod_ifaces: Mapping[str, IPv4Address],
    socket_ifname: str = "eth0",
    gids: Sequence[Gid] | None = None,
) -> dict[str, str]:
    """The NCCL variables for the given pod interfaces (DESIGN §5)."""
    all_gids = list(gids) if gids is not None else scan(sysfs)
    return env_for(select_gids(all_gids, pod_ifaces), all_gids, socket_ifname)


def format_exports(env: Mapping[str, str]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def _verify(chosen: Sequence[Gid], root: str = "/") -> list[str]:
    from rdma_cni.adapters import verbs

    if os.path.realpath(root) != "/":
        return [f"warning: --verify needs the real sysfs (not {root}); skipped"]
    if not verbs.available():
        return ["warning: pyverbs is not installed; --verify skipped"]
    checks = (verbs.check_gid(g.ibdev, g.port, g.index, g.gid, g.type) for g in chosen)
    problems = [p for p in checks if p]
    if problems:
        raise NcclEnvError("failed to verify GIDs with pyverbs: " + "; ".join(problems))
    return []


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    from rdma_cni.cliargs import parser

    p = parser("rdma-cni nccl-env", "Print the NCCL variables (NCCL_IB_HCA, NCCL_IB_GID_INDEX "
               "or NCCL_IB_ADDR_RANGE, NCCL_SOCKET_IFNAME) for this pod's RDMA interfaces, "
               "as export lines for eval.", config_help="accepted like every subcommand and "
               "ignored: everything is read from sysfs")
    p.add_argument("--verify", action="store_true", help="cross-check GIDs with pyverbs")
    p.add_argument("--json", action="store_true",
                   help="print a JSON object (an {\"error\": ...} object on failure)")
    p.add_argument("--socket-ifname", default=os.environ.get("NCCL_ENV_SOCKET_IFNAME") or "eth0",
                   help="NCCL_SOCKET_IFNAME, the pod's primary interface (default eth0; "
                        "env NCCL_ENV_SOCKET_IFNAME)")
    p.add_argument(
        "--ifaces",
        default=os.environ.get("NCCL_ENV_IFACES", ""),
        help="pod RDMA interfaces (comma or space separated; env NCCL_ENV_IFACES); "
             "default: discovered",
    )
    p.add_argument("--root", default=os.environ.get("NCCL_ENV_SYSFS_ROOT") or "/",
                   help="root of /sys (tests; env NCCL_ENV_SYSFS_ROOT)")
    return p.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    sysfs = Sysfs(args.root)
    only = args.ifaces.replace(",", " ").split() or None
    try:
        gids = scan(sysfs)
        pod = discover_pod_ifaces(sysfs, args.socket_ifname, only, gids)
        chosen = select_gids(gids, pod)
        env = env_for(chosen, gids, args.socket_ifname)
        notes = _verify(chosen, args.root) if args.verify else []
    except CniError as e:
        from rdma_cni.cliargs import fail

        return fail("rdma-cni nccl-env", e.msg, args.json)
    for note in notes:
        sys.stderr.write(f"nccl-env: {note}\n")
    sys.stdout.write(json.dumps(env, indent=2) + "\n" if args.json else format_exports(env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
