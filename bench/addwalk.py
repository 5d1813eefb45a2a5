#!/usr/bin/env python3
"""ADD's walk through the package: the files of ``rdma_cni/`` one in-process ADD passes
through, from ``cli.plugin_main`` to its last netlink call, in the order it enters them.

    sudo .venv/bin/python bench/addwalk.py [--ifaces 1] [--list]

A throwaway node netns with the stand-in NICs (bench/lab.py); one ADD first (imports,
caches), then the traced one-interface ADD on a fresh pod (shared-multi, no resident
server). Two counts: the *calls* (each function of ``rdma_cni`` entered from another file,
counted the first time, in order: the walk as a reader follows it in the source) and the
*transitions* (each time the innermost ``rdma_cni`` frame changes file, calls and
returns). In either, a *return* is a stop in a file the walk had already left. Prints
stops, distinct files, returns and stops per package;
``--list`` prints the walk itself (the calls). Everything made here is deleted at the end.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import lab  # noqa: E402
from sides import RdmaCni, rdma_blocks  # noqa: E402

PKG = str(ROOT / "rdma_cni") + os.sep


def _ours(frame: FrameType | None) -> FrameType | None:
    while frame is not None and not frame.f_code.co_filename.startswith(PKG):
        frame = frame.f_back
    return frame


class Walk:
    """Two records of one request. ``stops``: the file of the innermost ``rdma_cni``
    frame each time it changes (every call and return). ``calls``: the walk as read in
    the source, each function of ours entered from another file, the first time only
    (``file:function``)."""

    def __init__(self) -> None:
        self.stops: list[str] = []
        self.calls: list[str] = []
        self._seen: set[Any] = set()

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event not in ("call", "return"):
            return
        if event == "call" and frame.f_code.co_filename.startswith(PKG):
            caller = _ours(frame.f_back)
            code = frame.f_code
            if (caller is None or caller.f_code.co_filename != code.co_filename) \
                    and code not in self._seen:
                self._seen.add(code)
                self.calls.append(f"{code.co_filename[len(PKG):]}:{code.co_name}")
        here = _ours(frame.f_back if event == "return" else frame)
        if here is None:
            return
        name = here.f_code.co_filename[len(PKG):]
        if not self.stops or self.stops[-1] != name:
            self.stops.append(name)


def summary(stops: list[str]) -> dict[str, Any]:
    seen: set[str] = set()
    returns = 0
    for i, name in enumerate(stops):
        if name in seen and i and stops[i - 1] != name:
            returns += 1
        seen.add(name)
    packages = Counter(n.split(os.sep)[0] if os.sep in n else "(top)" for n in stops)
    return {"stops": len(stops), "files": len(seen), "returns": returns,
            "by_package": dict(packages.most_common())}


def _run(inv: Any, command: str, walk: Walk | None) -> str:
    from rdma_cni import cli

    env = inv.environ(command)
    saved = dict(os.environ), sys.stdin, sys.stdout
    os.environ.clear()
    os.environ.update(env)
    sys.stdin = io.TextIOWrapper(io.BytesIO(inv.stdin(command)))
    sys.stdout = out = io.StringIO()
    try:
        if walk:
            sys.setprofile(walk)
        rc = cli.plugin_main()
    finally:
        sys.setprofile(None)
        os.environ.clear()
        os.environ.update(saved[0])
        sys.stdin, sys.stdout = saved[1], saved[2]
    if rc != 0:
        raise RuntimeError(f"{command} failed: {out.getvalue()}")
    return out.getvalue()


def inner(args: argparse.Namespace) -> int:
    import json

    names = lab.Names(args.prefix)
    pods_api = lab.Pods(names)
    side = RdmaCni("rdma-cni", os.path.join(args.tmp, "data"), lab.N_NICS, socket="")
    walk = Walk()
    try:
        for traced in (None, walk):
            pod = pods_api.create(1)[0]
            (inv,) = side.invocations(pod, rdma_blocks(args.ifaces))
            inv.cached = json.loads(_run(inv, "ADD", traced))
            _run(inv, "DEL", None)
            pods_api.delete([pod])
    finally:
        pods_api.close()
    if args.list:
        print("\n".join(walk.calls))
    print("calls (each function of ours entered from another file, first time):",
          json.dumps(summary([c.split(":")[0] for c in walk.calls])))
    print("transitions (every change of file, calls and returns):",
          json.dumps(summary(walk.stops)))
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ifaces", type=int, default=1)
    p.add_argument("--list", action="store_true", help="print every stop")
    return lab.node_main(p, "rcw", __file__, inner)


if __name__ == "__main__":
    sys.exit(main())
