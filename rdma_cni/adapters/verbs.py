"""The only pyverbs importer (optional; Debian's python3-pyverbs). Imported lazily."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from ipaddress import IPv6Address
from typing import Any

# ibv_gid_type_sysfs values returned by Context.query_gid_type
_TYPE_NAMES = {0: "IB/RoCE v1", 1: "RoCE v2"}


def _pyverbs() -> Any:
    import pyverbs.device as device

    return device


def available() -> bool:
    try:
        _pyverbs()
    except ImportError:
        return False
    return True


def rc_available() -> str | None:
    """None when pyverbs has every module an RC queue pair needs, else what is missing."""
    import importlib

    for name in ("device", "pd", "cq", "mr", "qp", "addr", "wr", "enums"):
        try:
            importlib.import_module(f"pyverbs.{name}")
        except ImportError as exc:
            return f"pyverbs.{name}: {exc}"
    return None


def query_gid(ibdev: str, port: int, index: int) -> tuple[str, str | None]:
    """(GID, type name) of one slot, read through libibverbs."""
    device = _pyverbs()
    ctx = device.Context(name=ibdev)
    try:
        gid = str(ctx.query_gid(port, index).gid)
        try:
            gtype: str | None = _TYPE_NAMES.get(int(ctx.query_gid_type(port, index)))
        except (AttributeError, TypeError, ValueError):
            gtype = None
        return gid, gtype
    finally:
        close = getattr(ctx, "close", None)
        if close is not None:
            close()


def check_gid(ibdev: str, port: int, index: int, gid: str, gid_type: str) -> str | None:
    """None when libibverbs agrees with sysfs, else the disagreement."""
    try:
        vgid, vtype = query_gid(ibdev, port, index)
    except Exception as e:
        return f"{ibdev}:{port} index {index}: query failed: {e}"
    if IPv6Address(vgid) != IPv6Address(gid):
        return f"{ibdev}:{port} index {index}: sysfs has {gid}, verbs {vgid}"
    if vtype is not None and vtype != gid_type:
        return f"{ibdev}:{port} index {index}: sysfs type {gid_type}, verbs {vtype}"
    return None


# --- an RC queue pair for `rdma-cni verify` -------------------------------------------
# rxe treats retry_cnt 7 as "retry forever": 6 is the most that still ends.
RETRY_CNT, RNR_RETRY, QP_TIMEOUT = 6, 6, 17  # timeout: 4.096 us * 2^17 = 0.5 s a try
MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
WC_SUCCESS = 0
WC_RECV = 128  # IBV_WC_RECV: every receive opcode has this bit
WC_STATUS = {1: "(local length error)", 2: "(local QP operation error)",
             4: "(local protection error)", 5: "(flushed)", 9: "(remote invalid request)",
             10: "(remote access error)", 11: "(remote operation error)",
             12: "(transport retry counter exceeded)", 13: "(RNR retry counter exceeded)"}


class VerbsError(Exception):
    """A verbs call or a work completion failed (the message names which)."""


class RcEndpoint:
    """One side of an RC queue pair on ``ibdev:port`` with source GID ``gid_index``:
    a memory region of ``2 * size`` bytes (the first half receives SENDs and RDMA
    WRITEs, the second is the send buffer)."""

    def __init__(self, ibdev: str, port: int, gid_index: int, size: int) -> None:
        import pyverbs.enums as e
        from pyverbs.cq import CQ
        from pyverbs.device import Context
        from pyverbs.mr import MR
        from pyverbs.pd import PD
        from pyverbs.qp import QP, QPCap, QPInitAttr

        self.e, self.port, self.gid_index, self.size = e, port, gid_index, size
        self.ctx = Context(name=ibdev)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64)
        access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
                  | e.IBV_ACCESS_REMOTE_READ)
        self.mr = MR(self.pd, 2 * size, access)
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                                         cap=cap, sq_sig_all=1))
        self.active_mtu = int(self.ctx.query_port(port).active_mtu)
        self.seen: dict[str, list[int]] = {}

    def local(self) -> dict[str, Any]:
        """What the peer needs to connect (exchanged out of band)."""
        import random

        self.psn = random.randrange(1 << 24)
        gid = str(self.ctx.query_gid(self.port, self.gid_index).gid)
        return {"qpn": self.qp.qp_num, "psn": self.psn, "gid": gid, "rkey": self.mr.rkey,
                "addr": self.mr.buf, "mtu": self.active_mtu}

    def connect(self, remote: dict[str, Any]) -> None:
        """RESET -> INIT -> RTR -> RTS towards ``remote`` (its :meth:`local`)."""
        from pyverbs.addr import GID, AHAttr, GlobalRoute
        from pyverbs.qp import QPAttr

        e = self.e
        gr = GlobalRoute(dgid=GID(remote["gid"]), sgid_index=self.gid_index, hop_limit=64)
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, cur_qp_state=e.IBV_QPS_RESET)
        attr.qp_access_flags = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
                                | e.IBV_ACCESS_REMOTE_READ)
        attr.port_num, attr.pkey_index = self.port, 0
        attr.path_mtu = min(self.active_mtu, int(remote["mtu"]))
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = remote["qpn"], remote["psn"], self.psn
        attr.max_dest_rd_atomic, attr.max_rd_atomic, attr.min_rnr_timer = 1, 1, 12
        attr.ah_attr = AHAttr(gr=gr, is_global=1, port_num=self.port)
        attr.timeout, attr.retry_cnt, attr.rnr_retry = QP_TIMEOUT, RETRY_CNT, RNR_RETRY
        try:
            self.qp.to_rts(attr)
        except Exception as exc:  # pyverbs raises its own error types
            raise VerbsError(f"failed to bring the queue pair to RTS: {exc}") from exc

    def post_recv(self, wr_id: int = 0) -> None:
        from pyverbs.wr import SGE, RecvWR

        sge = SGE(self.mr.buf, self.size, self.mr.lkey)
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[sge]))

    def post_send(self, data: bytes, remote: dict[str, Any] | None = None) -> None:
        """SEND ``data`` (or RDMA WRITE it to ``remote``'s receive half)."""
        from pyverbs.wr import SGE, SendWR

        e = self.e
        self.mr.write(data, len(data), self.size)
        sge = SGE(self.mr.buf + self.size, len(data), self.mr.lkey)
        opcode = e.IBV_WR_SEND if remote is None else e.IBV_WR_RDMA_WRITE
        wr = SendWR(opcode=opcode, num_sge=1, sg=[sge])
        if remote is not None:
            wr.set_wr_rdma(int(remote["rkey"]), int(remote["addr"]))
        self.qp.post_send(wr)

    def await_kind(self, kind: str, deadline: float,
                   stop: Callable[[], bool] | None = None) -> int:
        """The next work completion of ``kind`` ("send": SEND or RDMA WRITE; "recv");
        its byte count. Completions of the other kind are kept for later. Raises on an
        error status, past ``deadline``, or once ``stop()`` says to give up."""
        import time

        while not self.seen.get(kind):
            if stop is not None and stop():
                raise VerbsError(f"gave up waiting for a {kind} work completion")
            n, wcs = self.cq.poll()
            if n:
                wc = wcs[0]
                if wc.status != WC_SUCCESS:
                    name = WC_STATUS.get(int(wc.status), "")
                    raise VerbsError(f"work completion failed: status {wc.status} {name}"
                                       .rstrip())
                got = "recv" if int(wc.opcode) & WC_RECV else "send"
                self.seen.setdefault(got, []).append(int(wc.byte_len))
            elif time.monotonic() > deadline:
                raise VerbsError(f"no {kind} work completion before the deadline")
            else:
                time.sleep(0.0002)
        return self.seen[kind].pop(0)

    def received(self, length: int) -> bytes:
        return bytes(self.mr.read(length, 0))

    def close(self) -> None:
        for obj in (self.qp, self.mr, self.cq, self.pd, self.ctx):
            with contextlib.suppress(Exception):
                obj.close()
