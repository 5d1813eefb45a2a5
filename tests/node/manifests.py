"""The shipped DaemonSet and ConfigMap (conf/k8s/), made runnable on this machine.

Every change the node test makes to them is here, and only here:

1. ``host_root``: every host path the manifests name under ``REDIRECTED`` becomes the
   same path under the test's temp root T, wherever it appears: hostPath volumes,
   mountPaths that equal their host path, ``/host/<path>`` mounts (the host seen from
   a container), command arguments, probe commands and the ConfigMap's JSON. So the
   pod's view stays what the manifest says, shifted to T, and nothing is written to
   the real /opt/cni/bin, /etc/cni/net.d, /var/lib/cni, /var/lib/kubelet, /var/log,
   /run/rdma-cni or /dev/infiniband. ``/host`` stays: it is where a container sees the
   real host's /, so ``/host`` + a shifted path is what it was. ``/sys`` and
   ``/var/run/netns`` stay real: the kernel's views (the veth stand-in NICs, the netns
   containerd makes for pods).
2. The image reference of every container (the tag the test built).
3. The ConfigMap gains ``mode`` (no API server gives the node label here) and
   ``devices`` (the veth stand-in NICs: there are no RoCE NICs to discover).
4. The exporter listens on 127.0.0.1:<free port> instead of :9469 (the host network
   is shared with other tests).
5. The probes are taken out of the played pod and returned separately: podman would
   run them through systemd timers, which this machine lacks; the test runs each
   probe's exact command itself (``podman exec``, ``GET``).
6. ``ports`` are dropped: podman refuses port mappings with host networking (with
   ``hostNetwork`` a containerPort only documents the port).
7. ``NODE_NAME`` from ``fieldRef: spec.nodeName`` becomes a plain value (podman has no
   node; it refuses that fieldPath).
8. Two podman settings in place of the kubelet's behaviour: the pod annotation
   ``io.podman.annotations.init.container.type: always`` (podman's default "once"
   deletes the init container, and its log, when it exits) and ``restartPolicy:
   OnFailure`` (podman 4.3 applies the pod's restart policy to init containers too,
   and would re-run the finished install forever under the default Always).
9. kind DaemonSet -> kind Pod (its template), named for the test.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "conf" / "k8s"
REDIRECTED = ("/opt/cni/bin", "/etc/cni/net.d", "/var/lib/cni", "/var/lib/kubelet", "/var/log",
              "/run/rdma-cni", "/dev/infiniband")
NODE_NAME = "rdma-cni-node-test"
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def load(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((K8S / name).read_text())
    assert isinstance(doc, dict), name
    return doc


def shift(value: str, root: Path) -> str:
    """A host path (or ``/host`` + host path) moved under ``root``; anything else as is."""
    for prefix in REDIRECTED:
        for lead in ("", "/host"):
            p = lead + prefix
            if value == p or value.startswith(p + "/"):
                return f"{lead}{root}{value[len(lead):]}"
    return value


def _shift_all(obj: Any, root: Path) -> Any:
    if isinstance(obj, str):
        return shift(obj, root)
    if isinstance(obj, list):
        return [_shift_all(v, root) for v in obj]
    if isinstance(obj, dict):
        return {k: _shift_all(v, root) for k, v in obj.items()}
    return obj


def configmap(root: Path, mode: str, devices: list[str]) -> dict[str, Any]:
    cm = load("configmap.yaml")
    conf = _shift_all(json.loads(cm["data"]["config.json"]), root)
    conf.update(mode=mode, devices=devices)                         # change 3
    cm["data"]["config.json"] = json.dumps(conf, indent=2)
    return cm


def node_pod(root: Path, image: str, name: str,
             exporter_listen: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(the Pod to play, container name -> its probes as shipped, paths shifted)."""
    ds = load("daemonset.yaml")
    template = copy.deepcopy(ds["spec"]["template"])
    spec = _shift_all(template["spec"], root)                     # change 1
    probes: dict[str, dict[str, Any]] = {}
    for c in spec.get("initContainers", []) + spec["containers"]:
        c["image"] = image                                          # change 2
        probes[c["name"]] = {k: c.pop(k) for k in PROBES if k in c}  # change 5
        c.pop("ports", None)                                        # change 6
        for env in c.get("env", []):                                # change 7
            if env.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
                env.pop("valueFrom")
                env["value"] = NODE_NAME
        if c["name"] == "exporter":                                 # change 4
            i = c["command"].index("--listen")
            c["command"][i + 1] = exporter_listen
    annotations = {**template["metadata"].get("annotations", {}),
                   "io.podman.annotations.init.container.type": "always"}  # change 8
    spec["restartPolicy"] = "OnFailure"
    meta = {"name": name, "labels": template["metadata"]["labels"], "annotations": annotations}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}, probes  # 9


def write(path: Path, *docs: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path
