#!/usr/bin/env python3
"""The two parts of a link deletion, timed apart: from sending ``RTM_DELLINK`` for a
macvlan to the kernel's ``RTM_DELLINK`` notification (the link unlisted under the RTNL
lock, its addresses and routes gone with it), and to the request's acknowledgement
(after ``netdev_run_todo``'s wait for every RCU callback on the machine and for the
link's last references). rdma-cni's DEL returns after the first
(rdma_cni/adapters/rtnlunlist.py); a plain request, Go's plugins' too, after the second.

    sudo .venv/bin/python bench/dellink_split.py [--rounds 30] [--pause 0]

In a throwaway netns (a veth pair as the parent, each round a macvlan with an address
of 198.51.100.0/24, made with ``ip`` and not timed); ``--pause S`` waits S seconds
between making the link and deleting it. Prints the medians and the 10th and 90th
percentiles in microseconds. The netns is deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rdma_cni.adapters.rtnl import RTM_DELLINK, Channel, ifinfmsg  # noqa: E402


def _ip(ns: str, *args: str) -> None:
    subprocess.run(["ip", "-n", ns, *args], check=True)


def _one(ns: str, chan: Channel, pause: float) -> tuple[float, float]:
    _ip(ns, "link", "add", "m0", "link", "p0", "type", "macvlan", "mode", "bridge")
    _ip(ns, "addr", "add", "198.51.100.5/24", "dev", "m0")
    _ip(ns, "link", "set", "m0", "up")
    time.sleep(pause)
    listener = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                             socket.NETLINK_ROUTE)
    listener.bind((0, 1))  # RTMGRP_LINK
    acked: list[int] = []
    try:
        start = time.perf_counter_ns()
        worker = threading.Thread(target=lambda: (
            chan.request(ifinfmsg, RTM_DELLINK, 0, [("IFLA_IFNAME", "m0")]),
            acked.append(time.perf_counter_ns())))
        worker.start()
        while True:
            data, (sender, _groups) = listener.recvfrom(1 << 16)
            if sender == 0 and struct.unpack_from("=H", data, 4)[0] == RTM_DELLINK:
                break
        unlisted = time.perf_counter_ns()
        worker.join()
    finally:
        listener.close()
    return (unlisted - start) / 1e3, (acked[0] - start) / 1e3


def _inner(rounds: int, pause: float) -> None:
    ns = os.environ["DELLINK_SPLIT_NS"]
    _ip(ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
    _ip(ns, "link", "set", "p0", "up")
    chan = Channel()
    unlisted, acked = [], []
    try:
        for _ in range(rounds):
            u, a = _one(ns, chan, pause)
            unlisted.append(u)
            acked.append(a)
    finally:
        chan.close()
    for what, values in (("unlisted (the kernel's notification)", unlisted),
                         ("acknowledged (the request's answer)", acked)):
        deciles = statistics.quantiles(values, n=10)
        print(f"{what}: median {statistics.median(values):.0f} us "
              f"(p10 {deciles[0]:.0f}, p90 {deciles[-1]:.0f}), {len(values)} rounds")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--pause", type=float, default=0.0)
    args = p.parse_args()
    if os.environ.get("DELLINK_SPLIT_NS"):
        _inner(args.rounds, args.pause)
        return 0
    ns = f"rcdls{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        return subprocess.run(["ip", "netns", "exec", ns, sys.executable, *sys.argv],
                              env={**os.environ, "DELLINK_SPLIT_NS": ns}).returncode
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


if __name__ == "__main__":
    sys.exit(main())
