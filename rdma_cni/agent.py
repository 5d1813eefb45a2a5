"""``rdma-cni agent --config FILE [--interval S] [--once]``: the node reconciler.

1. Attachments whose sandbox netns is gone are released through GC's code
   (:func:`rdma_cni.commands.gc.collect`): the field's conflists are cniVersion
   0.4.0, so libcni never sends GC, and a DEL can be lost (runtime crash, node
   reboot). Reservations and claims with no state record at all are purged.
2. Each pod's RDMA interfaces are written to the pod as the annotation
   ``k8s.volcengine.com/network-status`` (through the ``kubernetes`` client;
   skipped with a log line outside a cluster).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .attachment import AttachmentKey
from .errors import CniError
from .store import Store
from .subconfig import DEFAULT_CONF_DIR, core_v1_api, data_dir_of, in_cluster, load_config

log = logging.getLogger("rdma_cni.agent")
STATUS_ANNOTATION = "k8s.volcengine.com/network-status"


def netns_alive(path: str) -> bool:
    """True while ``path`` is a live network namespace (a mounted nsfs file, or a
    /proc/<pid>/ns/net link of a running process)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    try:
        parent = os.stat(os.path.dirname(path) or "/")
    except OSError:
        return True
    return st.st_dev != parent.st_dev or path.startswith("/proc/")


def stale_keys(states: Sequence[dict[str, Any]], alive: Callable[[str], bool]) -> list[
        AttachmentKey]:
    """Keys of attachments whose recorded netns path is no longer a live netns."""
    out = []
    for st in states:
        netns = st.get("netns")
        if isinstance(netns, str) and netns and not alive(netns):
            out.append(AttachmentKey.from_dict(st["key"]))
    return sorted(out)


def reconcile(store: Store, alive: Callable[[str], bool] = netns_alive) -> list[AttachmentKey]:
    """Release stale attachments and stateless leftovers; the keys released."""
    from .commands.gc import collect

    released = []
    for key in stale_keys(store.list_states(), alive):
        log.info("releasing %s/%s: its netns is gone", key.network, key.container_id)
        collect(store, key)
        if store.get_state(key) is None:
            released.append(key)
    with store.lock():
        with_state = {AttachmentKey.from_dict(s["key"]) for s in store.list_states()}
        for key in sorted(store.owners() - with_state):
            log.info("purging reservations of %s/%s: no state record",
                     key.network, key.container_id)
            store.purge(key)
            released.append(key)
    return released


# -- network-status annotation ---------------------------------------------------
def _pod_entries(st: dict[str, Any]) -> list[dict[str, Any]]:
    res = st.get("result") if isinstance(st.get("result"), dict) else {}
    assert isinstance(res, dict)
    res_ifaces = res.get("interfaces") or []
    macs = {i.get("name"): i.get("mac") for i in res_ifaces if isinstance(i, dict)}
    network = str((st.get("key") or {}).get("network") or "")
    out = []
    for iface in st.get("interfaces") or []:
        name = str(iface.get("name") or "")
        out.append({
            "name": network, "interface": name,
            "ips": [str(a).split("/")[0] for a in iface.get("addresses") or []],
            "mac": str(macs.get(name) or iface.get("mac") or ""),
            "nic": str(iface.get("nic") or ""), "mode": str(st.get("mode") or ""),
        })
    return out


def status_payloads(states: Sequence[dict[str, Any]]) -> dict[tuple[str, str, str], str]:
    """(namespace, name, uid) -> annotation value, for every pod with ready attachments."""
    pods: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for st in states:
        pod = str(st.get("pod") or "")
        if st.get("status") != "ready" or "/" not in pod:
            continue
        ns, name = pod.split("/", 1)
        pods.setdefault((ns, name, str(st.get("podUID") or "")), []).extend(_pod_entries(st))
    return {k: json.dumps(sorted(v, key=lambda e: e["interface"]), sort_keys=True)
            for k, v in pods.items() if v}


class PodApi(Protocol):
    def get(self, namespace: str, name: str) -> tuple[str, str | None] | None:
        """(uid, current annotation) or None if the pod is gone."""

    def patch(self, namespace: str, name: str, value: str) -> None: ...


class KubePodApi:
    """:class:`PodApi` over the official client (in-cluster config)."""

    def __init__(self) -> None:
        self.api = core_v1_api()

    def get(self, namespace: str, name: str) -> tuple[str, str | None] | None:
        from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

        try:
            pod = self.api.read_namespaced_pod(name, namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        annotations = pod.metadata.annotations or {}
        return str(pod.metadata.uid or ""), annotations.get(STATUS_ANNOTATION)

    def patch(self, namespace: str, name: str, value: str) -> None:
        body = {"metadata": {"annotations": {STATUS_ANNOTATION: value}}}
        self.api.patch_namespaced_pod(name, namespace, body)


def publish(states: Sequence[dict[str, Any]], api: PodApi) -> int:
    """Patch pods whose annotation differs (same UID only); the number patched."""
    patched = 0
    for (ns, name, uid), value in sorted(status_payloads(states).items()):
        try:
            current = api.get(ns, name)
            if current is None or (uid and current[0] != uid) or current[1] == value:
                continue
            api.patch(ns, name, value)
            patched += 1
        except Exception as e:  # API errors must not stop the reconciler
            log.warning("failed to annotate pod %s/%s: %s", ns, name, e)
    return patched


def run_once(store: Store, api: PodApi | None, alive: Callable[[str], bool]) -> None:
    released = reconcile(store, alive)
    if released:
        log.info("released %d stale attachment(s)", len(released))
    if api is not None:
        publish(store.list_states(), api)


def _pod_api() -> PodApi | None:
    if not in_cluster():
        log.info("not in a cluster (no KUBERNETES_SERVICE_HOST): pod annotations skipped")
        return None
    try:
        return KubePodApi()
    except Exception as e:
        log.warning("pod annotations skipped: %s", e)
        return None


def main(argv: Sequence[str] | None = None, conf_dir: str = DEFAULT_CONF_DIR) -> int:
    from .cliargs import parser

    p = parser("rdma-cni agent", "Node reconciler: frees the state, addresses and NICs of "
               "sandboxes that no longer exist.")
    p.add_argument("--interval", type=float, default=30.0,
                   help="seconds between rounds (default 30)")
    p.add_argument("--once", action="store_true", help="one round, then exit")
    args = p.parse_args(sys.argv[1:] if argv is None else list(argv))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s rdma-cni agent: %(message)s")
    try:
        store = Store(data_dir_of(load_config(args.config, conf_dir)))
    except CniError as e:
        log.error("%s", e.msg)
        return 1
    api = _pod_api()
    while True:
        try:
            run_once(store, api, netns_alive)
        except CniError as e:
            log.error("reconcile failed: %s", e.msg)
            if args.once:
                return 1
        if args.once:
            return 0
        time.sleep(args.interval)
