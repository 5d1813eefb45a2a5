"""``rdma-cni agent --config FILE [--interval S] [--once]``: the node reconciler.

1. Attachments whose sandbox is gone are released through GC's code
   (:func:`rdma_cni.cni.commands.gc.collect`): the field's conflists are cniVersion
   0.4.0, so libcni never sends GC, and a DEL can be lost (runtime crash, node
   reboot). "Gone" needs evidence a wrong view cannot produce (the runtime's own
   sandbox list over its CRI socket, or, with no runtime socket, a propagated
   netns view that no visible process contradicts), on consecutive passes, never
   en masse (:mod:`rdma_cni.kube.agent.view`, :mod:`rdma_cni.kube.agent.plan`). When the view
   looks wrong the agent only reports: a log line, ``viewSuspect`` in its status
   file (the exporter's ``rdma_cni_agent_view_suspect``), an Event on the node.
   State written by another node (a shared ``dataDir``) is never acted on.
   Reservations and claims with no state record at all are purged.
2. Each pod's RDMA interfaces are written to the pod as the annotation
   ``k8s.volcengine.com/network-status`` (through the ``kubernetes`` client;
   skipped with a log line outside a cluster).
3. Pods on this node that asked for RDMA interfaces and have none after their
   sandbox is ready are reported: an Event on the pod, ``podsWithoutRdma`` in the
   status file (``rdma_cni_pods_without_rdma``, ``rdma-cni ls``).
4. An RDMA netns mode the node's mode does not work under is reported from the first
   pass on: an Event on the node, ``netnsMode`` in the status file
   (:mod:`rdma_cni.kube.agent.netnsfit`).

After every pass the status file (:mod:`rdma_cni.store.run.agentstatus`) says when it
completed, for probes.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rdma_cni.adapters.cri import CriClient, CriUnavailable
from rdma_cni.confdefaults import DEFAULTS
from rdma_cni.kube.agent import netnsfit
from rdma_cni.kube.agent.kubeapi import (
    STATUS_ANNOTATION,
    ClusterApi,
    KubeCluster,
    KubePodApi,
    PodApi,
    Reporter,
    publish,
    status_payloads,
)
from rdma_cni.kube.agent.plan import PassPlan, plan_pass
from rdma_cni.kube.agent.podreport import without_rdma
from rdma_cni.kube.agent.view import (
    Evidence,
    held_netns,
    netns_dirs,
    propagation,
    read_mountinfo,
    runtime_dir,
)
from rdma_cni.models.subconfig import in_cluster
from rdma_cni.store.boot import this_boot
from rdma_cni.store.core import Store
from rdma_cni.store.run import agentstatus
from rdma_cni.store.state import AttachmentState
from rdma_cni.vocab.attachment import AttachmentKey

log = logging.getLogger("rdma_cni.kube.agent.reconciler")
__all__ = ["STATUS_ANNOTATION", "Agent", "KubePodApi", "PodApi", "gather", "publish",
           "reconcile", "run_once", "status_payloads"]
MAX_REASONS = 20


def gather(states: Sequence[AttachmentState], cri: CriClient | None,
           proc: str = "/proc", mountinfo: str | None = None) -> Evidence:
    """This pass's evidence: the runtime's sandboxes, held netns, propagated netns dirs."""
    sandboxes, error, present, down = None, "", False, False
    if cri is not None and os.path.exists(cri.socket):
        present = True
        try:
            sandboxes = cri.sandboxes()
        except CriUnavailable as e:
            error, down = e.msg, True
        if sandboxes == {} and states:
            # A node always runs some sandbox (this DaemonSet's own pod): an empty list
            # next to our attachments is a wrong or fresh runtime socket, not evidence.
            sandboxes, error = None, (f"the runtime at {cri.socket} lists no sandbox at all "
                                      "(the wrong runtime socket?)")
    info = read_mountinfo() if mountinfo is None else mountinfo
    sound, unsound = set(), {}
    for d in netns_dirs(states):
        why = propagation(os.path.realpath(d), info) or runtime_dir(d, states)
        if why:
            unsound[d] = why
        else:
            sound.add(d)
    held, partial = held_netns(proc)
    return Evidence(sandboxes=sandboxes, runtime_error=error, runtime_present=present,
                    runtime_down=down, held=held, held_partial=partial,
                    sound_dirs=frozenset(sound), unsound_dirs=unsound)


def _confirmed_gone(cri: CriClient | None, key: AttachmentKey, plan: PassPlan) -> bool:
    """With a runtime, it must say NOT_FOUND for this very sandbox before a release."""
    if cri is None or not plan.needs_confirm:
        return True
    try:
        state = cri.sandbox_state(key.container_id)
    except CriUnavailable as e:
        plan.reasons.append(e.msg)
        return False
    if state is not None:
        plan.reasons.append(f"{key.container_id[:12]}: missing from the runtime's list but "
                            f"its status says {state}")
        return False
    return True


def reconcile(store: Store, ev: Evidence, node: str | set[str],
              marks: dict[str, dict[str, float]],
              now: float, interval: float, cri: CriClient | None = None,
              boot: str | None = None) -> tuple[PassPlan, list[AttachmentKey]]:
    """Release what is gone by this pass's evidence, and stateless leftovers (``now``:
    CLOCK_BOOTTIME of the boot ``boot``, default this one)."""
    from rdma_cni.cni.commands.gc import collect

    plan = plan_pass(store.list_states(), ev, node, marks, now, interval,
                     boot=this_boot() if boot is None else boot)
    released = []
    for key in plan.release:
        if not _confirmed_gone(cri, key, plan):
            continue
        log.info("releasing %s/%s: its sandbox is gone", key.network, key.container_id)
        collect(store, key, {node} if isinstance(node, str) else set(node))
        if store.get_state(key) is None:
            released.append(key)
            plan.marks.pop(key.digest(), None)
    with store.lock():
        with_state = {s.key for s in store.list_states()}
        for key in sorted(store.owners() - with_state):
            log.info("purging reservations of %s/%s: no state record",
                     key.network, key.container_id)
            store.purge(key)
            released.append(key)
    return plan, released


@dataclass
class Agent:
    """One node's reconciler: its store, evidence sources, reporting and status file."""

    store: Store
    conf_name: str = DEFAULTS["cniConfName"]
    status_path: str = agentstatus.DEFAULT_PATH
    node: str = ""  # identity recorded in state at ADD (:func:`node_identity`)
    node_name: str = ""  # the Kubernetes node name
    interval: float = 30.0
    cri: CriClient | None = None
    pods: PodApi | None = None
    cluster: ClusterApi | None = None
    proc: str = "/proc"
    mountinfo: str | None = None  # None: read /proc/self/mountinfo each pass
    marks: dict[str, dict[str, float]] = field(default_factory=dict)
    missing_since: dict[str, float] = field(default_factory=dict)
    reporter: Reporter = field(default_factory=lambda: Reporter(None))
    runtime: str = ""  # the runtime's name and version, once its CRI socket answered
    mode: str = ""  # the node's RDMA mode (the config's, rendered from the node label)
    netns_mode: Callable[[], str | None] | None = None  # None: the netns mode is not checked
    netns: dict[str, Any] | None = None  # the last pass's netnsfit record


