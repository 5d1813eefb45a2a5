"""``doctor`` checks of the kubelet: its topology policy (``<kubelet root>/config.yaml``)
and the sources that tell ADD which NICs the device plugin gave a pod (the PodResources
socket and the device-plugin checkpoint, DESIGN §3).

The kubelet root is ``doctor --kubelet-root`` (else ``$RDMA_CNI_KUBELET_ROOT``, which the
DaemonSet's container sets from the ``kubeletDir`` path setting). Given one, the sources
are checked under it, and a plugin config that reads them elsewhere (its ``kubelet``
paths, by default under ``/var/lib/kubelet``) fails; without one, they are checked where
the config says, and ``config.yaml`` is read under ``/var/lib/kubelet``.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

from rdma_cni import defaults
from rdma_cni.regfile import read_regular
from rdma_cni.tools.doctor_report import Check
from rdma_cni.vocab.modes import parse

#: the environment variable naming the kubelet root in the DaemonSet's containers
ROOT_ENV = "RDMA_CNI_KUBELET_ROOT"
SOURCES = ("podResourcesSocket", "checkpointFile")
#: the largest kubelet config read (a few KiB in practice)
MAX_CONFIG = 1 << 20


def _config_text(path: str) -> str:
    """The kubelet config's text. Never waits: a FIFO or a device there is refused at once
    (``NotRegularError``; a plain ``open()`` of a FIFO waited for a writer for ever)."""
    raw = read_regular(path, MAX_CONFIG, follow=True)
    if len(raw) > MAX_CONFIG:
        raise ValueError(f"larger than {MAX_CONFIG >> 20} MiB")
    return raw.decode("utf-8")  # UnicodeDecodeError: a ValueError


def check_kubelet(mode: str, path: str) -> Check:
    known = parse(mode)
    if known is None or not known.traits.topology_policy:
        return Check("topology", "ok", f"no topology policy needed in mode {mode or 'unset'}")
    try:
        text = _config_text(path)
    except (OSError, ValueError) as e:
        return Check("topology", "warn", f"cannot read kubelet config {path}: "
                     f"{(e.strerror if isinstance(e, OSError) else None) or e}",
                     "check topologyManagerPolicy: best-effort by hand")
    m = re.search(r"""^\s*["']?topologyManagerPolicy["']?\s*:\s*["']?([\w-]+)""", text, re.M)
    policy = m.group(1) if m else "none"
    if policy != "best-effort":
        return Check(
            "topology",
            "fail",
            f"kubelet topologyManagerPolicy is {policy}",
            f"set topologyManagerPolicy: best-effort in {path} and restart kubelet",
        )
    return Check("topology", "ok", "kubelet topologyManagerPolicy is best-effort")


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def check_sources(config: dict[str, Any], root: str | None) -> Check:
    """Where ADD learns a pod's NICs: the PodResources socket, else the checkpoint; under
    ``root`` when given (and then the config, when there is one, must read them there),
    else where the config says."""
    if config.get("allocation") == "config":
        return Check("kubelet-sources", "ok", "not used (allocation: config)")
    given = config.get("kubelet")
    named = {k: v for k, v in (given if isinstance(given, dict) else {}).items()
             if k in SOURCES and isinstance(v, str) and v}
    reads = {**defaults.kubelet_paths(), **named}
    paths = defaults.kubelet_paths(root) if root else reads
    astray = [reads[k] for k in SOURCES if reads[k] != paths[k]] if config else []
    if astray:
        return Check("kubelet-sources", "fail",
                     f"the plugin's config reads {' and '.join(astray)}, not under the "
                     f"kubelet's root {root}",
                     f"rdma-cni install --kubelet-dir {root} (the DaemonSet: the kubeletDir "
                     "path setting); or give doctor the right --kubelet-root")
    sock, checkpoint = paths["podResourcesSocket"], paths["checkpointFile"]
    if _is_socket(sock):
        return Check("kubelet-sources", "ok", f"the kubelet's PodResources socket {sock}")
    if os.path.isfile(checkpoint):
        return Check("kubelet-sources", "ok", f"the kubelet's checkpoint {checkpoint} (no "
                     f"PodResources socket at {sock})")
    return Check("kubelet-sources", "warn",
                 f"no PodResources socket {sock} and no checkpoint {checkpoint}: ADD takes "
                 "NICs in discovery order, without NUMA alignment to the pod's GPUs",
                 "is the kubelet running, with this root dir (doctor --kubelet-root DIR)?")
