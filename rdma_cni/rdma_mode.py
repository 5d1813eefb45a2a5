"""The RDMA subsystem netns mode (``rdma system``: shared or exclusive), DESIGN §2.

``read_netns_mode`` asks iproute2's ``rdma system show -j``. It returns None
when the mode cannot be read (no ``rdma`` tool, or a kernel without the RDMA
subsystem: "Failed to open NETLINK_RDMA socket"): callers decide what unknown
means (the CNI proceeds, ``doctor`` warns).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence

from rdma_cni.errors import NicUnavailable

SHARED_MODES = ("shared", "shared-multi", "shared-host")
Runner = Callable[[Sequence[str]], str | None]


def _run(cmd: Sequence[str]) -> str | None:
    try:
        res = subprocess.run(list(cmd), capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout if res.returncode == 0 else None


def parse_system_show(text: str) -> str | None:
    """The netns mode from ``rdma -j system show`` (or its plain text form)."""
    try:
        doc = json.loads(text)
    except ValueError:
        words = text.split()
        if "netns" in words[:-1]:
            mode = words[words.index("netns") + 1]
            return mode if mode in ("shared", "exclusive") else None
        return None
    items = doc if isinstance(doc, list) else [doc]
    for item in items:
        if isinstance(item, dict) and item.get("netns") in ("shared", "exclusive"):
            return str(item["netns"])
    return None


def read_netns_mode(run: Runner = _run) -> str | None:
    """ "shared" | "exclusive", or None when unknown."""
    out = run(["rdma", "-j", "system", "show"])
    if out is None:
        out = run(["rdma", "system", "show"])
    return parse_system_show(out) if out else None


def check_mode(node_mode: str, netns_mode: str | None) -> None:
    """Refuse a shared node mode under the exclusive RDMA netns mode (error 104)."""
    if node_mode in SHARED_MODES and netns_mode == "exclusive":
        raise NicUnavailable(
            f"failed to use RDMA in mode {node_mode}: the RDMA subsystem netns mode is "
            "exclusive, shared modes need it shared (rdma system set netns shared, at boot)"
        )