def _runtime(agent: Agent) -> dict[str, str] | None:
    """Which runtime the agent's evidence comes from (asked until it answers once)."""
    if agent.cri is None:
        return None
    if not agent.runtime and os.path.exists(agent.cri.socket):
        try:
            agent.runtime = agent.cri.version()
            log.info("the runtime at %s is %s", agent.cri.socket, agent.runtime)
        except CriUnavailable:
            pass  # gather() reports it
    return {"socket": agent.cri.socket, "version": agent.runtime}


def _report_missing(agent: Agent, now: float) -> list[dict[str, Any]]:
    """Pods that asked for RDMA and have none: Events, and the status file's entries."""
    if agent.cluster is None:
        return []
    try:
        pods = agent.cluster.node_pods(agent.node_name)
    except Exception as e:  # API errors must not stop the reconciler
        log.warning("failed to list the pods of node %s: %s", agent.node_name, e)
        return []
    out = []
    since = {}
    for pod, asked in without_rdma(pods, agent.store.list_states(), agent.conf_name):
        first = since[pod.uid or pod.ref] = agent.missing_since.get(pod.uid or pod.ref, now)
        msg = (f"pod {pod.ref} asked for {asked} RDMA interface(s) of network "
               f"{agent.conf_name!r} and has none: its sandbox started without rdma-cni "
               "(was the rdma-cni entry missing from the CNI config?); recreate the pod")
        if agent.reporter.report({"kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                                  "uid": pod.uid}, "RdmaInterfacesMissing", msg):
            log.warning("%s", msg)
        out.append({"pod": pod.ref, "uid": pod.uid, "blocks": asked, "since": first})
    agent.missing_since = since
    return out


def _report_view(agent: Agent, reasons: list[str]) -> None:
    for why in reasons[:MAX_REASONS]:
        log.warning("view suspect, nothing released for it: %s", why)
    if reasons and agent.node_name:
        agent.reporter.report({"kind": "Node", "name": agent.node_name, "uid": agent.node_name},
                              "RdmaCniViewSuspect", "rdma-cni agent released nothing it "
                              "could not prove gone: " + "; ".join(reasons[:3]))


def run_once(agent: Agent, now: float | None = None, clock: float | None = None
             ) -> dict[str, Any]:
    """One pass; returns (and writes) the status document. ``now`` is the wall clock
    (what the document shows); ``clock`` times the marks (default CLOCK_BOOTTIME, or
    ``now`` when a test gives that alone): a wall clock set forward made a pending record
    of an ADD still running look old enough to release after two passes."""
    if clock is None:
        clock = time.clock_gettime(time.CLOCK_BOOTTIME) if now is None else now
    now = time.time() if now is None else now
    ev = gather(agent.store.list_states(), agent.cri, agent.proc, agent.mountinfo)
    names = {agent.node, agent.node_name} - {""}
    plan, released = reconcile(agent.store, ev, names, agent.marks, clock,
                               agent.interval, agent.cri)
    agent.marks = plan.marks
    reasons = list(plan.reasons)
    if ev.runtime_error and not any(ev.runtime_error in r for r in reasons):
        reasons.insert(0, ev.runtime_error)
    if released:
        log.info("released %d stale attachment(s)", len(released))
    if agent.pods is not None:
        publish(agent.store.list_states(), agent.pods, names, ev.sandboxes)
    missing = _report_missing(agent, now)
    _report_view(agent, reasons)
    if agent.netns_mode is not None:
        agent.netns = netnsfit.check(agent.reporter, agent.node_name, agent.mode,
                                     agent.netns_mode, agent.netns)
    doc = {"lastPass": now, "interval": agent.interval, "node": agent.node,
           "runtime": _runtime(agent), "runtimeDown": ev.runtime_down,
           "viewSuspect": bool(reasons),
           "reasons": reasons[:MAX_REASONS],
           "released": len(released), "foreignRecords": plan.foreign,
           "podsWithoutRdma": missing, "marks": agent.marks, "boot": this_boot(),
           "netnsMode": agent.netns,
           "eventsSent": agent.reporter.recent()}
    if agent.status_path:
        try:
            agentstatus.write(agent.status_path, doc)
        except OSError as e:
            log.warning("failed to write the status file %s: %s", agent.status_path, e)
    return doc


def connect_kube(agent: Agent) -> None:
    if not in_cluster():
        log.info("not in a cluster (no KUBERNETES_SERVICE_HOST): pod annotations, pod "
                 "reports and Events skipped")
        return
    try:
        api = KubePodApi()
    except Exception as e:
        log.warning("pod annotations skipped: %s", e)
        return
    agent.pods = api
    agent.cluster = KubeCluster(api.api)
    agent.reporter = Reporter(agent.cluster)
