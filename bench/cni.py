"""Run CNI plugins the way libcni does, timing each exec.

An :class:`Invocation` is one plugin entry applied to one attachment (container ID,
netns, ifname). ADD sends its config (with the primary's ``prevResult`` when
chained); DEL sends the same config with the cached ADD result as ``prevResult``
(libcni, cniVersion >= 0.4.0). Each exec is reaped with ``wait4`` so its own
user+system CPU time and peak RSS (including the children it reaped: host-local
under macvlan) are measured, without ``ip netns exec`` or a shell in between.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: bench/measure-exec.c built by :func:`use_measurer` (None: spawn directly)
MEASURER: str | None = None
#: the compiler :data:`MEASURER` was built with
MEASURER_CC: str | None = None
#: every process started here, so an interrupted run can end them (by PID)
RUNNING: dict[int, subprocess.Popen[bytes]] = {}
#: :func:`run_parallel`'s way: every exec of a batch started, held at a gate, then let go
#: at once ("gated"), or each let go as it is started, one after the other ("serial")
SPAWN = "gated"
#: when a gated batch's execs are collected: "after" the last measurer has exited (the
#: driver sleeps through the batch; before 2026-12-06 it read each exec as it ended)
COLLECT = "after"


@dataclass
class Exec:
    rc: int
    out: bytes
    err: str
    wall_ns: int
    cpu_s: float
    maxrss_kib: int
    #: CLOCK_MONOTONIC ns at which the measurer reaped it (None without the measurer)
    end_ns: int | None = None


@dataclass
class Invocation:
    argv: list[str]
    conf: dict[str, Any]
    container_id: str
    netns: str
    ifname: str
    cni_args: str
    cni_path: str
    env: dict[str, str] = field(default_factory=dict)
    cached: dict[str, Any] | None = None

    def environ(self, command: str) -> dict[str, str]:
        return {"PATH": PATH, "CNI_COMMAND": command, "CNI_CONTAINERID": self.container_id,
                "CNI_NETNS": self.netns, "CNI_IFNAME": self.ifname, "CNI_ARGS": self.cni_args,
                "CNI_PATH": self.cni_path, **self.env}

    def stdin(self, command: str) -> bytes:
        conf = copy.copy(self.conf)
        if command == "DEL":
            if self.cached is not None:
                conf["prevResult"] = self.cached
            else:
                conf.pop("prevResult", None)
        return json.dumps(conf).encode()


def use_measurer(tmp: str) -> str | None:
    """Build bench/measure-exec.c (static) so each exec's wall time and peak RSS are its
    own; without a C compiler the plugins are spawned directly (peak RSS then counts the
    driver). Against musl where musl-gcc is there (scripts/setup.sh installs it for the
    front): a static glibc process's start costs 0.6 ms of CPU on a VM that traps CPUID
    (bench/README.md, "Figure 4's batch begins at a gate": the measurer against musl),
    counted in both sides' CPU column."""
    global MEASURER, MEASURER_CC
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "measure-exec.c")
    out = os.path.join(tmp, "measure-exec")
    for cc in ("musl-gcc", "gcc"):
        try:
            subprocess.run([cc, "-O2", "-static", "-s", "-o", out, src], check=True,
                           capture_output=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            continue
        MEASURER, MEASURER_CC = out, cc
        return out
    return None


class _Running:
    """One exec started; with ``gate`` (the read end of a pipe, :func:`run_parallel`), the
    measurer waits for the pipe's end-of-file before it starts the plugin, holds ``done``
    (the write end of another) until it exits, and the plugin's stdin and stdout are files
    (a pipe's buffer could not take a large config before it reads, nor a large result
    before the driver reads it, which it does only after the batch)."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], stdin: bytes,
                 gate: int | None = None, done: int | None = None) -> None:
        self.errfile: BinaryIO = tempfile.TemporaryFile()  # noqa: SIM115 (closed in finish)
        self.outfile: BinaryIO | None = None
        self.report: str | None = None
        gated = (gate, done) if gate is not None and done is not None else ()
        if MEASURER is not None:
            fd, self.report = tempfile.mkstemp(prefix="measure.")
            os.close(fd)
            flags = ("-g", str(gate), "-d", str(done)) if gated else ()
            argv = [MEASURER, *flags, self.report, *argv]
        feed: int | BinaryIO = subprocess.PIPE
        out: int | BinaryIO = subprocess.PIPE
        if gated:
            feed = tempfile.TemporaryFile()  # noqa: SIM115 (closed below, once inherited)
            feed.write(stdin)
            feed.seek(0)
            out = self.outfile = tempfile.TemporaryFile()  # noqa: SIM115 (closed in finish)
        self.start = time.perf_counter_ns()
        try:
            self.proc = subprocess.Popen(list(argv), stdin=feed, stdout=out,
                                         stderr=self.errfile, env=env, cwd="/",
                                         pass_fds=gated)
        finally:
            if not isinstance(feed, int):
                feed.close()
        RUNNING[self.proc.pid] = self.proc
        if self.proc.stdin is not None:
            self.proc.stdin.write(stdin)
            self.proc.stdin.close()

    def finish(self) -> Exec:
        out = self._output()
        _, status, usage = os.wait4(self.proc.pid, 0)
        end = time.perf_counter_ns()
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        RUNNING.pop(self.proc.pid, None)
        self.errfile.seek(0)
        err = self.errfile.read().decode(errors="replace")
        self.errfile.close()
        wall, rss, reaped = end - self.start, usage.ru_maxrss, None
        if self.report is not None:
            with open(self.report) as f:
                fields = f.read().split()
            os.unlink(self.report)
            if len(fields) == 4:
                wall, rss, reaped = int(fields[1]), int(fields[2]), int(fields[3])
        return Exec(self.proc.returncode, out, err, wall, usage.ru_utime + usage.ru_stime, rss,
                    reaped)

    def _output(self) -> bytes:
        """The plugin's stdout, whole: read from its pipe until the end, or from its file
        (gated: :func:`_gated` calls this once every measurer has exited)."""
        stream = self.proc.stdout if self.outfile is None else self.outfile
        assert stream is not None
        if self.outfile is not None:
            stream.seek(0)
        try:
            return stream.read()
        finally:
            stream.close()


def run(inv: Invocation, command: str) -> Exec:
    """One exec; on ADD success the result is cached on the invocation."""
    ex = _Running(inv.argv, inv.environ(command), inv.stdin(command)).finish()
    _check(inv, command, ex)
    return ex


def run_parallel(invs: Sequence[Invocation], command: str) -> tuple[int, list[Exec]]:
    """All execs at once; returns (wall ns, execs). :data:`SPAWN` "gated" (with the
    measurer): every exec is started and held at a gate first, the wall runs from the
    gate's opening to the last plugin's exit as its measurer saw it; "serial" (or no
    measurer): each starts as it is spawned, the wall runs from the first spawn to the
    last exit as this driver saw it, the driver's own spawning of the batch included."""
    gated = SPAWN != "serial" and MEASURER is not None
    if gated:
        execs, start = _gated(invs, command)
    else:
        start = time.perf_counter_ns()
        running = [_Running(inv.argv, inv.environ(command), inv.stdin(command))
                   for inv in invs]
        execs = [r.finish() for r in running]
        wall = time.perf_counter_ns() - start
    for inv, ex in zip(invs, execs, strict=True):
        _check(inv, command, ex)
    if gated:
        ends = [ex.end_ns for ex in execs if ex.end_ns is not None]
        if len(ends) != len(execs):
            raise RuntimeError(f"{command}: a measurer of the batch wrote no report")
        wall = max(ends) - start
    return wall, execs


def _gated(invs: Sequence[Invocation], command: str) -> tuple[list[Exec], int]:
    """The batch's execs and the CLOCK_MONOTONIC ns its gate opened at. The driver sleeps
    through the batch: it collects the execs once every measurer has exited (the end-of-
    file of the ``done`` pipe they hold), so it takes no CPU from the plugins meanwhile."""
    gate, opener = os.pipe()
    finished, done = os.pipe()
    running: list[_Running] = []
    try:
        try:
            for inv in invs:
                running.append(_Running(inv.argv, inv.environ(command), inv.stdin(command),
                                        gate=gate, done=done))
        finally:
            os.close(gate)
            os.close(done)
            start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            os.close(opener)  # every measurer reads end-of-file: the batch begins
        while os.read(finished, 64):
            pass  # nothing is written: end-of-file when the last measurer has exited
    finally:
        os.close(finished)
    return [r.finish() for r in running], start


def _check(inv: Invocation, command: str, ex: Exec) -> None:
    if ex.rc != 0:
        raise RuntimeError(f"{command} {inv.argv[0]} ifname={inv.ifname} netns={inv.netns} "
                           f"failed ({ex.rc}): {ex.out.decode(errors='replace')} {ex.err}")
    if command == "ADD":
        inv.cached = json.loads(ex.out)


def end_all() -> None:
    """End the processes this module started that are still running (by PID)."""
    for pid, proc in list(RUNNING.items()):
        if proc.poll() is None:
            os.kill(pid, signal.SIGKILL)
            proc.wait()
        RUNNING.pop(pid, None)
