"""The DaemonSet and ConfigMaps a kustomization renders (``kubectl kustomize``, see
tests/k8srender.py), made runnable on this machine under podman. The same works for an
earlier release's plain manifests (its conf/k8s/*.yaml), for the upgrade test.

Every change the node tests make to the rendered objects is here, and only here:

1. ``host root``: every host path the DaemonSet mounts (its hostPath volumes, but
   ``/sys``, ``/var/run/netns`` and ``/usr``: the kernel's views, and an earlier
   release's libc check) and the kubelet's root above its dirs become the same path
   under the test's temp root T, wherever they appear: hostPath volumes, mountPaths
   that equal their host path, ``/host<path>`` mounts (the host seen from a container),
   command arguments, probe commands and the ConfigMaps' JSON. So the pod's view stays
   what the manifest says, shifted to T, and nothing is written to the real /opt/cni/bin,
   /etc/cni/net.d, /var/lib/cni, the kubelet's dirs, /var/log, /run/rdma-cni, the
   runtime's socket or /dev/infiniband. ``/host`` stays: it is where a container sees
   the real host's /, so ``/host`` + a shifted path is what it was.
2. The image reference of every container (``images``: the manifest's reference -> the
   tag the test built).
3. The ConfigMap gains ``mode`` (no API server gives the node label here) and
   ``devices`` (the veth stand-in NICs: there are no RoCE NICs to discover).
4. The exporter's port 9469 becomes a free port (the host network is shared with other
   tests); its address stays what the manifest says.
5. The probes are taken out of the played pod and returned separately: podman would
   run them through systemd timers, which this machine lacks; the test runs each
   probe's exact command itself (``podman exec``, ``GET``).
6. ``ports`` are dropped: podman refuses port mappings with host networking (with
   ``hostNetwork`` a containerPort only documents the port).
7. What the kubelet does and podman does not: an env ``fieldRef`` becomes its value
   (``spec.nodeName`` the test's node name, ``status.hostIP`` the stand-in node address
   127.0.0.1), and ``$(VAR)`` in a command is expanded from the container's env.
8. Two podman settings in place of the kubelet's behaviour: the pod annotation
   ``io.podman.annotations.init.container.type: always`` (podman's default "once"
   deletes the init container, and its log, when it exits) and ``restartPolicy:
   OnFailure`` (podman 4.3 applies the pod's restart policy to init containers too,
   and would re-run the finished install forever under the default Always).
9. kind DaemonSet -> kind Pod (its template), named for the test.
10. The agent's ``--interval`` becomes 5 s, so a stale attachment is released within
    the test's patience (two passes at least one interval apart).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import yaml

NODE_NAME = "rdma-cni-node-test"
HOST_IP = "127.0.0.1"  # the stand-in node address (status.hostIP)
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
KEEP = ("/sys", "/var/run/netns", "/usr")  # host paths the test does not move
AGENT_INTERVAL = "5"
FIELDS = {"spec.nodeName": NODE_NAME, "status.hostIP": HOST_IP}


def redirected(ds: dict[str, Any]) -> list[str]:
    """The host paths of a DaemonSet that move under T, longest first."""
    spec = ds["spec"]["template"]["spec"]
    paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v} - set(KEEP)
    paths |= {p.rsplit("/", 1)[0] for p in paths
              if p.endswith(("/device-plugins", "/pod-resources"))}  # the kubelet's root
    return sorted(paths, key=len, reverse=True)


def shift(value: str, root: Path, prefixes: list[str]) -> str:
    """A host path (or ``/host`` + host path) moved under ``root``; anything else as is."""
    for prefix in prefixes:
        for lead in ("", "/host"):
            p = lead + prefix
            if value == p or value.startswith(p + "/"):
                return f"{lead}{root}{value[len(lead):]}"
    return value


def _shift_all(obj: Any, root: Path, prefixes: list[str]) -> Any:
    if isinstance(obj, str):
        return shift(obj, root, prefixes)
    if isinstance(obj, list):
        return [_shift_all(v, root, prefixes) for v in obj]
    if isinstance(obj, dict):
        return {k: _shift_all(v, root, prefixes) for k, v in obj.items()}
    return obj


def split(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the DaemonSet, the ConfigMaps) of a rendering."""
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    return ds, [d for d in docs if d["kind"] == "ConfigMap"]


def configmaps(cms: list[dict[str, Any]], root: Path, prefixes: list[str], mode: str,
               devices: list[str]) -> list[dict[str, Any]]:
    out = []
    for cm in cms:
        cm = copy.deepcopy(cm)
        conf = _shift_all(json.loads(cm["data"]["config.json"]), root, prefixes)
        conf.update(mode=mode, devices=devices)                            # change 3
        cm["data"]["config.json"] = json.dumps(conf, indent=2)
        cm["metadata"].pop("namespace", None)
        out.append(cm)
    return out


def _kubelet_env(c: dict[str, Any]) -> None:
    """Change 7: fieldRef values, then ``$(VAR)`` expansion in the command."""
    env = {}
    for e in c.get("env", []):
        field = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if field is not None:
            e.pop("valueFrom")
            e["value"] = FIELDS[field]
        env[e["name"]] = e["value"]
    for key in ("command", "args"):
        if key in c:
            c[key] = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a)
                      for a in c[key]]


def node_pod(ds: dict[str, Any], root: Path, images: dict[str, str], name: str,
             exporter_port: int) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(the Pod to play, container name -> its probes as shipped, paths shifted)."""
    template = copy.deepcopy(ds["spec"]["template"])
    spec = _shift_all(template["spec"], root, redirected(ds))                 # change 1
    probes: dict[str, dict[str, Any]] = {}
    for c in spec.get("initContainers", []) + spec["containers"]:
        c["image"] = images[c["image"]]                                       # change 2
        probes[c["name"]] = {k: c.pop(k) for k in PROBES if k in c}          # change 5
        c.pop("ports", None)                                                  # change 6
        _kubelet_env(c)                                                       # change 7
        if c["name"] == "exporter":                                           # change 4
            i = c["command"].index("--listen") + 1
            c["command"][i] = re.sub(r":9469$", f":{exporter_port}", c["command"][i])
        if c["name"] == "agent":                                              # change 10
            c["command"][c["command"].index("--interval") + 1] = AGENT_INTERVAL
    annotations = {**(template["metadata"].get("annotations") or {}),
                   "io.podman.annotations.init.container.type": "always"}  # change 8
    spec["restartPolicy"] = "OnFailure"
    meta = {"name": name, "labels": template["metadata"]["labels"], "annotations": annotations}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}, probes  # 9


def write(path: Path, *docs: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path
