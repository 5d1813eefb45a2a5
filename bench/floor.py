"""The physical floor on this machine, measured in the same run: an exec of a static
C ``true`` (the least any exec'd plugin costs) and one netlink round trip (the least
one kernel request costs), so the table shows how close each figure is to the limit."""

from __future__ import annotations

import os
import socket
import statistics
import struct
import subprocess
import time
from typing import Any

RTM_GETLINK, NLM_F_REQUEST = 18, 1


def static_true(tmp: str) -> str | None:
    """Build a static ``true`` with the system's gcc (None when there is none)."""
    src, out = os.path.join(tmp, "true.c"), os.path.join(tmp, "true-static")
    with open(src, "w") as f:
        f.write("int main(void) { return 0; }\n")
    try:
        subprocess.run(["gcc", "-O2", "-static", "-s", "-o", out, src], check=True,
                       capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return out


def exec_ms(argv: list[str], n: int) -> dict[str, float]:
    """Median wall and CPU (user+sys) ms of ``n`` execs, each reaped with wait4."""
    walls, cpus = [], []
    for _ in range(n):
        start = time.perf_counter_ns()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        _, _, usage = os.wait4(proc.pid, 0)
        proc.returncode = 0
        walls.append((time.perf_counter_ns() - start) / 1e6)
        cpus.append((usage.ru_utime + usage.ru_stime) * 1e3)
    return {"wall_ms": round(statistics.median(walls), 3),
            "cpu_ms": round(statistics.median(cpus), 3), "n": n}


def netlink_rtt_ms(n: int) -> dict[str, float]:
    """Median of ``n`` RTM_GETLINK requests for ``lo`` (index 1) on one socket."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    sock.bind((0, 0))
    times = []
    try:
        for seq in range(n):
            ifinfo = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 1, 0, 0)
            msg = struct.pack("=IHHII", 16 + len(ifinfo), RTM_GETLINK, NLM_F_REQUEST, seq,
                              0) + ifinfo
            start = time.perf_counter_ns()
            sock.send(msg)
            sock.recv(65536)
            times.append((time.perf_counter_ns() - start) / 1e6)
    finally:
        sock.close()
    return {"rtt_ms": round(statistics.median(times), 4), "n": n}


def measure(tmp: str, n: int = 50) -> dict[str, Any]:
    true = static_true(tmp)
    return {"static_true": exec_ms([true], n) if true else None,
            "netlink": netlink_rtt_ms(n * 20)}
