"""Entry point: binds the real environment and stdio.

With no argument the binary is the CNI plugin (reads ``CNI_COMMAND``); otherwise
the first argument names a subcommand, each imported only when used.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import os
import sys
from typing import NoReturn

SUBCOMMANDS = {
    "doctor": "rdma_cni.tools.doctor",
    "nccl-env": "rdma_cni.tools.nccl_env",
    "ls": "rdma_cni.tools.ls",
    "install": "rdma_cni.tools.install",
    "uninstall": "rdma_cni.tools.install",
    "agent": "rdma_cni.kube.agent.main",
    "device-plugin": "rdma_cni.kube.deviceplugin.cli",
    "exporter": "rdma_cni.kube.exporter",
    "serve": "rdma_cni.resident.main",
    "probe": "rdma_cni.tools.probe",
    "verify": "rdma_cni.tools.verify",
}
SUMMARIES = {  # one line each for the about text; a subcommand without one is still listed
    "doctor": "check this node (NICs, netmasks, RDMA netns mode, kubelet, mounts, config)",
    "nccl-env": "print the NCCL variables for this pod's RDMA interfaces",
    "ls": "list the RDMA attachments recorded on this node",
    "install": "copy the plugin into the CNI bin dir and chain it into the conflist",
    "uninstall": "remove the plugin's conflist entries and binaries",
    "agent": "reconcile state of sandboxes that no longer exist",
    "device-plugin": "advertise the RDMA NICs to the kubelet",
    "exporter": "serve Prometheus metrics of the NICs and the plugin",
    "serve": "resident server that answers CNI requests faster",
    "probe": "liveness/readiness check of serve, device-plugin, agent or cni-watch",
    "verify": "RDMA traffic between two pods, rail by rail, with the cause of a failure",
}
MAX_STDIN = 1 << 20  # dispatch.MAX_STDIN: one more byte is read to detect excess


def about() -> str:
    """The about text: what the binary is and every subcommand of the table."""
    width = max(len(n) for n in SUBCOMMANDS)
    lines = [f"  {n.ljust(width)}  {SUMMARIES.get(n, '')}".rstrip() for n in SUBCOMMANDS]
    return ("rdma-cni: CNI plugin for RDMA (RoCE) pod interfaces, chained after the primary "
            "CNI.\nRun by the container runtime with CNI_COMMAND set, or as an operator "
            "command:\n\nusage: rdma-cni SUBCOMMAND [--config FILE] [options]\n"
            "       rdma-cni SUBCOMMAND --help | rdma-cni --version\n\nsubcommands:\n"
            + "\n".join(lines) + "\n\nexit codes: 0 ok, 1 failure, 2 usage error\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if _is_subcommand(argv):
        return _subcommand(argv)
    return plugin_main()


def _is_subcommand(argv: list[str]) -> bool:
    """An operator command; else the runtime's CNI call (``CNI_COMMAND`` set wins)."""
    return bool(argv) and not os.environ.get("CNI_COMMAND")


def entry() -> NoReturn:
    """The binary's entry (``__main__``): a subcommand exits the usual way; the exec'd
    plugin ends without tearing the interpreter down (:func:`exit_plugin`)."""
    if _is_subcommand(sys.argv[1:]):
        sys.exit(_subcommand(sys.argv[1:]))
    try:
        code = plugin_main()
    except (OSError, ValueError) as exc:  # nobody gets the answer: one line, no traceback
        _say(f"rdma-cni: {_lost(exc)}\n")
        code = 1
    exit_plugin(code)


def _lost(exc: BaseException) -> str:
    """Why the answer did not reach stdout (the only writes :func:`plugin_main` lets fail)."""
    if isinstance(exc, BrokenPipeError):  # the runtime stopped reading
        return "stdout was closed before the answer was written"
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return f"the answer could not be written to stdout: {reason}"


def _say(text: str) -> None:
    """A line on stderr, if there is one."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # None: fd 2 was closed
        sys.stderr.write(text)
        sys.stderr.flush()


def exit_plugin(code: int) -> NoReturn:
    """End a plugin exec once its answer and logs are written: flush stdio, close the log
    handlers (what ``atexit`` would run), then ``os._exit``. Finalizing the ~300 modules
    an ADD imports, object by object, costs about 14 ms per exec (figure 6) and writes
    nothing. A failed stdout flush exits 120, as the interpreter's own shutdown does."""
    import logging

    try:
        if sys.stdout is not None:  # None: fd 1 was closed at start
            sys.stdout.flush()
    except (OSError, ValueError):
        code = code or 120
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


