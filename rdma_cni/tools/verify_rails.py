"""The rails `rdma-cni verify` tests, and why one fails (pure: no OS access).

A rail is one RDMA interface of the pod: its address, MTU, and the HCA, port and GID
index NCCL would use for it (the logic of ``nccl_env``: the RoCE v2 GID ``::ffff:<ip>``
owned by the interface; ``NCCL_IB_GID_INDEX`` from the environment wins, as it does in
NCCL). The two pods pair their rails by position (eth1 with eth1, ...). Every finding
is one line naming the likely cause, in the order an operator fixes them: the RDMA
device, the GID, the GID index, the MTU, the route.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from ipaddress import IPv4Address, IPv6Address
from typing import Any

from rdma_cni.errors import CniError
from rdma_cni.node.gids import find_roce_v2
from rdma_cni.tools import nccl_env
from rdma_cni.vocab.nic import Gid

NOT_VISIBLE = "RDMA device not visible in the pod"
NO_GID = "no GID for the interface"
INDEX_WRONG = "wrong GID index"
INDEX_DIFFERS = "GID index differs between pods"
MTU_MISMATCH = "MTU mismatch"
NO_ROUTE = "no route to the peer's rail"
UNREACHABLE = "the peer's rail unreachable"


@dataclass(frozen=True)
class Rail:
    """One RDMA interface of this pod, as verify tests it (sent to the peer as is)."""

    ifname: str
    ip: str
    mtu: int
    ibdev: str | None = None
    port: int | None = None
    gid_index: int | None = None  # the index NCCL would use
    own_index: int | None = None  # the index of the interface's own GID
    gid: str | None = None
    cause: str | None = None
    qp: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def hca(self) -> str | None:
        return f"{self.ibdev}:{self.port}" if self.ibdev else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Rail:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in doc.items() if k in names})


def local_rails(ifaces: Mapping[str, tuple[str, int]], gids: Sequence[Gid],
                env: Mapping[str, str], devices: Sequence[str]) -> list[Rail]:
    """The pod's rails (``ifaces``: name -> (IPv4, MTU), RDMA interfaces only)."""
    exported = env.get("NCCL_IB_GID_INDEX", "").strip()
    rails = []
    for ifname in sorted(ifaces, key=nccl_env.natural_key):
        ip, mtu = ifaces[ifname]
        rail = Rail(ifname, ip, mtu)
        if not devices:
            rails.append(replace(rail, cause=f"{NOT_VISIBLE}: /sys/class/infiniband lists no "
                                 "device (exclusive RDMA netns mode without the device "
                                 "moved in, or the device plugin did not pass it)"))
            continue
        match = find_roce_v2(gids, None, ifname, IPv4Address(ip))
        if len(match) != 1:
            where = ", ".join(devices) if not match else ", ".join(
                f"{g.ibdev}:{g.port} index {g.index}" for g in match)
            why = "on none of" if not match else "on several HCAs:"
            rails.append(replace(rail, cause=f"{NO_GID}: no single RoCE v2 GID ::ffff:{ip} "
                                 f"owned by {ifname} ({why} {where})"))
            continue
        own = match[0]
        rails.append(replace(rail, ibdev=own.ibdev, port=own.port, own_index=own.index,
                             gid_index=own.index, gid=own.gid))
    return [_exported_index(r, exported, gids) for r in rails] if exported else rails


def _exported_index(rail: Rail, exported: str, gids: Sequence[Gid]) -> Rail:
    """NCCL takes ``NCCL_IB_GID_INDEX`` as is for every HCA: name what it selects."""
    if rail.cause or rail.own_index is None:
        return rail
    if not exported.isdigit():
        return replace(rail, cause=f"{INDEX_WRONG}: NCCL_IB_GID_INDEX={exported!r} is not "
                       "an index")
    index = int(exported)
    if index == rail.own_index:
        return rail
    there = [g for g in gids if (g.ibdev, g.port, g.index) == (rail.ibdev, rail.port, index)]
    what = (f"{shown(there[0].gid)} ({there[0].type}, {there[0].ndev or 'no netdev'})"
            if there else "an empty slot")
    return replace(rail, gid_index=index, cause=(
        f"{INDEX_WRONG}: NCCL_IB_GID_INDEX={index} selects {what} on {rail.hca}, not "
        f"{rail.ifname}'s GID (index {rail.own_index}); export the pod's own index "
        "(nccl_env.sh) or unset it"))


def shown(gid: str) -> str:
    """A GID as people read it: ``::ffff:198.51.100.2``, ``fe80::...``."""
    try:
        addr = IPv6Address(gid)
    except ValueError:
        return gid
    return f"::ffff:{addr.ipv4_mapped}" if addr.ipv4_mapped else addr.compressed


def nccl_view(gids: Sequence[Gid], rails: Sequence[Rail], env: Mapping[str, str],
              socket_ifname: str) -> dict[str, str]:
    """The NCCL variables nccl_env computes for these rails (or {"error": ...})."""
    pod = {r.ifname: IPv4Address(r.ip) for r in rails if r.own_index is not None}
    try:
        view = nccl_env.env_for(nccl_env.select_gids(gids, pod), gids, socket_ifname)
    except CniError as exc:
        return {"error": exc.msg}
    if env.get("NCCL_IB_GID_INDEX"):
        view["NCCL_IB_GID_INDEX (set in the environment)"] = env["NCCL_IB_GID_INDEX"]
    return view


def pair_cause(mine: Rail, theirs: Rail | None) -> str | None:
    """Why this rail cannot carry traffic to the peer's matching rail, before any QP."""
    if theirs is None:
        return f"the peer has no rail matching {mine.ifname} (it has fewer RDMA interfaces)"
    if mine.cause and mine.cause.startswith(INDEX_WRONG) and theirs.own_index == mine.gid_index:
        return (f"{INDEX_DIFFERS}: NCCL_IB_GID_INDEX={mine.gid_index} is the peer's "
                f"{theirs.ifname} GID, but {mine.ifname}'s GID is at index {mine.own_index} "
                "here: NCCL uses one index for every HCA and pod, so export it per pod "
                "(nccl_env.sh) or use NCCL_IB_ADDR_RANGE")
    if mine.cause:
        return mine.cause
    if theirs.cause:
        return f"the peer's {theirs.ifname}: {theirs.cause}"
    if mine.mtu != theirs.mtu:
        return (f"{MTU_MISMATCH}: {mine.ifname} has MTU {mine.mtu} here, the peer's "
                f"{theirs.ifname} ({theirs.ip}) {theirs.mtu}")
    return None


def route_cause(mine: Rail, theirs: Rail, leaves: str | None) -> str | None:
    """``leaves``: the interface the kernel routes ``mine.ip -> theirs.ip`` through
    (None: no route at all)."""
    if leaves == mine.ifname:
        return None
    how = "none" if leaves is None else f"it leaves through {leaves}"
    return (f"{NO_ROUTE}: no route from {mine.ip} to {theirs.ip} ({theirs.ifname} of the "
            f"peer) through {mine.ifname} ({how})")


def unreachable(mine: Rail, theirs: Rail, detail: str) -> str:
    return (f"{UNREACHABLE}: {theirs.ip} ({theirs.ifname}, GID index {theirs.gid_index}) "
            f"did not answer the RC queue pair from {mine.hca} index {mine.gid_index}: "
            f"{detail}")
