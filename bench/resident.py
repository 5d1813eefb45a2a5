"""The resident rdma-cni process (``rdma-cni serve``), started by the benchmark
inside the node netns and ended by its PID.

The exec'd binary forwards ADD/CHECK/DEL to it when the config's
``residentSocket`` names a socket that answers (``""`` keeps it in-process).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass


def supported(binary: str) -> bool:
    """Whether this build of the binary has the ``serve`` subcommand."""
    try:
        proc = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "serve" in proc.stdout


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    socket: str
    log_file: str

    @classmethod
    def start(cls, binary: str, socket: str, log_file: str, timeout: float = 30.0) -> Daemon:
        with open(log_file + ".out", "wb") as out:
            proc = subprocess.Popen([binary, "serve", "--socket", socket, "--log-file", log_file],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd="/")
        daemon = cls(proc, socket, log_file)
        deadline = time.monotonic() + timeout
        while not os.path.exists(socket):
            if proc.poll() is not None or time.monotonic() > deadline:
                daemon.stop()
                raise RuntimeError(f"rdma-cni serve did not come up on {socket} "
                                   f"(exit {proc.returncode}); see {log_file}.out")
            time.sleep(0.02)
        return daemon

    def pids(self) -> list[int]:
        """The daemon and its worker processes (``serve --workers``)."""
        out = [self.proc.pid]
        try:
            for task in os.listdir(f"/proc/{self.proc.pid}/task"):
                with open(f"/proc/{self.proc.pid}/task/{task}/children") as f:
                    out += [int(x) for x in f.read().split()]
        except OSError:
            pass
        return out

    def memory_kib(self) -> dict[str, int]:
        """VmHWM (peak) and VmRSS of the daemon, from /proc; ``workers``: how many
        processes serve, ``VmRSS_max``: the largest of them (each holds the plugin)."""
        out: dict[str, int] = {}
        pids = self.pids()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        key, _, value = line.partition(":")
                        if key in ("VmHWM", "VmRSS"):
                            kib = int(value.split()[0])
                            out[key] = max(out.get(key, 0), kib)
            except OSError:
                continue
        out["workers"] = len(pids)
        return out

    def cpu_s(self) -> float:
        """The daemon's user+system CPU seconds so far (all its threads and workers)."""
        total = 0.0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
