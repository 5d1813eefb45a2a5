#!/usr/bin/env python3
"""Profile the resident server's work per request: the same ``dispatch.run`` call
`rdma-cni serve` makes, in this process, under cProfile, for N one-interface (or
``--ifaces``) ADD+DEL pairs on fresh pods in a throwaway node netns.

    sudo .venv/bin/python bench/profile_server.py [--rounds 50] [--ifaces 1] [--top 25] [--cmd ADD]
                                                  [--busy 512]

Prints the top entries by own time and by cumulative time, and the CPU ms per ADD
and per DEL. ``--busy N`` first makes N one-interface attachments (not profiled, each
in a pod of its own, spread over the stand-in NICs as figure 7's), so the profile is of
a busy node's requests. Everything made here is deleted at the end.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import inproc  # noqa: E402
import lab  # noqa: E402
from sides import RdmaCni, rdma_blocks  # noqa: E402


def inner(args: argparse.Namespace) -> int:
    from rdma_cni.cni import dispatch

    inproc.preload()
    names = lab.Names(args.prefix)
    pods_api = lab.Pods(names)
    side = RdmaCni("rdma-cni", os.path.join(args.tmp, "data"), lab.N_NICS, socket="")
    prof = cProfile.Profile()
    cmds = args.cmds or ("ADD", "DEL")
    cpu = {"ADD": 0.0, "DEL": 0.0}
    try:
        _make_busy(dispatch.run, side.data_dir, pods_api, args.busy)
        for r in range(args.rounds + 1):
            pod = pods_api.create(1)[0]
            (inv,) = side.invocations(pod, rdma_blocks(args.ifaces))
            for cmd in ("ADD", "DEL"):
                out, err = io.StringIO(), io.StringIO()
                t0 = time.process_time()
                if r and cmd in cmds:
                    prof.enable()
                rc = dispatch.run(inv.environ(cmd), inv.stdin(cmd), out, err)
                prof.disable()
                if r:
                    cpu[cmd] += time.process_time() - t0
                if rc != 0:
                    raise RuntimeError(f"{cmd} failed: {out.getvalue()} {err.getvalue()}")
                if cmd == "ADD":
                    inv.cached = json.loads(out.getvalue())
            pods_api.delete([pod])
    finally:
        pods_api.close()
    add, dele = (cpu[c] / args.rounds * 1e3 for c in ("ADD", "DEL"))
    print(f"CPU per request ({args.ifaces} interface(s), {args.rounds} rounds): "
          f"ADD {add:.1f} ms, DEL {dele:.1f} ms")
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        only = [args.only] if args.only else []
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(*only, args.top)
        print(s.getvalue())
    return 0


def _make_busy(run: Callable[..., int], data_dir: str, pods_api: lab.Pods, n: int) -> None:
    """``n`` one-interface ADDs (``run``: dispatch.run), each into a pod of its own, the
    NICs taken in turn (as figure 7's busy node)."""
    for i in range(n):
        pod = pods_api.create(1)[0]
        side = RdmaCni("rdma-cni", data_dir, lab.N_NICS, socket="", first_nic=i % lab.N_NICS)
        (inv,) = side.invocations(pod, rdma_blocks(1))
        out, err = io.StringIO(), io.StringIO()
        if run(inv.environ("ADD"), inv.stdin("ADD"), out, err) != 0:
            raise RuntimeError(f"busy ADD failed: {out.getvalue()} {err.getvalue()}")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--ifaces", type=int, default=1)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--only", default="", help="a regex of the entries to show, e.g. rdma_cni")
    p.add_argument("--cmd", dest="cmds", choices=("ADD", "DEL"), action="append",
                   help="profile only this command (repeatable; default both)")
    p.add_argument("--busy", type=int, default=0,
                   help="attachments made on the node first (not profiled; pods and store "
                        "removed with the rest)")
    return lab.node_main(p, "rcp", __file__, inner)


if __name__ == "__main__":
    sys.exit(main())
