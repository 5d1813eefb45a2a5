"""Helpers of the hardening suites: raw plugin runs, whole-state fingerprints,
store-consistency oracles and the figures every suite reports.

Reuses :mod:`cnirunner` (Node, Pod, snapshots); adds what the hostile-input,
crash, concurrency and fuzz suites need beyond it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cnirunner
from cnirunner import ip_json, snapshot
from support.cnijson import STRICT
from support.netns import named as netns_named
from support.proc import plugin_env

#: figures per suite, printed by conftest's pytest_terminal_summary
FIGURES: dict[str, dict[str, float]] = defaultdict(dict)


def bump(suite: str, name: str, amount: float = 1) -> None:
    FIGURES[suite][name] = FIGURES[suite].get(name, 0) + amount


def put(suite: str, name: str, value: float) -> None:
    FIGURES[suite][name] = value


# --- raw runs ---------------------------------------------------------------------
@dataclass(frozen=True)
class RawRun:
    rc: int
    stdout: str
    stderr: str

    @property
    def docs(self) -> list[Any]:
        """Every JSON document on stdout (a valid run has at most one), read as strictly
        as Go's encoding/json (libcni) reads it: ``NaN`` and ``Infinity`` are no JSON."""
        dec, text, out, pos = STRICT, self.stdout.strip(), [], 0
        while pos < len(text):
            doc, end = dec.raw_decode(text, pos)
            out.append(doc)
            pos = end
            while pos < len(text) and text[pos].isspace():
                pos += 1
        return out


def run_raw(argv: Sequence[str], env: Mapping[str, str], stdin: bytes,
            node_ns: str | None = None, timeout: float = 60) -> RawRun:
    """Exec the plugin with exactly ``env`` (plus PATH) and ``stdin`` bytes."""
    full = ["ip", "netns", "exec", node_ns, *argv] if node_ns else list(argv)
    environ = plugin_env(**env)
    proc = subprocess.run(full, input=stdin, env=environ, capture_output=True,
                          timeout=timeout, cwd="/")
    return RawRun(proc.returncode, proc.stdout.decode(errors="replace"),
                  proc.stderr.decode(errors="replace"))


# --- fingerprints -------------------------------------------------------------------
def tree_hash(root: Path, exclude: Iterable[Path] = ()) -> dict[str, str]:
    """relative path -> sha256 of every file (and '<dir>' of every directory) under root."""
    skip = {p.resolve() for p in exclude}
    out: dict[str, str] = {}
    if not root.exists():
        return out
    for path in sorted(root.rglob("*")):
        if path.resolve() in skip:
            continue
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        elif path.is_dir():
            out[rel] = "<dir>"
        else:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def fingerprint(node_ns: str, pods: Sequence[str], prefix: str, root: Path,
                exclude: Iterable[Path] = ()) -> dict[str, Any]:
    """Everything a hostile input must leave as it was."""
    return {
        "node": snapshot(node_ns),
        "pods": {p: snapshot(p) for p in pods},
        "netns": netns_named(prefix),
        "files": tree_hash(root, exclude),
    }


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    return {k: {"before": before[k], "after": after[k]}
            for k in before if before[k] != after[k]}


# --- store oracles ---------------------------------------------------------------
def store_records(data_dir: Path) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """(state records, [(ip, reservation record)]) read straight from the files."""
    states = [json.loads(p.read_text()) for p in sorted((data_dir / "state").glob("*.json"))]
    files = [*(data_dir / "addrs").glob("*"), *(data_dir / "ips").rglob("*")]
    ips = [(p.name, json.loads(p.read_text())) for p in sorted(files)
           if p.is_file() and not p.name.startswith(".tmp-")]
    return states, ips


def store_problems(data_dir: Path, link_exists: Any) -> list[str]:
    """Consistency of the store: every reservation has a state holding that address,
    every state's interfaces exist (``link_exists(netns, ifname, marker_digest)``)."""
    from rdma_cni.vocab.attachment import AttachmentKey

    states, ips = store_records(data_dir)
    by_key = {json.dumps(s["key"], sort_keys=True): s for s in states}
    problems = []
    for ip, rec in ips:
        state = by_key.get(json.dumps(rec["key"], sort_keys=True))
        if state is None:
            problems.append(f"reservation {ip} has no state ({rec['key']})")
            continue
        held = {(a.split("/")[0], i["name"]) for i in state["interfaces"]
                for a in i.get("addresses", [])}
        if (ip, rec["ifname"]) not in held:
            problems.append(f"reservation {ip} {rec['ifname']} not in its state")
    for s in states:
        digest = AttachmentKey.from_dict(s["key"]).digest()
        for iface in s["interfaces"]:
            if not link_exists(s["netns"], iface["name"], digest):
                problems.append(f"state {s['key']['containerID']}: {iface['name']} missing")
    return problems


def pod_link_exists(netns_path: str, ifname: str, digest: str) -> bool:
    name = os.path.basename(netns_path)
    try:
        links = ip_json(name, "link", "show", "dev", ifname)
    except RuntimeError:
        return False
    return bool(links) and links[0].get("ifalias") == f"rdma-cni:{digest}"


def pod_ipv4(ns: str) -> list[tuple[str, str]]:
    """(ifname, address) of every global IPv4 address in ``ns`` except eth0's."""
    return [(lk["ifname"], a["local"]) for lk in ip_json(ns, "-4", "addr", "show")
            for a in lk.get("addr_info", []) if lk["ifname"] not in ("lo", "eth0")]


def plugin_conf(mode: str, devices: Sequence[str], tmp: Path, **extra: Any) -> dict[str, Any]:
    """Our conflist entry for the hardening suites: :func:`cnirunner.plugin_conf`'s, run
    in-process (no resident server), its log and metrics in a directory of their own
    outside the data dir, no kubelet sources unless given."""
    ours: dict[str, Any] = {
        "logFile": str(tmp / "log" / "rdma-cni.log"), "metricsFile": str(tmp / "log" / "metrics"),
        "residentSocket": "",
        "kubelet": {"podResourcesSocket": str(tmp / "no-kubelet.sock"),
                    "checkpointFile": str(tmp / "no-checkpoint"),
                    "devicePluginDir": str(tmp / "no-dp")}}
    return cnirunner.plugin_conf(mode, devices, tmp, **{**ours, **extra})


def checkpoint(entries: Mapping[str, Sequence[str]],
               resource: str = "vke.volcengine.com/rdma") -> str:
    """A kubelet_internal_checkpoint: pod UID -> device IDs (NUMA node 0)."""
    return json.dumps({"Data": {"PodDeviceEntries": [
        {"PodUID": uid, "ContainerName": "c", "ResourceName": resource,
         "DeviceIDs": {"0": list(ids)}} for uid, ids in entries.items()],
        "RegisteredDevices": {}}, "Checksum": 0})
