"""``rdma-cni serve``'s entry: its options, its logging, the preload, then the
:class:`~rdma_cni.resident.server.Server` bound and served by
:mod:`rdma_cni.resident.workers` (this module imports both; neither imports it)."""

from __future__ import annotations

import argparse
import gc
import json
import logging
import signal
from typing import Any

from rdma_cni import log, logsetup
from rdma_cni.confdefaults import CHOICES, DEFAULTS
from rdma_cni.resident import drain, intake, protocol
from rdma_cni.resident.server import Server

logger = logging.getLogger("rdma_cni")
PRELOAD = ("rdma_cni.cni.commands.add", "rdma_cni.cni.commands.delete",
           "rdma_cni.cni.commands.check", "rdma_cni.cni.commands.status",
           "rdma_cni.models.netconf", "rdma_cni.adapters.netlink")


def _args(argv: list[str]) -> argparse.Namespace:
    """Options; with --config, the config's residentSocket, logFile, logLevel and
    logFormat are the defaults (an explicit option wins)."""
    from rdma_cni.cliargs import parser

    p = parser("rdma-cni serve", "Resident server: answers the plugin's CNI requests "
               "without a new process each time (the plugin falls back to running in-process).",
               config_help="JSON object shaped like the plugin's conflist entry: its "
               "residentSocket, logFile and logLevel become the defaults")
    p.add_argument("--socket", help=f"unix socket to listen on (default {protocol.DEFAULT_SOCKET})")
    p.add_argument("--log-file", help="log file (default /var/log/rdma-cni.log)")
    p.add_argument("--log-level", help="debug, info, warning or error (default info)")
    p.add_argument("--log-format", choices=CHOICES["logFormat"],
                   help="lines of text or JSON objects (default text)")
    p.add_argument("--workers", type=_count, default=None,
                   help="processes accepting on the socket (default: CPUs, at most 4)")
    p.add_argument("--drain-timeout", type=_seconds, default=drain.DRAIN_TIMEOUT,
                   help="seconds a stop (SIGTERM, SIGINT) waits for the requests running "
                   f"to be answered (default {drain.DRAIN_TIMEOUT:g}; 0-3600)")
    args = p.parse_args(argv)
    conf: dict[str, Any] = {}
    if args.config:
        from rdma_cni.models.subconfig import read_json_object

        conf = read_json_object(args.config)
    args.socket = args.socket or conf.get("residentSocket") or DEFAULTS["residentSocket"]
    if args.log_file is None:  # "" in the config turns the file off, as in the plugin
        args.log_file = conf.get("logFile", logsetup.default_file())
    args.log_level = args.log_level or conf.get("logLevel") or DEFAULTS["logLevel"]
    args.log_format = args.log_format or conf.get("logFormat") or DEFAULTS["logFormat"]
    return args


def _logging(server: Server, args: argparse.Namespace) -> None:
    """serve's own log (file and stderr), and each request's lines to the file its
    config names (:mod:`rdma_cni.resident.requestlog`)."""
    from rdma_cni.resident.requestlog import RequestLog

    log.setup({"logFile": "", "logLevel": args.log_level, "logFormat": args.log_format})
    own = logsetup.open_file(args.log_file, logsetup.level_of(args.log_level),
                             args.log_format) if args.log_file else None
    router = RequestLog(own, server.notices.warn)
    logger.addHandler(router)
    logger.setLevel(logging.DEBUG)  # a request's own logLevel decides (the router filters)
    server.request_log = router


def main(argv: list[str]) -> int:
    args = _args(argv)
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from rdma_cni.resident import workers

    server = Server(args.socket, cap=intake.connection_cap(intake.raise_fd_limit()))
    server.drain_timeout = args.drain_timeout
    _logging(server, args)
    # told to stop from the moment the socket can be seen (a DaemonSet rollout, a test)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    signal.signal(signal.SIGINT, lambda *_: server.stop())
    server.bind()  # clients connecting from here on wait in the backlog, not in-process
    logger.info("rdma-cni serving on %s", args.socket)

    # what start-up made lives as long as the process: out of the collector's sight, a
    # full collection walks only what requests leave behind (and forked workers keep
    # sharing those pages: a collection writes to every object it walks)
    gc.collect()
    gc.freeze()
    workers.serve(server, args.workers or workers.default_count())
    return 0


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(
            f"--workers must be an integer 1-64, got {json.dumps(text)}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:  # NaN too
        raise argparse.ArgumentTypeError(
            f"--drain-timeout must be seconds 0-3600, got {json.dumps(text)}")
    return value
