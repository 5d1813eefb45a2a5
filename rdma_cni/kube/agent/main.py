"""``rdma-cni agent``'s entry: its options, the :class:`~rdma_cni.kube.agent.reconciler.Agent`
built from the config and the status file of the last run, and the loop of passes
(:mod:`rdma_cni.kube.agent.reconciler`)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

from rdma_cni.adapters.cri import CriClient, default_socket
from rdma_cni.confdefaults import DEFAULTS
from rdma_cni.errors import CniError
from rdma_cni.kube.agent.plan import restored_marks
from rdma_cni.kube.agent.reconciler import Agent, connect_kube, log, run_once
from rdma_cni.models.subconfig import DEFAULT_CONF_DIR, data_dir_of, load_config
from rdma_cni.node.origin import node_identity
from rdma_cni.node.rdma_mode import read_netns_mode
from rdma_cni.store.boot import this_boot
from rdma_cni.store.core import Store
from rdma_cni.store.run import agentstatus
from rdma_cni.store.run.heartbeat import beat


def _parser() -> argparse.ArgumentParser:
    from rdma_cni.cliargs import parser, seconds

    p = parser("rdma-cni agent", "Node reconciler: frees the state, addresses and NICs of "
               "sandboxes the runtime no longer has; reports what it cannot prove.",
               log_format=True)
    p.add_argument("--interval", type=seconds(0.1, 86400), default=30.0,
                   help="seconds between rounds (default 30)")
    p.add_argument("--once", action="store_true", help="one round, then exit")
    p.add_argument("--cri-socket", default=None,
                   help="the runtime's CRI socket (default: containerd's "
                        "/run/containerd/containerd.sock, else CRI-O's /var/run/crio/crio.sock "
                        "when only that exists; \"\" disables)")
    p.add_argument("--status-file", default=agentstatus.DEFAULT_PATH,
                   help=f"where each pass is recorded (default {agentstatus.DEFAULT_PATH})")
    p.add_argument("--node-name", default=os.environ.get("NODE_NAME") or socket.gethostname(),
                   help="this node's Kubernetes name (default $NODE_NAME, else the hostname)")
    return p


def _agent(args: argparse.Namespace, config: dict[str, Any]) -> Agent:
    cri_socket = default_socket() if args.cri_socket is None else args.cri_socket
    previous = agentstatus.read(args.status_file) if args.status_file else None
    # marks are timed by this boot's CLOCK_BOOTTIME: another boot's (or an earlier
    # release's, on the wall clock) mean nothing here, and are dropped
    marks = (previous or {}).get("marks") if (previous or {}).get("boot") == this_boot() \
        else None
    agent = Agent(store=Store(data_dir_of(config)),
                  conf_name=str(config.get("cniConfName") or DEFAULTS["cniConfName"]),
                  status_path=args.status_file, node=node_identity(),
                  node_name=args.node_name, interval=args.interval,
                  cri=CriClient(cri_socket) if cri_socket else None,
                  marks=restored_marks(marks),
                  mode=str(config.get("mode") or ""), netns_mode=read_netns_mode)
    connect_kube(agent)
    agent.reporter.restore((previous or {}).get("eventsSent"))
    for item in agentstatus.pods_without_rdma(previous):
        if isinstance(item.get("since"), int | float):
            agent.missing_since[str(item.get("uid") or item["pod"])] = float(item["since"])
    return agent


def _beat_unless_cut_off(doc: dict[str, object], interval: float) -> None:
    """A pass that finished renews the heartbeat the probe checks, unless the runtime's
    socket is there and nothing answers on it: the DaemonSet mounts the socket file
    itself, and a runtime that restarted made a new one the mount does not show. The
    probe then restarts this container, which mounts the new one (it failed every pass
    until its pod was restarted by hand, releasing nothing, with the probe content)."""
    if doc.get("runtimeDown"):
        log.warning("the runtime's socket does not answer: the heartbeat is not renewed "
                    "(the liveness probe restarts this container if it stays so)")
        return
    beat("agent", interval)


def main(argv: Sequence[str] | None = None, conf_dir: str = DEFAULT_CONF_DIR) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    from rdma_cni import logsetup

    logsetup.daemon("%(asctime)s rdma-cni agent: %(message)s", log_format=args.log_format)
    try:
        agent = _agent(args, load_config(args.config, conf_dir))
    except CniError as e:
        log.error("%s", e.msg)
        return 1
    while True:
        try:
            _beat_unless_cut_off(run_once(agent), args.interval)
        except CniError as e:
            log.error("reconcile failed: %s", e.msg)
            if args.once:
                return 1
        if args.once:
            return 0
        time.sleep(args.interval)
