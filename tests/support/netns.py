"""iproute2 in a network namespace: ``ns`` is a netns name (``ip -n``), a path to one
(``nsenter --net``, e.g. the runtime's /var/run/netns/cni-... or /proc/PID/ns/net), or
None or "" for this process's own."""

from __future__ import annotations

import json
from typing import Any

from support.proc import sh


def _in(ns: str | None, argv: list[str]) -> list[str]:
    if not ns:
        return argv
    if ns.startswith("/"):
        return ["nsenter", f"--net={ns}", *argv]
    return [argv[0], "-n", ns, *argv[1:]]


def ip(ns: str | None, *args: str) -> str:
    """``ip [-n ns] args...``; its stdout (RuntimeError with its stderr when it fails)."""
    return sh(*_in(ns, ["ip", *args]))


def named(prefix: str) -> list[str]:
    """The names of the named network namespaces (``ip netns list``) that start with
    ``prefix``, sorted: what a test or a bench run made and must have removed."""
    return sorted(line.split()[0] for line in sh("ip", "netns", "list").splitlines()
                  if line.startswith(prefix))


def ip_json(ns: str | None, *args: str) -> list[dict[str, Any]]:
    """``ip -j [-n ns] args...`` parsed (an empty list for empty output)."""
    out = sh(*_in(ns, ["ip", "-j", *args])).strip()
    data = json.loads(out) if out else []
    return data if isinstance(data, list) else [data]
