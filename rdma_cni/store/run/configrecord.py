"""What the DaemonSet's containers started with, and whether the ConfigMap and the node
label still say the same (the record of ``install --write-config``).

The plugin's entry is rendered once, at the pod's start, from the ConfigMap file
(``--config``, a mounted volume: the kubelet updates it in place when the ConfigMap is
edited) and the node label ``vke.node.rdma.mode``; the agent, ``serve``, the device plugin
and the exporter read that entry at their start and never again. So a change of either
needs the pods restarted (``kubectl rollout restart``), and this record says whether one
is due. ``install --write-config FILE`` writes it next to FILE, as :data:`NAME`::

    {"schema": 1, "started": <unix time>, "configFile": "/etc/rdma-cni/config.json",
     "configSha256": "<hex>", "labelUsed": true, "label": "<value>" | null,
     "mode": "<the mode rendered>", "interval": <s, while a watch checks> | null,
     "checked": <unix time>, "stale": ["<what changed>", ...]}

``install --watch`` (the ``cni-watch`` container) compares the file's digest every
``interval`` seconds and the label (one API read) every :data:`LABEL_EVERY` seconds, and
rewrites ``checked`` and ``stale``. ``doctor`` prints whether a restart is needed; the
exporter publishes ``rdma_cni_config_stale``. A label read that fails changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from rdma_cni import defaults, jsondoc
from rdma_cni.cliargs import say
from rdma_cni.errors import CniError, shown
from rdma_cni.store.atomic import write_atomic
from rdma_cni.store.run import runfile

NAME = os.path.basename(defaults.CONFIG_RECORD)
SCHEMA = 1
LABEL = defaults.MODE_LABEL
#: seconds between two reads of the node label (one GET of the node per node)
LABEL_EVERY = 300.0
_MAX = 1 << 20  # as any config file


def path_for(write_config: str) -> str:
    """Where the record of the entry written to ``write_config`` lives."""
    return os.path.join(os.path.dirname(os.path.abspath(write_config)), NAME)


def digest(path: str) -> str | None:
    """The SHA-256 of the file's bytes; None when it cannot be read."""
    raw = runfile.read(path)  # never waits: a FIFO there is refused
    return None if raw is None else hashlib.sha256(raw).hexdigest()


def started(config_file: str | None, label: str | None, label_used: bool, mode: str,
            interval: float | None, now: float) -> dict[str, Any]:
    """The record of an entry rendered now from ``config_file`` and ``label``."""
    return {"schema": SCHEMA, "started": now, "configFile": config_file,
            "configSha256": digest(config_file) if config_file else None,
            "labelUsed": label_used, "label": label, "mode": mode, "interval": interval,
            "checked": now, "stale": []}


def changes(record: dict[str, Any], config_sha: str | None, label: str | None,
            label_known: bool) -> list[str]:
    """What differs now from what the record started with, one phrase each."""
    out = []
    if record.get("configFile") and config_sha != record.get("configSha256"):
        now = "unreadable" if config_sha is None else f"sha256 {config_sha[:12]}"
        out.append(f"{record['configFile']} (the ConfigMap) changed since the pod started "
                   f"(sha256 {str(record.get('configSha256'))[:12]}, now {now})")
    if record.get("labelUsed") and label_known and label != record.get("label"):
        out.append(f"the node label {LABEL} is {_shown(label)}, the pod started with "
                   f"{_shown(record.get('label'))}")
    return out


def _shown(value: object) -> str:
    return "unset" if value is None else repr(value)


def read(path: str) -> dict[str, Any] | None:
    """The record, or None when there is none or it is not one."""
    raw = runfile.read(path, _MAX)  # never waits: a FIFO there is refused
    return None if raw is None else _record(raw)[0]


def examine(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the record, None); (None, None) when there is no file; else (None, why it is no
    record: not a regular file, unreadable, not JSON, another schema), said by the caller
    (``doctor``: an unreadable record is no absent one)."""
    try:
        raw = runfile.read_bytes(path, _MAX)  # never waits: a FIFO there is refused
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except OSError as e:
        return None, e.strerror or str(e)
    return _record(raw)


def _record(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    try:
        doc = jsondoc.decode(raw, _MAX, dict, "not a JSON object")
    except jsondoc.JsonRefused as e:
        return None, str(e)
    if doc.get("schema") != SCHEMA:
        return None, f"schema {shown(doc.get('schema'))}, not {SCHEMA}"
    return doc, None


def write(path: str, record: dict[str, Any]) -> None:
    """Through a hidden temp file and a rename, then a directory fsync."""
    d, base = os.path.split(path)
    write_atomic(d or ".", base, json.dumps(record, sort_keys=True).encode() + b"\n",
                 mode=0o644, suffix=".part", sync_dir=True)


class Checker:
    """``install --watch``'s comparison of the record with the file and the label."""

    def __init__(self, path: str, label: Callable[[], str | None],
                 clock: Callable[[], float] = time.time,
                 label_every: float = LABEL_EVERY) -> None:
        self.path = path
        self.label = label
        self.clock = clock
        self.label_every = label_every
        self.label_read = float("-inf")
        self.last_label: tuple[bool, str | None] = (False, None)

    def _label(self, now: float) -> tuple[bool, str | None]:
        """(known, value): the label as last read, read again once ``label_every``
        seconds passed."""
        if now - self.label_read >= self.label_every:
            self.label_read = now
            try:
                self.last_label = (True, self.label())
            except CniError as e:
                say(f"failed to read the node label {LABEL}: {e.msg}")
        return self.last_label

    def once(self) -> list[str] | None:
        """Compare and rewrite the record; what is stale (None: there is no record)."""
        record = read(self.path)
        if record is None:
            return None
        now = self.clock()
        known, label = self._label(now) if record.get("labelUsed") else (False, None)
        file = record.get("configFile")
        stale = changes(record, digest(file) if isinstance(file, str) else None, label, known)
        if stale and stale != record.get("stale"):
            say("the running configuration is stale (restart the DaemonSet's pods to apply "
                "it): " + "; ".join(stale))
        write(self.path, {**record, "checked": now, "stale": stale})
        return stale

    def loop(self, interval: float, stop: threading.Event) -> None:
        while not stop.wait(max(interval, 1.0)):
            try:
                self.once()
            except (CniError, OSError) as e:
                say(f"failed to check the configuration record {self.path}: {e}")
