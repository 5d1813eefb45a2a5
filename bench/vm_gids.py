#!/usr/bin/env python3
"""How soon the kernel adds a pod interface's RoCE GID, and what one look at a real GID
table costs, on Soft-RoCE in the VM tier's kernel (run inside the VM, as root):

    scripts/vm-run.sh --exec ".venv/bin/python bench/vm_gids.py [--rounds 30]"

It makes a Soft-RoCE device on the VM's first virtio NIC and a macvlan on that NIC in
a netns of its own (the pod's interface), then per round adds one address to the
macvlan and waits for its RoCE v2 GID as ADD does (`wait_for_gids`, looking again after
0.1 ms): the time from `ip addr add` returning to the GID seen. Then one look's cost,
read as `wait_for_gids` reads a table (``rdma_cni/node/gids.py`` of this tree) and as it
read one before (the type and the GID of every slot). Medians, in ms. The VM runs
under emulation when the host has no KVM: absolute times are not a node's, and the two
ways of looking are compared in the same run. Everything made is deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from ipaddress import IPv4Address
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE.parent / "tests/vm")]

from rdma_cni.adapters.sysfs import Sysfs  # noqa: E402
from rdma_cni.node.gids import wait_for_gids  # noqa: E402

RXE, NETNS, POD_IF = "rxebench0", "gidbench", "net1"


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def old_look(sysfs: Sysfs, ibdev: str) -> int:
    """One look as `wait_for_gids` read a table before: the type and GID of every slot."""
    base = f"sys/class/infiniband/{ibdev}/ports/1"
    n = 0
    for index in sysfs.listdir(f"{base}/gids"):
        kind = sysfs.read(f"{base}/gid_attrs/types/{index}")
        value = sysfs.read(f"{base}/gids/{index}")
        if kind and value and sysfs.read(f"{base}/gid_attrs/ndevs/{index}") == POD_IF:
            n += 1
    return n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args()
    import vmkit

    nic = vmkit.virtio_nics()[0]
    sysfs = Sysfs("/")
    sh("ip", "link", "set", nic, "up")
    sh("rdma", "link", "add", RXE, "type", "rxe", "netdev", nic)
    sh("ip", "netns", "add", NETNS)
    try:
        sh("ip", "link", "add", "link", nic, "name", "gbtmp0", "netns", NETNS, "type",
           "macvlan", "mode", "bridge")
        sh("ip", "-n", NETNS, "link", "set", "gbtmp0", "name", POD_IF)
        sh("ip", "-n", NETNS, "link", "set", POD_IF, "up")
        slots = len(sysfs.listdir(f"sys/class/infiniband/{RXE}/ports/1/gids"))
        lags = []
        for r in range(args.rounds):
            ip = f"198.51.100.{10 + r}"
            sh("ip", "-n", NETNS, "addr", "add", f"{ip}/24", "dev", POD_IF)
            t0 = time.perf_counter_ns()
            wait_for_gids(sysfs, {POD_IF: (RXE, IPv4Address(ip))}, 5.0, first=0.0001)
            lags.append((time.perf_counter_ns() - t0) / 1e6)
            sh("ip", "-n", NETNS, "addr", "del", f"{ip}/24", "dev", POD_IF)
        want = {POD_IF: (RXE, IPv4Address("198.51.100.9"))}
        sh("ip", "-n", NETNS, "addr", "add", "198.51.100.9/24", "dev", POD_IF)
        wait_for_gids(sysfs, want, 5.0)
        new, old = [], []
        for _ in range(args.rounds):
            t0 = time.perf_counter_ns()
            wait_for_gids(sysfs, want, 5.0)
            t1 = time.perf_counter_ns()
            old_look(sysfs, RXE)
            t2 = time.perf_counter_ns()
            new.append((t1 - t0) / 1e6)
            old.append((t2 - t1) / 1e6)
        print(f"Soft-RoCE {RXE} on {nic}, {slots} GID slots, kernel {os.uname().release}, "
              f"{args.rounds} rounds, medians")
        print(f"  address to GID seen      {statistics.median(lags):8.3f} ms "
              f"(min {min(lags):.3f}, max {max(lags):.3f})")
        print(f"  one look, as ADD reads   {statistics.median(new):8.3f} ms")
        print(f"  one look, as before      {statistics.median(old):8.3f} ms")
    finally:
        subprocess.run(["ip", "netns", "delete", NETNS], check=False, timeout=60)
        subprocess.run(["rdma", "link", "delete", RXE], check=False, timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
