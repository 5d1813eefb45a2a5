"""The RoCE GID tables, read from sysfs.

``sys/class/infiniband/<ibdev>/ports/<p>/gids/<i>`` holds the GID,
``gid_attrs/types/<i>`` its type (``IB/RoCE v1`` or ``RoCE v2``) and
``gid_attrs/ndevs/<i>`` the netdev that owns it. Reading the attributes of an
empty slot fails with EINVAL: such slots are skipped, as are zero GIDs.
``scan`` returns link-local GIDs too; consumers that export GIDs (nccl_env)
only ever use IPv4-mapped RoCE v2 ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from ipaddress import IPv4Address

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import TryAgain
from rdma_cni.vocab.nic import Gid, parse_gid

ROCE_V2 = "RoCE v2"
ROCE_V1 = "IB/RoCE v1"
IB_ROOT = "sys/class/infiniband"


def _int_names(names: Iterable[str]) -> list[int]:
    return sorted(int(n) for n in names if n.isdigit())


def _scan_port(sysfs: Sysfs, ibdev: str, port: int) -> list[Gid]:
    base = f"{IB_ROOT}/{ibdev}/ports/{port}"
    out: list[Gid] = []
    for index in _int_names(sysfs.listdir(f"{base}/gids")):
        gid_type = sysfs.read(f"{base}/gid_attrs/types/{index}")
        value = sysfs.read(f"{base}/gids/{index}")
        if not gid_type or not value:
            continue  # empty slot: its attributes read EINVAL
        addr = parse_gid(value)
        if addr is None or int(addr) == 0:
            continue
        ndev = sysfs.read(f"{base}/gid_attrs/ndevs/{index}") or None
        out.append(Gid(ibdev, port, index, value, gid_type, ndev))
    return out


def scan(sysfs: Sysfs, ibdevs: Iterable[str] | None = None) -> list[Gid]:
    """Every non-empty GID of the given (default: all) RDMA devices."""
    names = sysfs.listdir(IB_ROOT) if ibdevs is None else list(ibdevs)
    out: list[Gid] = []
    for ibdev in names:
        for port in _int_names(sysfs.listdir(f"{IB_ROOT}/{ibdev}/ports")):
            out.extend(_scan_port(sysfs, ibdev, port))
    return out


def roce_v2_ipv4(gids: Iterable[Gid]) -> list[Gid]:
    """The GIDs NCCL may use: RoCE v2 with an IPv4-mapped address."""
    return [g for g in gids if g.type == ROCE_V2 and g.ipv4 is not None]


def find_roce_v2(gids: Iterable[Gid], ibdev: str | None, ifname: str, ip: IPv4Address) -> list[Gid]:
    """RoCE v2 GIDs ``::ffff:<ip>`` owned by ``ifname`` (on ``ibdev`` when given)."""
    return [
        g
        for g in roce_v2_ipv4(gids)
        if g.ndev == ifname and g.ipv4 == ip and (ibdev is None or g.ibdev == ibdev)
    ]


def wait_for_gids(
    sysfs: Sysfs,
    wanted: Mapping[str, tuple[str, IPv4Address]],
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    interval: float = 0.05,
) -> dict[str, Gid]:
    """Wait until each ``ifname -> (ibdev, ipv4)`` has its RoCE v2 GID.

    The kernel fills GID slots asynchronously after an address is added. Raises
    TryAgain (11) naming the interfaces still missing once ``timeout`` passes.
    """
    deadline = clock() + timeout
    found: dict[str, Gid] = {}
    while True:
        ibdevs = sorted({ib for ib, _ in wanted.values()})
        gids = scan(sysfs, ibdevs)
        for ifname, (ibdev, ip) in wanted.items():
            if ifname not in found:
                match = find_roce_v2(gids, ibdev, ifname, ip)
                if match:
                    found[ifname] = match[0]
        missing = [f"{i} (::ffff:{ip} on {ib})" for i, (ib, ip) in wanted.items() if i not in found]
        if not missing:
            return found
        if clock() >= deadline:
            raise TryAgain(
                f"failed to find RoCE v2 GIDs within {timeout:g}s: missing for "
                + ", ".join(missing)
            )
        sleep(interval)
