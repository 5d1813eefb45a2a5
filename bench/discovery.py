#!/usr/bin/env python3
"""What an ADD's NIC discovery costs on a RoCE node's sysfs, modelled: the bench's NICs
are veth stand-ins without RDMA devices (the kernel here has none), so its figures do
not read a GID table; a node's RDMA NICs have one per port, hundreds of slots mostly
empty, which discovery reads.

    .venv/bin/python bench/discovery.py [--nics 8] [--slots 256] [--virtual 60] [--rounds 30]
                                        [--tree DIR]

The tree (``tests/support/fakes/sysfs.py``, in a temp dir) is ``--nics`` single-port
ConnectX-style PFs, each its own RDMA device with a GID table of ``--slots`` slots (its
RoCE v1/v2 pair in slots 0 and 1), and ``--virtual`` netdevs without a device (the host
ends of pods' veths, bridges). Printed, medians of ``--rounds`` in ms:

- ``discovered``: ``rdma_nics`` without ``devices`` (the config's default), every NIC
  found and read;
- ``pinned, one NIC``: ``rdma_nics`` with the ``devices`` of all ``--nics``, then the
  facts of the one NIC an ADD of one interface gets, as ``cmd_add`` asks for them;
- ``GID wait, one look``: ``wait_for_gids`` of that interface whose RoCE v2 GID is
  already in its table (a pod's in slots 2 and 3): one reading of the table, what ADD
  pays at each look before the kernel has added the GID too.

``--tree DIR`` measures the rdma_cni of another checkout (a worktree of an earlier
commit) with this tool. The tree is read from the page cache, as a node's sysfs is
from memory; the empty slots are directories here (reading one fails, as the kernel's
EINVAL does).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
POD_IP = "198.18.0.9"


class NoPrimary:
    """The host's netlink as ``primary_nics`` reads it: no default route, no node address."""

    def route_match(self, dst: str) -> None:
        return None

    def link_at(self, index: int) -> None:
        return None


def build_tree(root: Path, nics: int, slots: int, virtual: int) -> list[str]:
    from support.fakes.sysfs import FakeSys

    fs = FakeSys(root)
    names = []
    for i in range(nics):
        pci, name = f"0000:{0x1a + i:02x}:00.0", f"ens{i + 1}f0np0"
        fs.netdev(name, pci=pci, numa=i * 2 // max(nics, 1))
        fs.ibdev(f"mlx5_{i}", pci=pci, numa=i * 2 // max(nics, 1), uverbs=f"uverbs{i}",
                 slots=slots)
        fs.roce_pair(f"mlx5_{i}", 1, 0, f"198.18.{i}.2", name)
        names.append(name)
    fs.roce_pair("mlx5_0", 1, 2, POD_IP, "net1")  # a pod's interface on the first NIC
    for j in range(virtual):
        fs.netdev(f"veth{j:04x}")
    return names


def timed(fn: Any, rounds: int) -> float:
    walls = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        fn()
        walls.append(time.perf_counter_ns() - t0)
    return statistics.median(walls) / 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nics", type=int, default=8)
    p.add_argument("--slots", type=int, default=256)
    p.add_argument("--virtual", type=int, default=60)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--tree", default=str(HERE.parent))
    args = p.parse_args()
    sys.path[:0] = [args.tree, str(HERE.parent / "tests")]
    from rdma_cni.node import nics as node_nics

    tmp = Path(tempfile.mkdtemp(prefix="rdma-cni-discovery."))
    try:
        names = build_tree(tmp, args.nics, args.slots, args.virtual)
        node_nics.SYSFS_ROOT = str(tmp)
        host: Any = NoPrimary()

        def conf(devices: list[str] | None) -> Any:
            return SimpleNamespace(devices=devices, nodeIPs=[])

        def discovered() -> None:
            got = node_nics.rdma_nics(conf(None), host)
            assert len(got.nics) == args.nics

        def pinned() -> None:
            got = node_nics.rdma_nics(conf(names), host)
            facts = got.by_netdev
            nic = facts([names[0]])[names[0]] if callable(facts) else facts[names[0]]
            assert nic.ibdev == "mlx5_0"

        def gid_wait() -> None:
            from ipaddress import IPv4Address

            from rdma_cni.adapters.sysfs import Sysfs
            from rdma_cni.node.gids import wait_for_gids

            got = wait_for_gids(Sysfs(str(tmp)), {"net1": ("mlx5_0", IPv4Address(POD_IP))},
                                timeout=1.0)
            assert got["net1"].index == 3

        print(f"{args.nics} NICs, {args.slots} GID slots each, {args.virtual} virtual netdevs; "
              f"rdma_cni of {args.tree}; medians of {args.rounds}, ms")
        print(f"  discovered       {timed(discovered, args.rounds):8.3f}")
        print(f"  pinned, one NIC  {timed(pinned, args.rounds):8.3f}")
        print(f"  GID wait, one look {timed(gid_wait, args.rounds):6.3f}")
    finally:
        shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