def plugin_main() -> int:
    # logging imports traceback, with tokenize, linecache and textwrap, for what only an
    # error report uses: it runs when one is made (bench/README.md, figure 6)
    from rdma_cni.lightpkg import light_module

    light_module("traceback", {})
    if not os.environ.get("CNI_COMMAND"):  # never wait on a terminal's stdin
        sys.stderr.write(about())
        return 0
    if sys.stdout is None:  # fd 1 closed: no answer can reach the runtime; nothing is done
        raise OSError(errno.EBADF, "stdout is closed")
    stdin = _read_stdin()
    if isinstance(stdin, str):
        return _unreadable(stdin)
    conf = _peek_conf(stdin)
    reply = _resident(conf, stdin)
    if reply is not None:
        sys.stdout.write(str(reply.get("stdout", "")))
        sys.stdout.flush()  # here, where a failure is reported (entry), not at exit
        _say(str(reply.get("stderr", "")))
        code = reply.get("exit", 1)
        return code if isinstance(code, int) else 1
    # One short-lived request: reference counting frees what it drops, and the cyclic
    # collector's passes over the ~400 modules the ADD imports only cost time (figure 6).
    import gc

    gc.disable()
    from rdma_cni import log
    from rdma_cni.cni import dispatch

    log.configure(conf)
    return dispatch.run(os.environ, stdin, sys.stdout, sys.stderr)


def _read_stdin() -> bytes | str:
    """The network config (one byte more than the limit, to see excess), or why it
    cannot be read: fd 0 closed (``sys.stdin`` is None), a directory, a read error."""
    if sys.stdin is None:
        return "stdin is closed"
    try:
        return sys.stdin.buffer.read(MAX_STDIN + 1)
    except (OSError, ValueError) as exc:
        return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _unreadable(reason: str) -> int:
    from rdma_cni import log
    from rdma_cni.cni import dispatch

    log.configure({})  # no config: the default log, as for a config that does not decode
    return dispatch.unreadable(os.environ, sys.stdout, reason)


def _resident(conf: dict[str, object], stdin: bytes) -> dict[str, object] | None:
    """Forward to the resident process when it can serve this request faster; None:
    run in-process (pass-through, DEL/GC without a netns, no server, refused, no answer)."""
    from rdma_cni.confdefaults import DEFAULTS

    command = os.environ.get("CNI_COMMAND", "")
    path = conf.get("residentSocket", DEFAULTS["residentSocket"])
    if not path or not isinstance(path, str) or command not in ("ADD", "CHECK", "DEL"):
        return None
    if os.environ.get("RDMA_CNI_NO_RESIDENT"):
        return None  # the native front already tried the server
    if command == "DEL" and not os.environ.get("CNI_NETNS"):
        return None
    from rdma_cni.cni.commands import requested_blocks_of

    try:
        if not requested_blocks_of(conf):
            return None  # pass-through is cheapest right here
    except Exception:
        return None  # the in-process dispatcher reports it
    from rdma_cni.resident.client import forward

    return forward(dict(os.environ), stdin, path)


def _peek_conf(stdin: bytes) -> dict[str, object]:
    """Logging settings from the raw config, tolerating anything (the dispatcher validates)."""
    try:
        conf = json.loads(stdin)
    except (ValueError, RecursionError):
        return {}
    return conf if isinstance(conf, dict) else {}


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _subcommand(argv: list[str]) -> int:
    name = argv[0]
    if name in ("-h", "--help", "help"):
        sys.stdout.write(about())
        return 0
    if name in ("-v", "--version", "version"):
        from rdma_cni.cliargs import version_text

        sys.stdout.write(version_text("--verbose" in argv[1:]) + "\n")
        return 0
    module = SUBCOMMANDS.get(name)
    if module is None:
        from rdma_cni.errors import shown

        sys.stderr.write(f"rdma-cni: unknown subcommand {shown(name)}: expected one of "
                         f"{', '.join(SUBCOMMANDS)} (see `rdma-cni --help`)\n")
        return 2
    if not _shipped(module):
        sys.stderr.write(f"rdma-cni {name}: not part of this binary: the plugin on the host "
                         "runs CNI commands only; run it from the rdma-cni image (kubectl "
                         f"exec into the rdma-cni DaemonSet's pod, then `rdma-cni {name}`)\n")
        return 2
    # In a container a subcommand is PID 1, which the kernel spares the default action
    # of SIGTERM: without a handler, `kubectl delete pod` waits out the grace period.
    # Subcommands with their own shutdown (serve, device-plugin, exporter) replace it.
    import signal

    signal.signal(signal.SIGTERM, _terminated)
    args = argv if name == "uninstall" else argv[1:]
    return _run_subcommand(name, module, args)


def _shipped(module: str) -> bool:
    """Whether this build carries the subcommand (the host bundle has none: build.spec)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its package is not in this build
        return False


def _run_subcommand(name: str, module: str, args: list[str]) -> int:
    """Run one subcommand; any failure is one line on stderr and exit code 1."""
    from rdma_cni.errors import CniError

    try:
        return int(importlib.import_module(module).main(args) or 0)
    except CniError as e:
        reason = e.msg
    except OSError as e:
        reason = f"{e.strerror or e}" + (f": {e.filename}" if e.filename else "")
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # the last resort: one line, never a traceback
        reason = f"unexpected {type(e).__name__}: {e}"
    from rdma_cni.errors import escaped

    sys.stderr.write(f"rdma-cni {name}: {escaped(' '.join(reason.split()))}\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
