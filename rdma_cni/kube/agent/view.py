"""What the agent knows about the node's sandboxes, and whether it can trust it.

The agent runs in a container: its view of ``/var/run/netns`` and of ``/proc``
may be partial (a mount without propagation shows a live netns as a plain file;
without hostPID no pod process is visible). A wrong view must never free a live
pod's address, so the evidence is graded:

- **alive** (any one suffices): the runtime lists the sandbox (CRI
  ``ListPodSandbox``); a visible process holds the netns whose (st_dev, st_ino)
  ADD recorded; the recorded path is a mounted nsfs file with that identity;
- **gone**: the runtime is reachable and does not have the sandbox; or, with no
  runtime socket at all, the recorded path is not a netns in a view that is
  sound and no process holds the recorded netns. A view is sound when the
  netns directory is a propagated mount here *and* is shown to be the runtime's
  (:func:`runtime_dir`): propagation alone does not tell a bind of the runtime's
  directory from a bind of an empty one. "No process holds it" counts only when
  every process of the node was seen (:func:`held_netns`): in a PID namespace of its
  own (a pod without hostPID) the agent sees none of the pods' processes;
- anything else is **unknown**, and the reasons go to the report.

:func:`gather` reads the OS (``/proc``, mountinfo, the CRI socket); everything
else here is pure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rdma_cni.adapters.fsops import dev_ino
from rdma_cni.node.origin import netns_identity as path_identity
from rdma_cni.node.origin import recorded_netns, recorded_netns_dir

if TYPE_CHECKING:
    from rdma_cni.store.state import AttachmentState

ALIVE, GONE, UNKNOWN = "alive", "gone", "unknown"


@dataclass(frozen=True)
class Evidence:
    """One pass's facts. ``sandboxes`` is None when the runtime was not asked or failed."""

    sandboxes: dict[str, str] | None = None
    runtime_error: str = ""  # why the runtime could not be asked ("" if it answered)
    runtime_present: bool = False  # a runtime socket exists
    runtime_down: bool = False  # it exists, and nothing answers there
    held: frozenset[tuple[int, int]] = frozenset()  # netns identities held by visible processes
    held_partial: str = ""  # why ``held`` may miss a process of the node ("": it cannot)
    sound_dirs: frozenset[str] = frozenset()  # netns dirs whose view propagates
    unsound_dirs: dict[str, str] = field(default_factory=dict)  # dir -> why not


@dataclass(frozen=True)
class Verdict:
    kind: str
    why: str


def judge(state: AttachmentState, ev: Evidence,
          ident_of: Callable[[str], tuple[int, int] | None] = path_identity) -> Verdict:
    """Alive, gone or unknown for one attachment record (see the module docstring)."""
    sandbox = state.key.container_id if state.key else ""
    netns = state.netns
    recorded = recorded_netns(state)
    if ev.sandboxes is not None and sandbox in ev.sandboxes:
        return Verdict(ALIVE, "the runtime lists the sandbox")
    if recorded is not None and recorded in ev.held:
        if ev.sandboxes is not None:
            return Verdict(UNKNOWN, "the runtime has no such sandbox, but a process still "
                                    "holds its netns")
        return Verdict(ALIVE, "a process holds the recorded netns")
    seen = ident_of(netns) if netns else None
    if seen is not None and (recorded is None or seen == recorded):
        if ev.sandboxes is not None:
            return Verdict(UNKNOWN, f"the runtime has no such sandbox, but {netns} is its netns")
        return Verdict(ALIVE, f"{netns} is a live netns")
    if ev.sandboxes is not None:
        return Verdict(GONE, "the runtime has no such sandbox")
    return _without_runtime(netns, seen, ev)


def _without_runtime(netns: str, seen: tuple[int, int] | None, ev: Evidence) -> Verdict:
    """No runtime answer: gone only in a sound view (propagated netns dir)."""
    if ev.runtime_present:
        return Verdict(UNKNOWN, f"the runtime could not be asked: {ev.runtime_error}")
    if not netns:
        return Verdict(UNKNOWN, "no netns recorded and no runtime to ask")
    directory = os.path.dirname(netns)
    if netns.startswith("/proc/") or directory not in ev.sound_dirs:
        why = ev.unsound_dirs.get(directory, f"{directory} is not a propagated mount here")
        return Verdict(UNKNOWN, f"{netns} is not a netns in this view, but the view is "
                                f"unsound: {why}")
    if seen is not None:  # a live netns with another identity: the path was reused
        return Verdict(UNKNOWN, f"{netns} is a netns other than the one recorded at ADD")
    if ev.held_partial:
        return Verdict(UNKNOWN, f"{netns} is not a netns here, but a process may still hold "
                                f"it: {ev.held_partial}")
    return Verdict(GONE, f"{netns} is gone (propagated view, no process holds it)")


