"""The one-interface ADD run in this process through the same ``dispatch.run`` call
`rdma-cni serve` makes, each on a fresh pod of the node netns (bench/lab.py), then its DEL
and the pod's removal: the loop `bench/pause.py` and `bench/ab.py` time. Run inside the
node netns (a tool's ``inner``, :func:`lab.node_main`)."""

from __future__ import annotations

import cProfile
import io
import json
import os
import time
from collections.abc import Callable

import lab
from sides import RdmaCni, rdma_blocks


def pause(seconds: float, spin: bool) -> None:
    """Wait ``seconds``: asleep, or running a loop on this thread (``spin``)."""
    if not spin:
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def pauses_of(text: str) -> list[float] | None:
    """A comma-separated list of pauses in ms (None: not one, or one below 0)."""
    try:
        pauses = [float(x) for x in text.split(",")]
    except ValueError:
        return None
    return pauses if min(pauses) >= 0 else None


def preload() -> None:
    """What `serve` imports before its first request."""
    from rdma_cni.resident import main

    for name in main.PRELOAD:
        __import__(name)


class Adds:
    """The pods and the plugin's config of a run (its store under ``tmp``)."""

    def __init__(self, tmp: str, prefix: str) -> None:
        from rdma_cni.cni import dispatch

        self._dispatch = dispatch  # its run looked up at each call (a variant may wrap it)
        self.side = RdmaCni("rdma-cni", os.path.join(tmp, "data"), lab.N_NICS, socket="")
        self.pods = lab.Pods(lab.Names(prefix))

    def close(self) -> None:
        self.pods.close()

    def once(self, before: Callable[[], None] | None = None,
             profile: cProfile.Profile | None = None) -> tuple[int, int]:
        """One ADD on a fresh pod (``before`` run just before it, untimed; ``profile``
        enabled around it only), then its DEL: the ADD's thread CPU and wall, ns."""
        pod = self.pods.create(1)[0]
        try:
            (inv,) = self.side.invocations(pod, rdma_blocks(1))
            if before is not None:
                before()
            out, err = io.StringIO(), io.StringIO()
            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
            if profile is not None:
                profile.enable()
            rc = self._dispatch.run(inv.environ("ADD"), inv.stdin("ADD"), out, err)
            if profile is not None:
                profile.disable()
            c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
            if rc != 0:
                raise RuntimeError(f"ADD failed: {out.getvalue()} {err.getvalue()}")
            inv.cached = json.loads(out.getvalue())
            if self._dispatch.run(inv.environ("DEL"), inv.stdin("DEL"), io.StringIO(),
                                  io.StringIO()) != 0:
                raise RuntimeError("DEL failed")
        finally:
            self.pods.delete([pod])
        return c1 - c0, w1 - w0
