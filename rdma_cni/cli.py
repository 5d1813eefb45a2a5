"""Entry point: binds the real environment and stdio.

With no argument the binary is the CNI plugin (reads ``CNI_COMMAND``); otherwise
the first argument names a subcommand, each imported only when used.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

SUBCOMMANDS = {
    "doctor": "rdma_cni.doctor",
    "nccl-env": "rdma_cni.nccl_env",
    "ls": "rdma_cni.ls",
    "install": "rdma_cni.install",
    "uninstall": "rdma_cni.install",
    "agent": "rdma_cni.agent",
    "device-plugin": "rdma_cni.deviceplugin.cli",
    "exporter": "rdma_cni.exporter",
    "serve": "rdma_cni.resident.server",
}
MAX_STDIN = 1 << 20  # dispatch.MAX_STDIN: one more byte is read to detect excess
USAGE = "usage: rdma-cni [" + "|".join(SUBCOMMANDS) + "] [--config FILE] ...\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and not os.environ.get("CNI_COMMAND"):
        return _subcommand(argv)
    return plugin_main()


def plugin_main() -> int:
    # without CNI_COMMAND only the about text is printed: never wait on a terminal's stdin
    stdin = sys.stdin.buffer.read(MAX_STDIN + 1) if os.environ.get("CNI_COMMAND") else b""
    conf = _peek_conf(stdin)
    reply = _resident(conf, stdin)
    if reply is not None:
        sys.stdout.write(str(reply.get("stdout", "")))
        sys.stderr.write(str(reply.get("stderr", "")))
        code = reply.get("exit", 1)
        return code if isinstance(code, int) else 1
    from . import dispatch, log

    log.configure(conf)
    return dispatch.run(os.environ, stdin, sys.stdout, sys.stderr)


def _resident(conf: dict[str, object], stdin: bytes) -> dict[str, object] | None:
    """Forward to the resident process when it can serve this request faster; None:
    run in-process (pass-through, DEL/GC without a netns, no server, refused, no answer)."""
    from .resident.protocol import DEFAULT_SOCKET

    command = os.environ.get("CNI_COMMAND", "")
    path = conf.get("residentSocket", DEFAULT_SOCKET)
    if not path or not isinstance(path, str) or command not in ("ADD", "CHECK", "DEL"):
        return None
    if os.environ.get("RDMA_CNI_NO_RESIDENT"):
        return None  # the native front already tried the server
    if command == "DEL" and not os.environ.get("CNI_NETNS"):
        return None
    from .commands import requested_blocks_of

    try:
        if not requested_blocks_of(conf):
            return None  # pass-through is cheapest right here
    except Exception:
        return None  # the in-process dispatcher reports it
    from .resident.client import forward

    return forward(dict(os.environ), stdin, path)


def _peek_conf(stdin: bytes) -> dict[str, object]:
    """Logging settings from the raw config, tolerating anything (the dispatcher validates)."""
    try:
        conf = json.loads(stdin)
    except (ValueError, RecursionError):
        return {}
    return conf if isinstance(conf, dict) else {}


def _subcommand(argv: list[str]) -> int:
    name = argv[0]
    if name in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return 0
    if name in ("-v", "--version", "version"):
        from . import __version__

        sys.stdout.write(f"rdma-cni {__version__}\n")
        return 0
    module = SUBCOMMANDS.get(name)
    if module is None:
        sys.stderr.write(f"rdma-cni: unknown subcommand {name!r}\n{USAGE}")
        return 2
    mod = importlib.import_module(module)
    args = argv if name == "uninstall" else argv[1:]
    return int(mod.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
