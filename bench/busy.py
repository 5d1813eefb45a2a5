"""Figure 7's busy node: ``n`` attachments made through the plugin itself, one-interface
ADDs through the front (resident path) into pod netns of their own, as the store and the
node hold them on a node already running ``n`` RDMA pods; then their DELs and the pods'
deletion.

The attachments are spread over the stand-in NICs (attachment ``i`` lists the NICs from
``rdma<i % n_nics>`` on, which is what a kubelet's allocation does on a real node: a /24
per NIC holds 250 addresses). They share the data dir of the measured ADDs.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

import cni
import lab
from cni import Invocation
from sides import RdmaCni, leftover_state, rdma_blocks

#: ADDs (and DELs) sent at once while the node is made busy
BATCH = 8


@dataclass
class Busy:
    pods: list[lab.Pod] = field(default_factory=list)
    invocations: list[Invocation] = field(default_factory=list)
    setup_s: float = 0.0
    teardown_s: float = 0.0


def state_records(data_dir: str) -> int:
    """Attachments in the store of ``data_dir`` (its state records)."""
    path = os.path.join(data_dir, "state", "state")
    return sum(not n.startswith(".") for n in os.listdir(path)) if os.path.isdir(path) else 0


def make(binary: str, socket: str, data_dir: str, pods_api: lab.Pods, n: int,
         n_nics: int) -> Busy:
    """``n`` attachments, ``BATCH`` ADDs at a time; checked: every ADD exits 0 and the
    store holds ``n`` more state records."""
    sys.stderr.write(f"s7: making {n} attachments through the plugin ")
    start, before = time.monotonic(), state_records(data_dir)
    busy = Busy()
    try:
        for first in range(0, n, BATCH):
            pods = pods_api.create(min(BATCH, n - first))
            busy.pods += pods
            invs = [inv for i, pod in enumerate(pods)
                    for inv in RdmaCni(binary, data_dir, n_nics, socket=socket,
                                       first_nic=(first + i) % n_nics)
                    .invocations(pod, rdma_blocks(1))]
            busy.invocations += invs
            cni.run_parallel(invs, "ADD")
            if first % (n // 8 or 1) < BATCH:
                sys.stderr.write(".")
                sys.stderr.flush()
    except BaseException:
        remove(busy, pods_api, data_dir)
        raise
    made = state_records(data_dir) - before
    busy.setup_s = time.monotonic() - start
    sys.stderr.write(f" {busy.setup_s:.1f}s\n")
    if made != n:
        remove(busy, pods_api, data_dir)
        raise RuntimeError(f"s7: {n} ADDs left {made} state records in {data_dir}")
    return busy


def remove(busy: Busy, pods_api: lab.Pods, data_dir: str) -> None:
    """DEL every attachment made (``BATCH`` at a time), delete their pods; checked: no
    state left in ``data_dir``."""
    start = time.monotonic()
    try:
        invs = [inv for inv in busy.invocations if inv.cached is not None]
        for first in range(0, len(invs), BATCH):
            cni.run_parallel(invs[first:first + BATCH], "DEL")
        busy.invocations = []
    finally:
        pods_api.delete(busy.pods)
        busy.pods = []
    busy.teardown_s = time.monotonic() - start
    left = leftover_state(data_dir)
    if left:
        raise RuntimeError(f"s7: state left after the DELs of the busy node: {left[:5]}")
