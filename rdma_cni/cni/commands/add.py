"""ADD for a pod that asks for RDMA interfaces of this network.

1. validate our blocks, open the namespaces, read host facts, decide NICs;
2. under the store lock: claim NICs (1:1 modes), reserve addresses, save the
   state as pending (so a crash from here on is cleaned by DEL/GC);
3. apply the steps in the pod netns, rolling back on failure;
4. wait (bounded) for the RoCE GIDs, save the state as ready, return the result.

Each ADD tags the state it writes with its own request token: the pending state is
written only when no other request's state is there (and, on the resident path,
only while the client still waits). From then on every step, every undo and the
ready state act only while the record is still this ADD's (checked under the store
lock, :mod:`rdma_cni.cni.commands.owner`); a later ADD or a DEL takes the record
over before it undoes anything, and a rollback undoes only the links this ADD made
(by index in the pod's netns), so a late duplicate never undoes another request's pod.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from ipaddress import IPv4Address
from typing import Any

from rdma_cni.cni import result
from rdma_cni.cni.commands.owner import AddOwner, mine, new_token
from rdma_cni.cni.commands.repeat import repeat, still_wanted
from rdma_cni.cni.request import Request
from rdma_cni.datapath.execute import apply, rollback, steps_for
from rdma_cni.datapath.plan import plan_interfaces, with_address
from rdma_cni.datapath.session import Session
from rdma_cni.datapath.tables import choose_tables
from rdma_cni.datapath.teardown import marker_of
from rdma_cni.errors import ConfigError, NicUnavailable, TryAgain, shown
from rdma_cni.ipam.allocator import build_pool
from rdma_cni.ipam.reserve import allocate
from rdma_cni.models.blocks import validate_blocks
from rdma_cni.models.netconf import NetConf
from rdma_cni.node import nics as nic_select
from rdma_cni.node.allocation import AllocationAnswer, PodRef, assign, kubelet_sources, lookup
from rdma_cni.node.hostinfo import nic_facts
from rdma_cni.node.origin import origin_of
from rdma_cni.node.pools import ranges_of
from rdma_cni.store.boot import BootMark
from rdma_cni.store.core import Store
from rdma_cni.store.files import Identity
from rdma_cni.store.records import claim_plan
from rdma_cni.store.state import AttachmentState, make_state
from rdma_cni.vocab.kinds import PENDING, READY
from rdma_cni.vocab.plan import IfacePlan, NicFacts

log = logging.getLogger("rdma_cni")
#: this ADD's state with a status, its plans and its result (see ``_states``)
StateOf = Callable[[str, list[IfacePlan], dict[str, Any] | None], AttachmentState]
KUBELET_TIMEOUT = 3.0


def cmd_add(req: Request, raw_blocks: list[tuple[int, Any]]) -> dict[str, Any]:
    nc = req.netconf
    blocks = validate_blocks(raw_blocks)
    if nc.mode.traits.one_block and len(blocks) != 1:
        raise ConfigError(
            f"pod annotation k8s.volcengine.com/pod-networks has {len(blocks)} blocks for "
            f"network {shown(nc.cniConfName)}: {nc.mode} mode allows exactly one"
        )
    store = Store(nc.dataDir)
    session = Session(req.netns, pod_required=True, fd=req.netns_fd)
    token = new_token()
    try:
        again = repeat(req, store, session, token)
        if again is not None:
            return again
        assert session.host is not None
        rdma = nic_select.rdma_nics(nc, session.host)
        n_ifaces = len(blocks)
        answer = _allocation(req, nc)
        busy: set[str] = set()
        if nc.mode.traits.claims_nic:  # NICs serving other pods: read under the lock
            with store.lock():
                busy = set(store.nic_claims())
        names = assign(nc.mode, rdma.named, answer.ids, n_ifaces, resolve=rdma.resolve,
                       pod=req.args.pod, resource=nc.resource, busy=busy)
        facts, host_addrs = nic_facts(session.host, names, rdma.by_netdev(names),
                                      whole=not nc.mode.traits.pod_ipam)
        plans = plan_interfaces(nc, blocks, [facts[n] for n in names], req.key.digest())
        plans = nic_select.rdma_netns(nc, plans)
        plans = _free_tables(session, nc, plans)
        state = _states(req, nc, token)
        plans, pending = _reserve(req, nc, store, plans, facts, host_addrs, state)
        return _apply(req, nc, store, session, plans, token, state, pending)
    finally:
        session.close()


def _states(req: Request, nc: NetConf, token: str) -> StateOf:
    """The states this ADD writes (pending, then ready): only the status, the plans, the
    result and when it was made differ (the agent gives a ready record of the last
    minutes the time the runtime takes to list its sandbox), the netns's origin is read
    once."""
    origin = origin_of(req.netns, req.netns_fd)

    def state(status: str, plans: list[IfacePlan],
              ours: dict[str, Any] | None) -> AttachmentState:
        return make_state(status, nc.mode, req.netns, req.args.pod, req.args.pod_uid,
                          nc.routing.rulePriority, plans, ours, origin=origin,
                          conf_name=nc.cniConfName, request=token, written=BootMark.now())
    return state


def _free_tables(session: Session, nc: NetConf, plans: list[IfacePlan]) -> list[IfacePlan]:
    """Tables nothing in the pod uses yet (another RDMA network may be attached)."""
    pod = session.pod
    assert pod is not None
    ruled = {table for _, table, _ in pod.rules()}
    return choose_tables(plans, nc.routing.tableBase, ruled, lambda t: bool(pod.routes(t)))


def _allocation(req: Request, nc: NetConf) -> AllocationAnswer:
    if nc.allocation == "config":
        return lookup(allocation="config")
    pod = PodRef(req.args.pod_namespace, req.args.pod_name, req.args.pod_uid)
    api, ckpt = kubelet_sources(pod, nc.resource,
                                pod_resources_socket=nc.kubelet.podResourcesSocket,
                                checkpoint_file=nc.kubelet.checkpointFile,
                                timeout=KUBELET_TIMEOUT)
    answer = lookup(allocation="auto", device_id=nc.device_id,
                    pod_resources=api, checkpoint=ckpt)
    if answer.ids is None:
        log.info("no kubelet allocation source on this node: NICs taken from config order; "
                 "GPU/NIC NUMA alignment is not guaranteed")
    return answer


def _first_owner(req: Request, store: Store) -> None:
    """Under the lock: only one request at a time builds an attachment."""
    still_wanted(req)
    if store.get_state(req.key) is not None:
        raise TryAgain(f"another ADD of {req.container_id} ({req.ifname}) got there first; "
                       "retry")


def _reserve(req: Request, nc: NetConf, store: Store, plans: list[IfacePlan],
             facts: dict[str, NicFacts], host_addrs: set[IPv4Address],
             state: StateOf) -> tuple[list[IfacePlan], Identity | None]:
    """Claim NICs and reserve addresses (none of the host's ``host_addrs``), then save the
    pending state (all under the lock); the plans with their addresses, and the pending
    record's file identity."""
    key = req.key
    ranges = ranges_of(nc)
    out: list[IfacePlan] = []
    pools = {}
    try:
        if nc.mode.traits.pod_ipam:  # the pools, and each reservation's record, before the lock
            for p in plans:
                f = facts[p.nic]
                pool = pools[p.k] = build_pool(p.nic, f.addresses, f.gateway, host_addrs,
                                               ranges, True, f.gateways)
                store.prepare_ip(pool.name, key, p.name)
        with store.lock():
            _first_owner(req, store)
            try:
                for p in plans:
                    if nc.mode.traits.claims_nic and \
                            not store.claim_nic(p.nic, key, p.name, claim_plan(p)):
                        owner = store.nic_owner(p.nic)
                        who = owner[0].container_id[:12] if owner else "another pod"
                        raise NicUnavailable(f"RDMA NIC {p.nic} is serving another pod ({who})")
                    if nc.mode.traits.pod_ipam:
                        pool = pools[p.k]
                        ip = allocate(store, pool, key, p.name, p.requested_ip)
                        p = with_address(p, ip, pool.network.prefixlen)
                    out.append(p)
                pending = store.put_state(key, state(PENDING, out, None))
            except BaseException:
                store.purge(key)
                raise
    finally:
        store.drop_prepared()
    return out, pending


def _apply(req: Request, nc: NetConf, store: Store, session: Session,
           plans: list[IfacePlan], token: str, state: StateOf,
           pending: Identity | None) -> dict[str, Any]:
    digest = req.key.digest()
    ctx = session.ctx(marker_of(digest), nc.routing.rulePriority)
    owner = AddOwner(store, req.key, token, pending, ctx, state(PENDING, plans, None))
    steps = steps_for(plans)
    applied = False
    try:
        apply(ctx, steps, owner)
        applied = True
        nic_select.wait_gids(plans)
        macs = {p.name: ctx.pod.require(p.name).mac for p in plans}
        plans = owner.final_plans()
        ours = result.our_part(plans, macs, req.netns)
        _save_ready(req, store, owner, state(READY, plans, ours))
    except BaseException as exc:  # the ready record's write too: a full disk leaves nothing
        if applied:  # a move's own undo may have left work for DEL (Ctx.undone_clean)
            ctx.undone_clean = rollback(ctx, steps, owner) and ctx.undone_clean
        clean = ctx.undone_clean
        _undo(req, store, token, clean, exc)
        raise
    return result.append(req.prev_result, ours)


def _save_ready(req: Request, store: Store, owner: AddOwner, ready_state: AttachmentState
                ) -> None:
    """Written before the record's lock, put in place under it (the store lock is not
    needed: what would take the attachment away takes the record's lock too)."""
    ready: str | None = store.prepare_state(req.key, ready_state)
    try:
        with store.record_lock(req.key) as held:
            if not owner.still_mine(held):
                raise TryAgain(f"ADD of {req.container_id} was replaced by a later ADD meanwhile")
            assert ready is not None
            store.commit_state(req.key, ready)
            ready = None
    finally:
        if ready is not None:
            store.discard(ready)


def _undo(req: Request, store: Store, token: str, clean: bool, exc: BaseException) -> None:
    """After the executor's rollback (of this request's own links only): release the
    attachment's record, reservations and claims, unless another request owns it now
    or the rollback left something for DEL (which finds it by the record)."""
    with store.lock():
        if mine(store, req.key, token) is None:
            log.warning("ADD of %s failed (%s); the attachment is another request's now: "
                        "left as it is", req.container_id, exc)
            return
        if not clean:
            log.error("ADD of %s failed (%s) and its rollback left work for DEL: the "
                      "state is kept", req.container_id, exc)
            return
        store.purge(req.key)
    log.info("ADD of %s rolled back after: %s", req.container_id, exc)
