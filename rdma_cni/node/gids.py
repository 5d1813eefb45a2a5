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
from contextlib import closing
from ipaddress import IPv4Address

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import TryAgain
from rdma_cni.records import replace
from rdma_cni.vocab.nic import Gid, parse_gid

ROCE_V2 = "RoCE v2"
ROCE_V1 = "IB/RoCE v1"
IB_ROOT = "sys/class/infiniband"


def _int_names(names: Iterable[str]) -> list[int]:
    return sorted(int(n) for n in names if n.isdigit())


def _gid_at(sysfs: Sysfs, ibdev: str, port: int, index: int | str, ndev: str | None,
            gid_type: str | None = None) -> Gid | None:
    """The GID in slot ``index`` (None: an empty or zero slot); ``gid_type``: its type when
    the caller has read it already."""
    base = f"{IB_ROOT}/{ibdev}/ports/{port}"
    if gid_type is None:
        gid_type = sysfs.read(f"{base}/gid_attrs/types/{index}")
    value = sysfs.read(f"{base}/gids/{index}") if gid_type else None
    if not gid_type or not value:
        return None  # empty slot: its attributes read EINVAL
    addr = parse_gid(value)
    if addr is None or int(addr) == 0:
        return None
    return Gid(ibdev, port, int(index), value, gid_type, ndev)


def _scan_port(sysfs: Sysfs, ibdev: str, port: int) -> list[Gid]:
    """The port's GIDs. A table has hundreds of slots, mostly empty: the type of every
    slot is read from the table's directory, the GID and netdev only of the slots in use."""
    base = f"{IB_ROOT}/{ibdev}/ports/{port}"
    types = sysfs.read_each(f"{base}/gid_attrs/types")
    out: list[Gid] = []
    for index in _int_names(types):
        gid = _gid_at(sysfs, ibdev, port, index, None, types[str(index)])
        if gid is not None:
            ndev = sysfs.read(f"{base}/gid_attrs/ndevs/{index}") or None
            out.append(replace(gid, ndev=ndev))
    return out


def scan(sysfs: Sysfs, ibdevs: Iterable[str] | None = None) -> list[Gid]:
    """Every non-empty GID of the given (default: all) RDMA devices."""
    names = sysfs.listdir(IB_ROOT) if ibdevs is None else list(ibdevs)
    out: list[Gid] = []
    for ibdev in names:
        for port in _int_names(sysfs.listdir(f"{IB_ROOT}/{ibdev}/ports")):
            out.extend(_scan_port(sysfs, ibdev, port))
    return out


def _look(sysfs: Sysfs, wanted: Mapping[str, tuple[str, IPv4Address]],
          found: dict[str, Gid]) -> None:
    """Add to ``found`` the RoCE v2 GIDs of ``wanted`` in the tables now: each table's
    slots read in order, by their netdev, until its interfaces' GIDs are all found (a
    new GID takes the first free slot), and only the slots of those interfaces further."""
    for ibdev in sorted({ib for ib, _ in wanted.values()}):
        mine = {i: ip for i, (ib, ip) in wanted.items() if ib == ibdev and i not in found}
        for port in _int_names(sysfs.listdir(f"{IB_ROOT}/{ibdev}/ports")):
            if not mine:
                break
            slots = sysfs.each(f"{IB_ROOT}/{ibdev}/ports/{port}/gid_attrs/ndevs")
            with closing(slots):
                for index, ndev in slots:
                    gid = _gid_at(sysfs, ibdev, port, index, ndev) if ndev in mine else None
                    if gid is not None and find_roce_v2([gid], ibdev, ndev, mine[ndev]):
                        found[ndev] = gid
                        del mine[ndev]
                        if not mine:
                            break


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
    first: float = 0.001,
) -> dict[str, Gid]:
    """Wait until each ``ifname -> (ibdev, ipv4)`` has its RoCE v2 GID.

    The kernel fills GID slots asynchronously after an address is added (in a work item
    it queues then): the tables are read again after ``first`` seconds, then after twice
    as long each time, up to ``interval``. Raises TryAgain (11) naming the interfaces
    still missing once ``timeout`` passes.
    """
    deadline = clock() + timeout
    found: dict[str, Gid] = {}
    pause = min(first, interval)
    while True:
        _look(sysfs, wanted, found)
        missing = [f"{i} (::ffff:{ip} on {ib})" for i, (ib, ip) in wanted.items() if i not in found]
        if not missing:
            return found
        left = deadline - clock()
        if left <= 0:
            raise TryAgain(
                f"failed to find RoCE v2 GIDs within {timeout:g}s: missing for "
                + ", ".join(missing)
            )
        sleep(min(pause, left))
        pause = min(pause * 2, interval)
