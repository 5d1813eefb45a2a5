"""Whether the RDMA subsystem's netns mode fits the node's RDMA mode (DESIGN §2), checked
by the agent when it starts and on every pass after.

ADD refuses a pod of a node mode the netns mode does not serve (code 104); this says so
before the first pod does: a Warning Event ``RdmaNetnsModeMismatch`` on the Node (at most
once an hour, :class:`~rdma_cni.kube.agent.kubeapi.Reporter`), a log line, and the record
``netnsMode`` in the agent's status file, which the exporter turns into
``rdma_cni_netns_mode_mismatch``. The netns mode is read over RDMA netlink by the reader
``doctor`` and ADD use (:mod:`rdma_cni.node.rdma_mode`); unknown (no RDMA netlink) is
recorded, never reported as a mismatch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rdma_cni.errors import CniError
from rdma_cni.kube.agent.kubeapi import Reporter
from rdma_cni.node.rdma_mode import check_mode
from rdma_cni.vocab.modes import RdmaNetnsMode, parse

log = logging.getLogger("rdma_cni.kube.agent.reconciler")
REASON = "RdmaNetnsModeMismatch"
#: ``ib_core``'s module parameter ``netns_mode`` for each netns mode (docs/packaging.md)
PARAM = {RdmaNetnsMode.SHARED: 1, RdmaNetnsMode.EXCLUSIVE: 0}


def fit(mode: str, netns_mode: str | None) -> dict[str, Any]:
    """The status file's ``netnsMode`` record: the node mode, the netns mode (None when
    unknown), the netns modes the node mode works under, and whether they clash."""
    known = parse(mode)
    needs = list(known.traits.rdma_netns) if known else []
    record: dict[str, Any] = {"mode": mode, "netnsMode": netns_mode, "needs": needs,
                              "mismatch": False}
    try:
        check_mode(mode, netns_mode)
    except CniError:
        record["mismatch"] = True
    return record


def message(record: dict[str, Any], node: str) -> str:
    """The Event's text: what clashes, what it breaks, how to set and persist the fix."""
    want = " or ".join(record["needs"])
    param = PARAM[RdmaNetnsMode(record["needs"][0])]
    return (f"node {node} runs RDMA mode {record['mode']} (label vke.node.rdma.mode), which "
            f"needs the RDMA netns mode {want}; the kernel's is {record['netnsMode']}: pods "
            f"asking for RDMA interfaces fail with code 104. Set it at boot (`options ib_core "
            f"netns_mode={param}` in /etc/modprobe.d, then reboot; docs/packaging.md, "
            "\"The RDMA netns mode\") or change the node's mode label")


def check(reporter: Reporter, node: str, mode: str, read: Callable[[], str | None],
          last: dict[str, Any] | None = None) -> dict[str, Any]:
    """Read the netns mode, compare, report a mismatch on the Node (``reporter``: once an
    hour) and in the log (when it is new since ``last``, the previous pass's record)."""
    try:
        netns_mode = read()
    except (CniError, OSError) as e:
        log.warning("failed to read the RDMA netns mode: %s", e)
        netns_mode = None
    record = fit(mode, netns_mode)
    if record["mismatch"]:
        text = message(record, node or "(this node)")
        if node:
            reporter.report({"kind": "Node", "name": node, "uid": node}, REASON, text)
        if record != last:
            log.warning("%s", text)
    return record
