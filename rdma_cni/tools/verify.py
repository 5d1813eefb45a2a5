"""``rdma-cni verify``: prove RDMA between two pods, rail by rail, in one command.

Run in two pods that requested the RDMA resource: one with ``--listen``, the other
with ``--peer HOST`` (the listener's primary address or a Service name). They meet
over TCP on the primary network (eth0), pair their RDMA interfaces by position, and
on every pair: the HCA, port and GID index NCCL would use (nccl_env's logic;
``NCCL_IB_GID_INDEX`` in the environment wins, as in NCCL), an RC queue pair moving
SEND/RECV and RDMA WRITE traffic with the data checked, a latency and a bandwidth
figure; a rail that fails gets its likely cause in one line. Exit 0 only when every
rail passed. pyverbs (Debian's python3-pyverbs) is imported here only, lazily.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rdma_cni.tools.verify_rails import Rail, local_rails, nccl_view, pair_cause, route_cause
from rdma_cni.tools.verify_wire import StepError, Traffic, Wire, WireError, run_rail

PROG = "rdma-cni verify"
PORT = 18515
HELLO = "rdma-cni verify 1"


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    from rdma_cni.cliargs import parser, seconds

    p = parser(PROG, __doc__.split("\n\n")[1].replace("\n", " "),
               config_help="accepted like every subcommand and ignored")
    role = p.add_mutually_exclusive_group(required=True)
    role.add_argument("--listen", action="store_true", help="wait for the peer pod")
    role.add_argument("--peer", metavar="HOST", help="the listening pod (address or name)")
    p.add_argument("--port", type=int, default=PORT, help=f"TCP port (default {PORT})")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--socket-ifname", default=os.environ.get("NCCL_ENV_SOCKET_IFNAME", "eth0"),
                   help="the pod's primary interface, never a rail (default eth0)")
    p.add_argument("--ifaces", default=os.environ.get("NCCL_ENV_IFACES", ""),
                   help="the rails (comma separated; default: every other interface with "
                        "an IPv4 address)")
    p.add_argument("--iters", type=int, default=200, help="SEND round trips (default 200)")
    p.add_argument("--writes", type=int, default=50, help="RDMA WRITEs (default 50)")
    p.add_argument("--size", type=int, default=65536, help="bytes a WRITE (default 65536)")
    p.add_argument("--timeout", type=seconds(0.1, 3600), default=120.0,
                   help="seconds to wait for the peer, and for each rail (default 120)")
    args = p.parse_args(list(argv))
    if min(args.iters, args.writes, args.size) < 1 or not 0 < args.port < 65536:
        p.error("--iters, --writes and --size must be positive, --port 1-65535")
    return args


def _gather(args: argparse.Namespace) -> tuple[list[Rail], dict[str, str]]:
    """This pod's rails and the NCCL variables nccl_env computes for them."""
    from rdma_cni.adapters.netlink import Netlink
    from rdma_cni.adapters.sysfs import Sysfs
    from rdma_cni.node.gids import IB_ROOT, scan

    sysfs = Sysfs("/")
    nl = Netlink.here("this pod")
    try:
        links = {lk.index: lk for lk in nl.links()}
        addrs: dict[str, tuple[str, int]] = {}
        for index, iface in sorted(nl.addresses(), key=lambda a: a[1].ip):
            link = links.get(index)
            if link is not None and link.name not in addrs:
                addrs[link.name] = (str(iface.ip), link.mtu)
    finally:
        nl.close()
    only = args.ifaces.replace(",", " ").split()
    skip = {"lo", args.socket_ifname}
    ifaces = {n: v for n, v in addrs.items() if (n in only if only else n not in skip)}
    gids = scan(sysfs)
    rails = local_rails(ifaces, gids, os.environ, sysfs.listdir(IB_ROOT))
    return rails, nccl_view(gids, rails, os.environ, args.socket_ifname)


def _route_oifs(pairs: list[tuple[Rail, Rail]]) -> list[str | None]:
    from rdma_cni.adapters.netlink import Netlink

    nl = Netlink.here("this pod")
    try:
        names = {lk.index: lk.name for lk in nl.links()}
        oifs = [nl.route_oif(t.ip, m.ip) for m, t in pairs]
    finally:
        nl.close()
    return [names.get(o) if o is not None else None for o in oifs]


def _open(rail: Rail, size: int) -> tuple[Any, Rail]:
    """The rail's RC endpoint, or the rail with why it cannot have one."""
    from rdma_cni.adapters import verbs

    try:
        ep = verbs.RcEndpoint(str(rail.ibdev), int(rail.port or 1), int(rail.gid_index or 0),
                              size)
        return ep, replace(rail, qp=ep.local())
    except Exception as exc:  # pyverbs raises its own types
        return None, replace(rail, cause=f"RDMA device not visible in the pod: cannot open "
                             f"{rail.hca} through libibverbs ({exc}); /dev/infiniband or "
                             "the provider library is missing")


