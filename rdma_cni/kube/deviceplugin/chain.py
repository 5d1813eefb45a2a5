"""Is our entry chained on this node? Asked by ``Allocate`` before a pod's sandbox exists.

The kubelet calls the device plugin's ``Allocate`` before it asks the runtime for the
pod's sandbox; the runtime then runs the first conflist of the CNI conf dir. If that
list does not chain rdma-cni (the primary's agent just rewrote it and ``install
--watch`` has not put the entry back, or the DaemonSet is being removed), the pod
would start with an RDMA device and no RDMA interface. Refusing the allocation makes
the kubelet fail the pod's admission with our message instead.
"""

from __future__ import annotations

from rdma_cni.errors import ConfigError
from rdma_cni.models.subconfig import find_entry, first_conf_file, read_json_object


def chain_problem(conf_dir: str) -> str | None:
    """Why a pod started now would get no RDMA interfaces, or None when the first CNI
    config of ``conf_dir`` chains rdma-cni."""
    try:
        path = first_conf_file(conf_dir)
        if path is None:
            return f"no CNI config in {conf_dir}"
        doc = read_json_object(path)
    except ConfigError as e:
        return e.msg
    if find_entry(doc) is None:
        return f"the node's first CNI config {path} does not chain rdma-cni"
    return None
