"""The benchmark counts the resident server's CPU in a control group of its own, in ns,
though it runs inside a node netns, where `ip netns exec` hides /sys/fs/cgroup
(bench/cpuacct.py mounts the hierarchy in that mount namespace alone)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.root
BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPT = """
import os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from cpuacct import CpuGroup
g = CpuGroup("t")
busy = subprocess.Popen([sys.executable, "-c", "import time\\nt = time.process_time()\\n"
                         "while time.process_time() - t < 0.03: pass"],
                        preexec_fn=lambda: g.add(os.getpid()))
busy.wait()
print(g.mount is not None, round(g.seconds() * 1e9))
mount = g.mount
g.remove()
print(g.mount, os.path.exists(mount))
"""


def _mounts() -> int:
    return len(Path("/proc/self/mountinfo").read_text().splitlines())


def test_the_servers_cpu_is_counted_in_ns_inside_a_node_netns() -> None:
    name = f"rcb-cg-{uuid.uuid4().hex[:8]}"
    before = _mounts()
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        out = subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c", SCRIPT,
                              str(BENCH)], capture_output=True, text=True, check=True).stdout
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    first, second = out.splitlines()
    mounted, ns = first.split()
    assert mounted == "True"
    # a process's 30 ms (and its start), not clock ticks of 4 or 10 ms
    assert 30_000_000 <= int(ns) < 2_000_000_000 and int(ns) % 1_000_000 != 0
    assert second == "None False"  # unmounted and its directory removed
    assert _mounts() == before  # nothing was mounted in this (the host's) namespace
    assert not [d for d in os.listdir("/tmp") if d.startswith("rdma-cni-bench-cgroup.")]
