"""CPU time of a process tree with nanosecond resolution, every thread counted, ended
ones too: a control group of its own, read through the kernel's own accounting.

``/proc/PID/stat`` counts in clock ticks (10 ms here), so a daemon's few milliseconds per
request read as zero most of the time; ``/proc/PID/task/*/schedstat`` has nanoseconds but
forgets a thread once it ends (``serve`` gives each request a thread). A control group's
``cpuacct.usage`` (cgroup v1) or ``cpu.stat`` ``usage_usec`` (v2) counts every task that
was ever in it, in ns (us on v2). Without a usable hierarchy (no root, no controller) the
caller falls back to ``/proc`` and says so.

``ip netns exec`` (the benchmark runs inside a node netns) mounts a sysfs of the netns
over ``/sys`` in a mount namespace of its own, which hides ``/sys/fs/cgroup``. There the
group's hierarchy is mounted on a temp directory of that mount namespace (cgroup v1's
cpuacct is the same hierarchy as the host's, v2's the same tree) and unmounted with the
group; never in the host's own mount namespace.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile

V1 = "/sys/fs/cgroup/cpuacct"
V2 = "/sys/fs/cgroup"


class CpuGroup:
    """A control group made for one process tree; :meth:`seconds` is its CPU so far."""

    def __init__(self, name: str) -> None:
        self.mount: str | None = None
        found = _accounting(V1, V2)
        if found is None:
            self.mount = _private_mount()
            found = _accounting(self.mount, self.mount)
        assert found is not None  # _private_mount returns only a hierarchy that has it
        base, self.v2 = found
        self.path = os.path.join(base, name)
        try:
            os.makedirs(self.path, exist_ok=True)
        except OSError:
            self._unmount()
            raise

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
        self._unmount()

    def _unmount(self) -> None:
        if self.mount is None:
            return
        subprocess.run(["umount", self.mount], check=False, capture_output=True)
        with contextlib.suppress(OSError):
            os.rmdir(self.mount)
        self.mount = None


def _accounting(v1: str, v2: str) -> tuple[str, bool] | None:
    """Where groups with CPU accounting are made, and whether it is cgroup v2: cgroup v1's
    cpuacct at ``v1``, else v2 at ``v2``; None when neither is there."""
    if os.path.isfile(os.path.join(v1, "cpuacct.usage")):
        return v1, False
    if os.path.isfile(os.path.join(v2, "cgroup.controllers")):
        return v2, True
    return None


def _private_mount() -> str:
    """A cgroup hierarchy with CPU accounting mounted on a temp directory, in this
    process's own mount namespace only, one its parent (the benchmark's driver, which
    ran ``ip netns exec``) is not in: OSError otherwise, or when none mounts (the
    caller then falls back to ``/proc``)."""
    if os.stat("/proc/self/ns/mnt").st_ino == os.stat(f"/proc/{os.getppid()}/ns/mnt").st_ino:
        raise OSError("no cgroup hierarchy visible, and no mount namespace of our own")
    where = tempfile.mkdtemp(prefix="rdma-cni-bench-cgroup.")
    for argv in (["mount", "-t", "cgroup", "-o", "cpuacct", "none", where],
                 ["mount", "-t", "cgroup2", "none", where]):
        if subprocess.run(argv, check=False, capture_output=True).returncode == 0:
            if _accounting(where, where) is not None:
                return where
            subprocess.run(["umount", where], check=False, capture_output=True)
    os.rmdir(where)
    raise OSError("no cgroup hierarchy with CPU accounting could be mounted")
