"""The netdev name rule (what the kernel takes as an interface name and the store
takes as a file name): 1-15 of ``[A-Za-z0-9_.-]``, not ``.`` or ``..``. Pure."""

from __future__ import annotations

import re

_NETDEV_RE = re.compile(r"[A-Za-z0-9_.-]{1,15}")


def valid_netdev(name: str) -> bool:
    return bool(_NETDEV_RE.fullmatch(name)) and name not in (".", "..")
