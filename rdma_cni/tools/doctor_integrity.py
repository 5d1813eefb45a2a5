"""``doctor`` checks of what node integrity depends on, beyond the NICs:

- ``/var/run/netns`` must reach this process with shared or slave mount propagation.
  The runtime bind-mounts each pod's netns there; under private propagation (a
  DaemonSet volume without ``mountPropagation: HostToContainer``) the netns created
  after the container started are invisible, so the agent would take live pods for
  gone and free their addresses and NICs.
- One data dir for every rdma-cni network of the node: a reservation is exclusive only
  within its ``dataDir`` (a file per address, a claim per NIC), so two networks with data
  dirs of their own can give one address to two pods, or one NIC to two pods, where
  their NICs share a subnet. Networks sharing one are kept apart by their keys (GC and
  the agent act on their own network's records only).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rdma_cni.errors import ConfigError
from rdma_cni.models.subconfig import PLUGIN_TYPE, read_json_object
from rdma_cni.regfile import read_regular
from rdma_cni.tools.conflist import conf_files

#: the largest mountinfo read (a node with thousands of pods' mounts: a few MiB)
MAX_MOUNTINFO = 64 << 20


@dataclass(frozen=True)
class Mount:
    point: str
    propagation: str  # shared | slave | shared+slave | private
    fstype: str = ""


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal ``\\ooo``."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of ``/proc/self/mountinfo`` (proc(5)), in mount order."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 7 or "-" not in fields[6:]:
            continue
        end = fields.index("-", 6)
        optional = fields[6:end]
        kinds = [k for k in ("shared", "master") if any(o.startswith(k + ":") for o in optional)]
        propagation = "+".join("slave" if k == "master" else k for k in kinds) or "private"
        fstype = fields[end + 1] if end + 1 < len(fields) else ""
        out.append(Mount(_unescape(fields[4]), propagation, fstype))
    return out


def mount_of(path: str, mounts: Iterable[Mount]) -> Mount | None:
    """The mount ``path`` lies on: the last (topmost) of the longest matching points."""
    best: Mount | None = None
    for m in mounts:
        inside = path == m.point or path.startswith(m.point.rstrip("/") + "/")
        if inside and (best is None or len(m.point) >= len(best.point)):
            best = m
    return best


def netns_propagation(netns_dir: str, mountinfo: str) -> tuple[str, str, str]:
    """(status, detail, fix) of the check ``netns-propagation``."""
    fix = ("mount it with propagation from the host: in the DaemonSet, "
           "`mountPropagation: HostToContainer` on the /var/run/netns volume")
    if not os.path.isdir(netns_dir):
        return "warn", f"{netns_dir} does not exist yet (no pod netns on this node)", ""
    try:  # never waits: a FIFO in its place (a test's, a hand's) is refused at once
        raw = read_regular(mountinfo, MAX_MOUNTINFO, follow=True)
    except OSError as e:
        return "warn", f"cannot read {mountinfo}: {e.strerror or e}", ""
    if len(raw) > MAX_MOUNTINFO:
        return "warn", f"cannot read {mountinfo}: larger than {MAX_MOUNTINFO >> 20} MiB", ""
    mounts = parse_mountinfo(raw.decode("utf-8", "replace"))
    real = os.path.realpath(netns_dir)
    m = mount_of(real, mounts)
    if m is None:
        return "warn", f"no mount found for {real} in {mountinfo}", ""
    where = "mounted" if m.point == real else f"on the mount {m.point}"
    if m.propagation == "private":
        return ("fail", f"{netns_dir} is {where} with private propagation: pod netns "
                "created after start stay invisible here (the agent would free live pods)",
                fix)
    return "ok", f"{netns_dir} is {where} with {m.propagation} propagation", ""


def _entries(path: str) -> list[dict[str, Any]]:
    """The rdma-cni entries of one CNI config file ([] when unreadable: `conflist` reports
    it), read as the plugin reads it (a FIFO put in its place is refused at once)."""
    try:
        doc = read_json_object(path)
    except ConfigError:
        return []
    plugins = doc.get("plugins")
    if not isinstance(plugins, list):
        plugins = [doc]  # a single-plugin .conf
    name = doc.get("name")
    return [{**p, "name": p.get("name") or name} for p in plugins
            if isinstance(p, dict) and p.get("type") == PLUGIN_TYPE]


def data_dirs(conf_dir: str, default: str) -> list[str]:
    """One line per data dir the rdma-cni networks of ``conf_dir`` use (one is right)."""
    users: dict[str, list[str]] = {}
    for path in conf_files(conf_dir):  # as libcni lists them
        name = os.path.basename(path)
        if not os.path.isfile(path):
            continue
        for entry in _entries(path):
            data = entry.get("dataDir") or default
            users.setdefault(str(data), []).append(f"{entry.get('name') or '(unnamed)'} in {name}")
    return [f"{d} is used by {', '.join(who)}" for d, who in users.items()]
