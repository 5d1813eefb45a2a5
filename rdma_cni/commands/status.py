"""STATUS: fails (code 50) only when the config cannot be read or the data dir
is unusable. NIC health belongs to doctor, metrics and the device plugin."""

from __future__ import annotations

from ..errors import CniError, StatusError
from ..request import Request
from ..store import Store


def cmd_status(req: Request) -> None:
    try:
        nc = req.netconf
        Store(nc.dataDir).usable()
    except CniError as exc:
        raise StatusError(f"rdma-cni is not available: {exc.msg}") from None