def _prepare(mine: list[Rail], theirs: list[Rail], size: int) -> tuple[list[Rail], list[Any]]:
    """Pair the rails, look the routes up, open an endpoint where nothing fails yet."""
    causes = [pair_cause(m, theirs[k] if k < len(theirs) else None) for k, m in enumerate(mine)]
    routable = [(m, theirs[k]) for k, m in enumerate(mine) if causes[k] is None]
    leaves = iter(_route_oifs(routable))
    out, eps = [], []
    for k, rail in enumerate(mine):
        cause = causes[k] or route_cause(rail, theirs[k], next(leaves))
        ep = None
        if cause is None:
            ep, rail = _open(rail, size)
            cause = rail.cause
        out.append(replace(rail, cause=cause))
        eps.append(ep)
    return out, eps


def _session(args: argparse.Namespace, rails: list[Rail]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + args.timeout
    wire = (Wire.listen(args.port, deadline) if args.listen
            else Wire.connect(args.peer, args.port, deadline))
    eps: list[Any] = []
    try:
        hello = wire.swap({"hello": HELLO, "rails": [r.to_json() for r in rails]}, deadline)
        if hello.get("hello") != HELLO:
            raise WireError(f"the peer is not `{PROG}` of this version")
        theirs = [Rail.from_json(r) for r in hello.get("rails", [])]
        mine, eps = _prepare(rails, theirs, args.size)
        plan = wire.swap({"rails": [r.to_json() for r in mine]}, deadline)
        theirs = [Rail.from_json(r) for r in plan.get("rails", [])]
        traffic = Traffic(args.iters, args.writes, args.size)
        return [_rail(wire, k, m, theirs, eps[k], args.peer is not None, traffic, args.timeout)
                for k, m in enumerate(mine)]
    finally:
        for ep in eps:
            if ep is not None:
                ep.close()
        wire.close()


def _rail(wire: Wire, k: int, mine: Rail, theirs: list[Rail], ep: Any, connector: bool,
          traffic: Traffic, timeout: float) -> dict[str, Any]:
    from rdma_cni.tools.verify_rails import unreachable

    peer = theirs[k] if k < len(theirs) else None
    doc: dict[str, Any] = {**mine.to_json(), "hca": mine.hca, "ok": False}
    doc.pop("qp", None)
    doc["peer"] = ({f: getattr(peer, f) for f in ("ifname", "ip", "gid_index", "gid", "mtu")}
                   if peer else None)
    cause = mine.cause or (peer.cause and f"the peer's {peer.ifname}: {peer.cause}"
                           if peer else None)
    if cause or peer is None or peer.qp is None or ep is None:
        doc["cause"] = cause or "the peer could not open its side of this rail"
        return doc
    try:
        doc.update(run_rail(ep, peer.qp, wire, connector, k, traffic,
                            time.monotonic() + timeout))
        doc.update(ok=True, cause=None)
    except StepError as exc:
        doc["cause"] = unreachable(mine, peer, str(exc))
    return doc


def _report(results: list[dict[str, Any]], nccl: dict[str, str], as_json: bool) -> None:
    if as_json:
        ok = bool(results) and all(r["ok"] for r in results)
        sys.stdout.write(json.dumps({"ok": ok, "nccl": nccl, "rails": results}, indent=2)
                         + "\n")
        return
    lines = [f"NCCL: {' '.join(f'{k}={v}' for k, v in nccl.items())}"]
    for r in results:
        peer = r["peer"] or {}
        head = (f"{r['ifname']} {r['ip']} {r['hca'] or '-'} GID index {r['gid_index']} -> "
                f"peer {peer.get('ifname', '-')} {peer.get('ip', '-')}")
        if r["ok"]:
            bw = f", {r['bandwidth_MBps']} MB/s" if r.get("bandwidth_MBps") else ""
            lines.append(f"{head}: ok, latency {r['latency_us']} us{bw}, data checked")
        else:
            lines.append(f"{head}: FAILED: {r['cause']}")
    passed = sum(1 for r in results if r["ok"])
    lines.append(f"verify: {passed} of {len(results)} rails passed")
    sys.stdout.write("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    from rdma_cni.adapters import verbs
    from rdma_cni.cliargs import fail
    from rdma_cni.errors import CniError

    args = _parse(sys.argv[1:] if argv is None else argv)
    try:
        rails, nccl = _gather(args)
    except CniError as exc:
        return fail(PROG, exc.msg, args.json)
    if not rails:
        return fail(PROG, f"the pod has no RDMA interface (nothing but lo and "
                    f"{args.socket_ifname} has an IPv4 address): RDMA device not visible "
                    "in the pod; does it request the RDMA resource and carry the annotation?",
                    args.json)
    missing = verbs.rc_available()
    if missing:
        return fail(PROG, f"pyverbs is not usable ({missing}): verify needs Debian's "
                    "python3-pyverbs (the rdma-cni image carries it)", args.json)
    try:
        results = _session(args, rails)
    except WireError as exc:
        return fail(PROG, str(exc), args.json)
    except CniError as exc:  # a netlink look-up failed
        return fail(PROG, exc.msg, args.json)
    _report(results, nccl, args.json)
    return 0 if results and all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
