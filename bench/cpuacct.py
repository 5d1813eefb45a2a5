"""CPU time of a process tree with nanosecond resolution, every thread counted, ended
ones too: a control group of its own, read through the kernel's own accounting.

``/proc/PID/stat`` counts in clock ticks (10 ms here), so a daemon's few milliseconds per
request read as zero most of the time; ``/proc/PID/task/*/schedstat`` has nanoseconds but
forgets a thread once it ends (``serve`` gives each request a thread). A control group's
``cpuacct.usage`` (cgroup v1) or ``cpu.stat`` ``usage_usec`` (v2) counts every task that
was ever in it, in ns (us on v2). Without a usable hierarchy (no root, no controller) the
caller falls back to ``/proc`` and says so.
"""

from __future__ import annotations

import contextlib
import os

V1 = "/sys/fs/cgroup/cpuacct"
V2 = "/sys/fs/cgroup"


class CpuGroup:
    """A control group made for one process tree; :meth:`seconds` is its CPU so far."""

    def __init__(self, name: str) -> None:
        if os.path.isfile(os.path.join(V1, "cpuacct.usage")):
            self.path, self.v2 = os.path.join(V1, name), False
        elif os.path.isfile(os.path.join(V2, "cgroup.controllers")):
            self.path, self.v2 = os.path.join(V2, name), True
        else:
            raise OSError("no cgroup CPU accounting here (cgroup v1 cpuacct or v2)")
        os.makedirs(self.path, exist_ok=True)

    def add(self, pid: int) -> None:
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def seconds(self) -> float:
        if not self.v2:
            with open(os.path.join(self.path, "cpuacct.usage")) as f:
                return int(f.read()) / 1e9
        with open(os.path.join(self.path, "cpu.stat")) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        raise OSError(f"no usage_usec in {self.path}/cpu.stat")

    def remove(self) -> None:
        """Move whatever is left to the parent, then remove the group."""
        parent = os.path.dirname(self.path)
        with contextlib.suppress(OSError):
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                left = f.read().split()
            for pid in left:
                with contextlib.suppress(OSError), \
                        open(os.path.join(parent, "cgroup.procs"), "w") as out:
                    out.write(pid)
            os.rmdir(self.path)
