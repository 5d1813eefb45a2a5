"""``rdma-cni probe <component>``: liveness and readiness checks of the DaemonSet's
long-running containers (exec probes; the exporter is probed over HTTP instead).

Each check looks at something real, and a failure prints one line on stderr naming
what is wrong (exit 1):

- ``serve [--socket PATH]``: the resident socket answers a CNI VERSION request.
- ``device-plugin``: the plugin's socket is in the kubelet's
  device-plugin dir and its last poll (heartbeat) is recent and registered with the
  kubelet socket that is there now.
- ``agent``: the agent's last reconcile pass is recent (heartbeat).
- ``cni-watch [--cni-conf-dir DIR] [--cni-bin-dir DIR] [--host-root DIR]``: our entry
  is in the first CNI config of the conf dir (a symlink followed under the host root)
  and ``rdma-cni`` is in the bin dir.

Heartbeats are small JSON files the components write in ``RDMA_CNI_HEALTH_DIR``
(default ``/tmp``, the container's own), so the probe in the same container reads
what the process did last (written by :mod:`rdma_cni.store.run.heartbeat`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from rdma_cni.errors import escaped, shown
from rdma_cni.store.run import runfile
from rdma_cni.store.run.heartbeat import heartbeat_path
from rdma_cni.store.run.pluginstatus import ident

#: a heartbeat is stale after this many of its own periods (plus a grace)
STALE_PERIODS = 3
GRACE = 30.0
#: how far in the future a heartbeat's time may be (clock skew between writer and probe)
SKEW = 5.0


class ProbeFailed(Exception):
    """One line naming what is wrong."""


def read_heartbeat(component: str, now: float | None = None) -> dict[str, Any]:
    """The last heartbeat of ``component``; ProbeFailed when missing or stale."""
    path = heartbeat_path(component)
    try:
        doc = json.loads(runfile.read_bytes(path, 1 << 20))  # a FIFO there: refused at once
    except FileNotFoundError:
        raise ProbeFailed(f"{component} has not finished a pass yet (no {path})") from None
    except (OSError, ValueError) as e:
        raise ProbeFailed(f"failed to read {path}: {e}") from e
    stamp = doc.get("time") if isinstance(doc, dict) else None
    if not isinstance(stamp, int | float) or isinstance(stamp, bool) \
            or not math.isfinite(stamp):
        raise ProbeFailed(f"failed to read {path}: not a heartbeat")
    period = doc.get("period")
    period = float(period) if isinstance(period, int | float) and math.isfinite(period) \
        and period > 0 else 30.0
    age = (time.time() if now is None else now) - float(stamp)
    if age < -SKEW:
        raise ProbeFailed(f"{component}'s last pass is dated {-age:.0f} s in the future "
                          f"({path}): not a pass this process made")
    limit = STALE_PERIODS * period + GRACE
    if age > limit:
        raise ProbeFailed(f"{component}'s last pass was {age:.0f} s ago (limit {limit:.0f} s)")
    return doc


# -- checks ------------------------------------------------------------------------
def check_serve(args: argparse.Namespace) -> str:
    from rdma_cni.resident.client import forward

    if not os.path.exists(args.socket):
        raise ProbeFailed(f"resident socket {args.socket} is missing")
    reply = forward({"CNI_COMMAND": "VERSION"}, b'{"cniVersion":"1.0.0"}', args.socket)
    if reply is None:
        raise ProbeFailed(f"resident socket {args.socket} did not answer (or refused)")
    try:
        versions = json.loads(str(reply.get("stdout", ""))).get("supportedVersions")
    except (ValueError, AttributeError):
        versions = None
    if reply.get("exit") != 0 or not versions:
        raise ProbeFailed(f"resident socket {args.socket} answered VERSION with exit "
                          f"{reply.get('exit')}: {reply.get('stderr') or reply.get('stdout')}")
    return f"resident socket {args.socket} answers"


def check_device_plugin(args: argparse.Namespace) -> str:
    doc = read_heartbeat("device-plugin")
    sock = doc.get("socket")
    if not isinstance(sock, str) or ident(sock) is None:
        raise ProbeFailed(f"device plugin socket {shown(sock, 1024)} is missing")
    kubelet = doc.get("kubelet")
    current = ident(kubelet) if isinstance(kubelet, str) else None
    if current is None:
        raise ProbeFailed(f"kubelet registration socket {shown(kubelet, 1024)} is missing")
    recorded = doc.get("registered")
    if not isinstance(recorded, list) or tuple(recorded) != current:
        raise ProbeFailed(f"device plugin is not registered with the kubelet at {kubelet} "
                          "(see the container's log)")
    return f"device plugin {sock} registered with {kubelet}"


def check_agent(args: argparse.Namespace) -> str:
    doc = read_heartbeat("agent")
    return f"agent pass {time.time() - float(doc['time']):.0f} s ago"


def check_cni_watch(args: argparse.Namespace) -> str:
    """The runtime's conflist chains our entry (a symlinked one followed under
    ``--host-root``, as ``install`` and the device plugin follow it) and the plugin is
    there."""
    from rdma_cni.models.subconfig import PLUGIN_TYPE
    from rdma_cni.tools.chaincheck import chain_problem

    problem = chain_problem(args.cni_conf_dir, args.host_root)
    if problem is not None:
        raise ProbeFailed(problem)
    binary = os.path.join(args.cni_bin_dir, PLUGIN_TYPE)
    if not os.access(binary, os.X_OK):
        raise ProbeFailed(f"{binary} is missing or not executable")
    return f"entry chained in {args.cni_conf_dir}, {binary} present"


CHECKS: dict[str, Callable[[argparse.Namespace], str]] = {
    "serve": check_serve,
    "device-plugin": check_device_plugin,
    "agent": check_agent,
    "cni-watch": check_cni_watch,
}


def _parser() -> argparse.ArgumentParser:
    from rdma_cni.cliargs import parser
    from rdma_cni.models.subconfig import DEFAULT_CONF_DIR
    from rdma_cni.resident.protocol import DEFAULT_SOCKET

    p = parser("rdma-cni probe", "Liveness/readiness check of a node component: exit 0, or "
               "1 with one line naming what is wrong.", config=False)
    # optional to argparse, so an unknown option is named before a missing component
    p.add_argument("component", nargs="?", choices=sorted(CHECKS),
                   help="the component to check: " + ", ".join(sorted(CHECKS)))
    p.add_argument("--socket", default=DEFAULT_SOCKET, help="serve: the resident socket")
    p.add_argument("--cni-conf-dir", default=DEFAULT_CONF_DIR, help="cni-watch")
    p.add_argument("--cni-bin-dir", default="/opt/cni/bin", help="cni-watch")
    p.add_argument("--host-root", default="/", metavar="DIR",
                   help="cni-watch: the host's / as mounted here (a symlinked conflist's "
                        "absolute target is read under it, as install reads it)")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing on success")
    return p


def main(argv: Sequence[str]) -> int:
    p = _parser()
    args = p.parse_args(list(argv))
    if args.component is None:
        p.error("the following arguments are required: component")
    try:
        ok = CHECKS[args.component](args)
    except ProbeFailed as e:
        sys.stderr.write(f"rdma-cni probe {args.component}: {escaped(str(e))}\n")
        return 1
    if not args.quiet:
        sys.stdout.write(f"rdma-cni probe {args.component}: ok: {ok}\n")
    return 0
