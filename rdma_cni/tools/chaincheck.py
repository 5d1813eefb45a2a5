"""Is our entry chained on this node? Asked by the device plugin's ``Allocate`` before a
pod's sandbox exists, and by ``probe cni-watch`` (the same file, the same way).

The kubelet calls the device plugin's ``Allocate`` before it asks the runtime for the
pod's sandbox; the runtime then runs the first conflist of the CNI conf dir. If that
list does not chain rdma-cni (the primary's agent just rewrote it and ``install
--watch`` has not put the entry back, or the DaemonSet is being removed), the pod
would start with an RDMA device and no RDMA interface. Refusing the allocation makes
the kubelet fail the pod's admission with our message instead.

The first file may be a symlink, as libcni counts it (a primary that keeps its conflist
elsewhere, docs/packaging.md): it is followed as ``install`` follows it, an absolute
target under ``host_root``. A target this container cannot see (its directory is not
mounted here) cannot say whether the entry is chained; the allocation is then allowed,
with a warning, rather than every RDMA pod of the node refused.
"""

from __future__ import annotations

import logging
import os

from rdma_cni.errors import ConfigError
from rdma_cni.models.subconfig import find_entry, first_conf_file, read_json_object

log = logging.getLogger("rdma_cni")


def chain_problem(conf_dir: str, host_root: str = "/") -> str | None:
    """Why a pod started now would get no RDMA interfaces, or None when the first CNI
    config of ``conf_dir`` chains rdma-cni (or its link's target cannot be seen here)."""
    from rdma_cni.tools.conffile import link_chain

    try:
        path = first_conf_file(conf_dir, any_link=True)
        if path is None:
            return f"no CNI config in {conf_dir}"
        target = link_chain(path, host_root)[-1]
        if not os.path.isfile(target):
            log.warning("the node's first CNI config %s is a symlink to %s, which this "
                        "container cannot read: allocating without checking that it chains "
                        "rdma-cni", path, target)
            return None
        doc = read_json_object(target)
    except ConfigError as e:
        return e.msg
    if find_entry(doc) is None:
        return f"the node's first CNI config {path} does not chain rdma-cni"
    return None