def runtime_dir(directory: str, states: Sequence[AttachmentState],
                ident_of: Callable[[str], tuple[int, int] | None] = path_identity,
                dir_of: Callable[[str], tuple[int, int] | None] | None = None) -> str:
    """"" when ``directory`` is shown to be the netns directory the runtime uses: it is
    the directory an ADD saw (the same st_dev and st_ino), or a netns an ADD recorded
    there is visible in it with the identity ADD recorded; otherwise why not."""
    dir_of = dir_of or dev_ino
    mine = [s for s in states if s.netns and os.path.dirname(s.netns) == directory]
    here = dir_of(directory)
    if here is not None and any(recorded_netns_dir(s) == here for s in mine):
        return ""
    if any(rec is not None and ident_of(s.netns) == rec
           for s, rec in ((s, recorded_netns(s)) for s in mine)):
        return ""
    return (f"{directory} propagates here, but nothing shows it is the runtime's netns "
            "directory: it is not the directory ADD saw (device and inode), and no netns "
            "an ADD recorded there is visible in it")


def netns_dirs(states: Sequence[AttachmentState]) -> set[str]:
    return {os.path.dirname(s.netns) for s in states
            if s.netns and not s.netns.startswith("/proc/")}


# -- OS facts ------------------------------------------------------------------------
#: the inode of the initial PID namespace (PROC_PID_INIT_INO, include/linux/proc_ns.h:
#: fixed since Linux 3.8, whatever the boot)
PROC_PID_INIT_INO = 0xEFFFFFFC


def all_processes(proc: str = "/proc") -> str:
    """"" when ``proc`` lists every process of the node, else why not.

    ``proc/self`` resolves only for a process that ``proc``'s PID namespace shows, to
    that process's own namespace: when that is the initial one, ``proc`` is a mount of
    the initial namespace (no other shows its processes), which holds every process.
    Comparing with ``proc/1/ns/pid`` would tell nothing (in a pod's own namespace, 1 is
    the pod's first process) and needs ptrace access to it. A node that is itself a
    container (kind) fails the test even with hostPID: its releases then need the runtime."""
    try:
        ino = os.stat(os.path.join(proc, "self", "ns", "pid")).st_ino
    except OSError as e:
        return f"{proc}/self/ns/pid cannot be read ({e.strerror})"
    if ino != PROC_PID_INIT_INO:
        return ("the agent is not in the host's PID namespace (its pod has no hostPID): "
                "it sees none of the pods' processes")
    if not os.path.isdir(os.path.join(proc, "1")):
        return f"{proc} does not show process 1 (mounted with hidepid?)"
    return ""


def held_netns(proc: str = "/proc") -> tuple[frozenset[tuple[int, int]], str]:
    """Identities of the netns of every process visible under ``proc``, and why that may
    miss one ("": it cannot): not the host's PID namespace, or a process whose netns
    could not be read (another's needs CAP_SYS_PTRACE unless it has no capability this
    process lacks). Processes that exit meanwhile are skipped."""
    out = set()
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError as e:
        return frozenset(), f"{proc} cannot be listed ({e.strerror})"
    denied = 0
    for pid in pids:
        try:
            st = os.stat(os.path.join(proc, pid, "ns", "net"))
        except PermissionError:
            denied += 1
            continue
        except OSError:
            continue
        out.add((st.st_dev, st.st_ino))
    why = all_processes(proc)
    if not why and denied:
        why = (f"the netns of {denied} process(es) could not be read (CAP_SYS_PTRACE "
               "reads every process's)")
    return frozenset(out), why


def mount_of(directory: str, mountinfo: str) -> tuple[str, list[str]] | None:
    """(mount point, optional fields) of the mount holding ``directory`` per mountinfo text."""
    best: tuple[str, list[str]] | None = None
    for line in mountinfo.splitlines():
        parts = line.split()
        if len(parts) < 7 or "-" not in parts:
            continue
        point = parts[4].replace("\\040", " ")
        optional = parts[6:parts.index("-")]
        inside = directory == point or directory.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, optional)
    return best


def propagation(directory: str, mountinfo: str) -> str:
    """"" when mounts made by the host under ``directory`` reach this view, else why not."""
    found = mount_of(directory, mountinfo)
    if found is None:
        return f"{directory} is in no mount"
    point, optional = found
    if any(o.startswith(("shared:", "master:")) for o in optional):
        return ""
    return f"the mount {point} holding {directory} has no propagation (private)"


def read_mountinfo(path: str = "/proc/self/mountinfo") -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""
