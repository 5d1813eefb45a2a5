#!/usr/bin/env python3
"""What an ADD's address choice costs on a busy node: ``Store.ip_owners`` of one pool,
under the store's lock, in a store holding ``--reservations`` spread over ``--pools``
/24 pools (figure 7's node: 512 over 8), with a DEL and an ADD of another process's
between two calls, as on a node where two `serve` workers and the in-process plugin
take turns. Both ways in the same run: from this process's view brought up to date by
the journal (what an ADD does since rdma_cni/store/journal.py), and from a listing of
``addrs/`` with each of the pool's files checked (``fresh=True``: what every ADD did
before, and what a view older than the refresh does).

    .venv/bin/python bench/ipowners.py [--disk /var/tmp] [--reservations 512]
                                       [--pools 8] [--rounds 200]

Prints the median microseconds per call of each way. The store is removed at the end.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from ipaddress import IPv4Address
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rdma_cni.store.core import Store
from rdma_cni.vocab.attachment import AttachmentKey


def _key(i: int) -> AttachmentKey:
    return AttachmentKey("bench-net", f"sandbox-{i}", "eth0")


def measure(store: Store, pools: list[str], rounds: int, fresh: bool) -> float:
    """Median us of ``ip_owners`` of pool 0, each after a release and a reservation in it
    made by another Store (the journal's notes to catch up on)."""
    other = Store(store.root)
    spare = IPv4Address("198.18.0.250")
    times = []
    for r in range(rounds):
        if other.ip_owners(pools[0]).get(spare) is None:
            other.reserve_ip(pools[0], spare, _key(10**6 + r), "eth1")
        else:
            other.release_ips(other.ip_owners(pools[0])[spare][0])
        with store.lock():
            t = time.perf_counter()
            store.ip_owners(pools[0], mine=_key(-1), fresh=fresh)
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--disk", default="/var/tmp")
    p.add_argument("--reservations", type=int, default=512)
    p.add_argument("--pools", type=int, default=8)
    p.add_argument("--rounds", type=int, default=200)
    args = p.parse_args()
    root = tempfile.mkdtemp(prefix="rdma-cni-ipowners.", dir=args.disk)
    try:
        store = Store(root)
        pools = [f"198.18.{k}.0/24" for k in range(args.pools)]
        for i in range(args.reservations):
            k = i % args.pools
            ip = IPv4Address(f"198.18.{k}.{2 + i // args.pools}")
            store.reserve_ip(pools[k], ip, _key(i), "eth1")
        store.ip_owners(pools[0])
        view = measure(store, pools, args.rounds, fresh=False)
        listed = measure(store, pools, args.rounds, fresh=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    per_pool = args.reservations // args.pools
    print(f"ip_owners of one pool ({per_pool} of {args.reservations} reservations, "
          f"{args.rounds} calls, medians): from the journal's view {view:.1f} us, "
          f"from a listing {listed:.1f} us ({listed / view:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
