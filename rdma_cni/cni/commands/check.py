"""CHECK: our interfaces (the devices themselves, not look-alikes), addresses, rules,
routes and reservations exist as recorded (:mod:`rdma_cni.datapath.intact`). What other
plugins added is tolerated, but for a route in one of our tables that leads elsewhere."""

from __future__ import annotations

from typing import Any

from rdma_cni.cni.commands.delete import data_dir, recorded
from rdma_cni.cni.request import Request
from rdma_cni.datapath.intact import mismatch
from rdma_cni.datapath.session import Session
from rdma_cni.datapath.teardown import marker_of
from rdma_cni.errors import CheckMismatch, shown
from rdma_cni.store.core import Store
from rdma_cni.vocab.kinds import READY
from rdma_cni.vocab.modes import parse
from rdma_cni.vocab.plan import IfacePlan


def cmd_check(req: Request, blocks: list[tuple[int, Any]]) -> None:
    store = Store(data_dir(req))
    key, state = recorded(store, req.key)
    if state is None:
        if blocks:
            raise CheckMismatch(f"no RDMA attachment recorded for container {req.container_id}")
        return
    if state.status != READY:
        raise CheckMismatch(f"RDMA attachment of {req.container_id} is incomplete")
    owned = {(str(ip), ifname) for _, ip, ifname in store.ips_of(key)}
    session = Session(req.netns, pod_required=True, fd=req.netns_fd)  # the netns first (4)
    try:
        _in_prev_result(req.prev_result, state.interfaces)
        for p in state.interfaces:
            _check_one(session, p, marker_of(key.digest()), state.rule_priority)
            if _reserved(state.mode) and p.address is not None and \
                    (str(p.address.ip), p.name) not in owned:
                raise CheckMismatch(f"address {p.address.ip} of {p.name} is not reserved")
    finally:
        session.close()


def _in_prev_result(prev: dict[str, Any] | None, plans: tuple[IfacePlan, ...]) -> None:
    """The spec: CHECK consults the prevResult for the interfaces and addresses it expects.
    Every interface this network made, and its addresses, must be in it (the runtime's
    cached result of the whole chain); none given: nothing to compare (DESIGN §1)."""
    if prev is None:
        return
    names = {i.get("name") for i in prev.get("interfaces") or [] if isinstance(i, dict)}
    addresses = {ip.get("address") for ip in prev.get("ips") or [] if isinstance(ip, dict)}
    for p in plans:
        if p.name not in names:
            raise CheckMismatch(f"prevResult lacks interface {shown(p.name)}, which this "
                                "network made")
        for addr in p.addresses:
            if str(addr) not in addresses:
                raise CheckMismatch(f"prevResult lacks address {addr} of {shown(p.name)}, "
                                    "which this network gave it")


def _reserved(mode: object) -> bool:
    """The mode's pod addresses are IPAM reservations (a state of unknown mode: checked)."""
    known = parse(mode)
    return known is None or known.traits.pod_ipam


def _check_one(session: Session, p: IfacePlan, marker: str, priority: int) -> None:
    wrong = mismatch(session, p, marker, priority)
    if wrong is not None:
        raise CheckMismatch(wrong)
