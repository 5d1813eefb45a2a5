"""The agent's status file: what its last pass saw, for probes, ``ls`` and the exporter.

Written atomically after every pass (default :data:`DEFAULT_PATH`)::

    {"schema": 1, "lastPass": <unix time>, "interval": 30.0, "node": "<identity>",
     "viewSuspect": false, "reasons": ["..."], "released": 0, "foreignRecords": 0,
     "podsWithoutRdma": [{"pod": "ns/name", "uid": "...", "blocks": 1, "since": <t>}],
     "netnsMode": {"mode": "<node mode>", "netnsMode": "<rdma system netns>" | null,
                   "needs": ["..."], "mismatch": false},
     "marks": {"<state digest>": {"first": <t>, "passes": 1}}}

``marks`` carries the gone-on-consecutive-passes bookkeeping across restarts
(and across ``--once`` runs). Readers treat a missing or unreadable file as
"no agent has run" (None).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any

from rdma_cni import defaults
from rdma_cni.store.run import runfile

DEFAULT_PATH = defaults.AGENT_STATUS
SCHEMA = 1
_MAX = 4 << 20


def read(path: str) -> dict[str, Any] | None:
    raw = runfile.read(path, _MAX)  # never waits: a FIFO there is refused
    if raw is None or len(raw) > _MAX:
        return None
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write(path: str, doc: dict[str, Any]) -> None:
    """Replace ``path`` with ``doc`` (temp file + rename); OSError to the caller."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, 0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".agent-status-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({**doc, "schema": SCHEMA}, f, sort_keys=True)
        os.chmod(tmp, 0o600)  # pod names and UIDs: root only, as the plugin's log
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def pods_without_rdma(doc: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The status file's ``podsWithoutRdma`` entries (well-formed ones only)."""
    items = (doc or {}).get("podsWithoutRdma")
    out = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("pod"), str):
            out.append(item)
    return out
