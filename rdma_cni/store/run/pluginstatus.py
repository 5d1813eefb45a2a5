"""The device plugin's registration status file (``/run/rdma-cni/device-plugin.json``).

The device plugin writes it whenever it registers with the kubelet or starts serving
anew; the exporter reads it for ``rdma_cni_device_plugin_registered``. Registration
is tied to the kubelet socket it was made on (inode and times): a restarted kubelet
recreates ``kubelet.sock`` and forgets every plugin, so an old record no longer counts.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

from rdma_cni import defaults
from rdma_cni.store.run import runfile

DEFAULT_PATH = defaults.DEVICE_PLUGIN_STATUS
Ident = tuple[int, int, int]
_MAX = 1 << 16  # a few hundred bytes are written


def ident(path: str) -> Ident | None:
    """What identifies one incarnation of a socket file: inode, mtime, ctime."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL in the path (a record's field)
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


def write(path: str, resource: str, endpoint: str, registered_on: Ident | None) -> None:
    """Record the state atomically (temp file and rename); never raises."""
    doc = {"resource": resource, "endpoint": endpoint, "registered": registered_on is not None,
           "kubeletSocket": list(registered_on) if registered_on else None, "time": time.time()}
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def read(path: str) -> dict[str, Any] | None:
    raw = runfile.read(path, _MAX)  # never waits: a FIFO there is refused
    if raw is None or len(raw) > _MAX:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:  # UnicodeDecodeError included
        return None
    return doc if isinstance(doc, dict) else None


def registered(doc: dict[str, Any] | None, resource: str, kubelet_socket: str) -> bool:
    """True when ``doc`` records a registration of ``resource`` on the current kubelet."""
    if not doc or doc.get("resource") != resource or doc.get("registered") is not True:
        return False
    now = ident(kubelet_socket)
    recorded = doc.get("kubeletSocket")
    return now is not None and isinstance(recorded, list) and tuple(recorded) == now
