#!/usr/bin/env python3
"""Where figure 7's kernel floor grows: bench/floor.py's ADD timed step by step (each
netlink request by type, each store write, the socket setup), median per round, on a
quiet node and again with ``--busy`` one-interface attachments on it, made by rdma-cni
in-process as figure 7's are (bench/profile_server.py ``--busy``).

    sudo .venv/bin/python bench/floor_steps.py [--busy 512] [--rounds 30] [--proc-sys]
                                               [--touch-proc-sys] [--sync]

``--proc-sys`` also times, after each floor ADD and apart from it, the four IPv4
settings written under ``/proc/sys/net/ipv4/conf/eth1/`` from inside the pod netns (how
the plugin set them before it sent one ``RTM_SETLINK``). ``--touch-proc-sys`` reads one
entry under ``/proc/sys/net/ipv4/conf/`` in every busy pod's netns, as a primary CNI or
a container's sysctls do on a real node (a lookup there grows with the netns that have
had one). ``--sync`` flushes the file systems before each
half (a store's writes just after 512 ADDs wait on the writeback of theirs). Prints one
line per step: microseconds quiet, busy, and the difference, largest growth first.
Everything made here is deleted at the end.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import floor  # noqa: E402
import inproc  # noqa: E402
import lab  # noqa: E402

#: the settings as the plugin wrote them under /proc/sys until it set them by netlink
PROC_SYS = (("arp_ignore", "1"), ("arp_announce", "2"), ("rp_filter", "2"), ("arp_notify", "1"))


class Steps:
    """Microseconds of each step of the current round, by step name."""

    def __init__(self) -> None:
        self.now: dict[str, float] = collections.defaultdict(float)

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        start = time.perf_counter_ns()
        try:
            yield
        finally:
            self.now[name] += (time.perf_counter_ns() - start) / 1e3


def instrument(steps: Steps) -> None:
    """Time floor.py's netlink requests (by message type), store writes and sockets."""
    talk = floor.Channel._talk

    def timed_talk(self: floor.Channel, kind: int, flags: int, body: bytes) -> Any:
        with steps.timed(f"netlink {_KINDS.get(kind, kind)}"):
            return talk(self, kind, flags, body)

    floor.Channel._talk = timed_talk  # type: ignore[method-assign]
    for name in ("write_tmp", "count", "say", "lock", "record_lock"):
        setattr(floor.Store, name, _wrapped(steps, f"store {name}", getattr(floor.Store, name)))
    channels = floor._channels

    @contextlib.contextmanager
    def timed_channels(path: str) -> Iterator[Any]:
        with contextlib.ExitStack() as stack:
            with steps.timed("sockets (node, pod via setns)"):
                got = stack.enter_context(channels(path))
            yield got

    floor._channels = timed_channels


_KINDS = {16: "RTM_NEWLINK", 18: "RTM_GETLINK", 19: "RTM_SETLINK", 20: "RTM_NEWADDR",
          22: "RTM_GETADDR dump", 24: "RTM_NEWROUTE", 26: "RTM_GETROUTE", 32: "RTM_NEWRULE",
          34: "RTM_GETRULE dump", 17: "RTM_DELLINK", 33: "RTM_DELRULE"}


def _wrapped(steps: Steps, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        with steps.timed(name):
            return fn(*args, **kwargs)
    return run


@contextlib.contextmanager
def inside(path: str) -> Iterator[None]:
    """This thread in the netns at ``path`` for the block (the plugin's own helpers)."""
    from rdma_cni.adapters import netns

    home, target = netns.host_fd(), netns.open_netns(path)
    try:
        with netns.entered(target, home):
            yield
    finally:
        os.close(target)
        os.close(home)


def proc_sys_writes(path: str, ifname: str) -> None:
    with inside(path):
        for key, value in PROC_SYS:
            with open(f"/proc/sys/net/ipv4/conf/{ifname}/{key}", "w") as f:
                f.write(value)


def rounds(pods: lab.Pods, store: floor.Store, steps: Steps, n: int,
           proc_sys: bool) -> dict[str, float]:
    """Median microseconds of each step over ``n`` floor ADDs (and their DELs, untimed)."""
    per_round: list[dict[str, float]] = []
    for _ in range(n):
        (pod,) = pods.create(1)
        try:
            a = floor.Attachment(pod.path, hashlib.sha1(pod.name.encode()).hexdigest())
            steps.now = collections.defaultdict(float)
            with steps.timed("the floor ADD, whole"):
                floor.floor_add(a, store)
            if proc_sys:
                with steps.timed("(apart) the 4 settings under /proc/sys instead"):
                    proc_sys_writes(pod.path, a.ifaces[0].ifname)
            per_round.append(dict(steps.now))
            floor.floor_del(a, store)
        finally:
            pods.delete([pod])
    names = {k for r in per_round for k in r}
    return {k: statistics.median(r.get(k, 0.0) for r in per_round) for k in names}


def inner(args: argparse.Namespace) -> int:
    import profile_server

    from rdma_cni.cni import dispatch

    inproc.preload()
    steps = Steps()
    instrument(steps)
    pods = lab.Pods(lab.Names(args.prefix))
    store = floor.Store(os.path.join(args.tmp, "floor-store"))
    try:
        if args.sync:
            os.sync()
        quiet = rounds(pods, store, steps, args.rounds, args.proc_sys)
        profile_server._make_busy(dispatch.run, os.path.join(args.tmp, "data"), pods,
                                  args.busy)
        if args.touch_proc_sys:
            for pod in pods.live:
                with inside(pod.path), open("/proc/sys/net/ipv4/conf/lo/arp_ignore") as f:
                    f.read()
        if args.sync:
            os.sync()
        busy = rounds(pods, store, steps, args.rounds, args.proc_sys)
    finally:
        pods.close()
        store.close()
    print(f"floor ADD steps, us: median of {args.rounds} rounds, quiet, then with "
          f"{args.busy} attachments on the node")
    for k in sorted(quiet.keys() | busy.keys(), key=lambda k: quiet.get(k, 0) - busy.get(k, 0)):
        q, b = quiet.get(k, 0.0), busy.get(k, 0.0)
        print(f"{q:9.1f} {b:9.1f} {b - q:+9.1f}  {k}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--busy", type=int, default=512)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--proc-sys", action="store_true")
    p.add_argument("--touch-proc-sys", action="store_true")
    p.add_argument("--sync", action="store_true")
    return lab.node_main(p, "rfs", __file__, inner)


if __name__ == "__main__":
    sys.exit(main())
