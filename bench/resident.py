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

from cpuacct import CpuGroup


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
    #: the daemon's control group: its CPU in ns, every thread and worker, ended ones too
    group: CpuGroup | None = None

    @classmethod
    def start(cls, binary: str, socket: str, log_file: str, timeout: float = 30.0) -> Daemon:
        try:
            group: CpuGroup | None = CpuGroup(f"rdma-cni-bench-{os.getpid()}")
        except OSError:
            group = None
        with open(log_file + ".out", "wb") as out:
            proc = subprocess.Popen([binary, "serve", "--socket", socket, "--log-file", log_file],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd="/",
                                    preexec_fn=(lambda: group.add(os.getpid())) if group
                                    else None)
        daemon = cls(proc, socket, log_file, group)
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
        """The daemon's memory, every process it runs summed (``serve --workers``): VmRSS
        and VmHWM (each process's peak) summed, the proportional set size (shared pages
        counted once, ``Pss`` of smaps_rollup) summed, and the largest single VmRSS;
        ``workers``: how many processes serve."""
        out = {"VmRSS": 0, "VmHWM": 0, "Pss": 0, "VmRSS_max": 0}
        pids = self.pids()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/status") as f:
                    status = dict(line.split(":", 1) for line in f if ":" in line)
                with open(f"/proc/{pid}/smaps_rollup") as f:
                    rollup = dict(line.split(":", 1) for line in f if ":" in line)
            except OSError:
                continue
            rss = int(status["VmRSS"].split()[0])
            out["VmRSS"] += rss
            out["VmHWM"] += int(status["VmHWM"].split()[0])
            out["Pss"] += int(rollup.get("Pss", "0 kB").split()[0])
            out["VmRSS_max"] = max(out["VmRSS_max"], rss)
        out["workers"] = len(pids)
        return out

    def cpu_s(self) -> float:
        """The daemon's CPU seconds so far: every thread and worker it ever ran, in ns
        (its control group); without one, /proc's live processes in clock ticks."""
        if self.group is not None:
            return self.group.seconds()
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
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.group is not None:
            self.group.remove()
