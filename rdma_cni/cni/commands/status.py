"""STATUS: fails (code 50) only when the config cannot be read or the data dir
is unusable. NIC health belongs to doctor, metrics and the device plugin."""

from __future__ import annotations

from rdma_cni.cni.request import Request
from rdma_cni.errors import CniError, StatusError
from rdma_cni.store.core import Store


def cmd_status(req: Request) -> None:
    try:
        nc = req.netconf
        Store(nc.dataDir).usable()
    except CniError as exc:
        raise StatusError(f"rdma-cni is not available: {exc.msg}") from None
