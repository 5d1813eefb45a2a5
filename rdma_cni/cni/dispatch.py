"""The CNI protocol: required variables, version negotiation, the one write to
stdout and the one place where any exception becomes a CNI error.

Callable in-process: ``run(env, stdin, stdout)`` with injected streams and
handlers, so tests and a resident process drive it without exec.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any, Protocol

from rdma_cni import jsondoc
from rdma_cni.cni import versions
from rdma_cni.cni.request import Request, check_container_id, check_ifname, check_netns, check_path
from rdma_cni.errors import (
    CniError,
    Code,
    DecodeError,
    EnvError,
    VersionError,
    clipped,
    escaped,
    shown,
)
from rdma_cni.log import LazyLogger
from rdma_cni.models.cniargs import CniArgs, parse_cni_args

log = LazyLogger()

MAX_STDIN = 1 << 20
MAX_DEPTH = 64  # nesting of the stdin document (CNI configs are a few levels deep)
MAX_MESSAGE = 2000  # characters of an error's msg or details (they may quote the input)
COMMANDS = ("ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC")
# CNI spec 1.1.0, "Execution Protocol": the required environment parameters of each
# command. CNI_PATH is optional for ADD, DEL and CHECK; GC's runtime must pass it, for the
# plugins GC delegates to, and this plugin delegates to none: it is never required here.
REQUIRED: dict[str, tuple[str, ...]] = {
    "ADD": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"),
    "DEL": ("CNI_CONTAINERID", "CNI_IFNAME"),
    "CHECK": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"),
    "STATUS": (),
    "GC": (),
    "VERSION": (),
}
MIN_VERSION = {"CHECK": "0.4.0", "STATUS": "1.1.0", "GC": "1.1.0"}
ABOUT = (
    "rdma-cni: CNI plugin for RDMA (RoCE) pod interfaces, chained after the primary CNI.\n"
    "Run by the container runtime with CNI_COMMAND set; `rdma-cni --help` lists the "
    "subcommands.\n"
)


class Handlers(Protocol):
    def add(self, req: Request) -> dict[str, Any]: ...
    def delete(self, req: Request) -> None: ...
    def check(self, req: Request) -> None: ...
    def status(self, req: Request) -> None: ...
    def gc(self, req: Request) -> None: ...


def run(
    env: Mapping[str, str],
    stdin: bytes,
    stdout: IO[str],
    stderr: IO[str] | None = None,
    handlers: Handlers | None = None,
    on_request: Callable[[Request], None] | None = None,
    netns_fd: int | None = None,
    defer: Callable[[Callable[[], None]], None] | None = None,
) -> int:
    """Run one CNI command. Returns the exit status (0 or 1). ``defer``: given the
    bookkeeping the caller need not wait for (the operation's count for the exporter),
    to run once the answer is out (``serve``); without it that runs before returning."""
    command = env.get("CNI_COMMAND", "")
    if not command:
        if stderr is not None:
            stderr.write(ABOUT)
        return 0
    if command == "VERSION":
        _write(stdout, _text(_version_doc(stdin)))
        return 0
    started = time.monotonic()
    seen: dict[str, Any] = {}
    code, answer = _serve(env, command, stdin, handlers, on_request, netns_fd, seen)
    conf, seconds = seen.get("conf"), time.monotonic() - started
    if answer is not None:  # outside _serve: a stdout that fails is the caller's (cli.py)
        _write(stdout, answer)
    if defer is None:
        _record(conf, command, code, seconds)
    else:
        defer(lambda: _record(conf, command, code, seconds))
    return 1 if code else 0


def _serve(env: Mapping[str, str], command: str, stdin: bytes,
           handlers: Handlers | None, on_request: Callable[[Request], None] | None,
           netns_fd: int | None, seen: dict[str, Any]) -> tuple[int, str | None]:
    """The command itself: 0 or the CNI error code it reports, and its answer (None:
    nothing to write)."""
    version = versions.LATEST
    try:
        conf = seen["conf"] = _decode(stdin, command)
        version = versions.check_supported(conf.get("cniVersion"))
        _check_gate(command, version)
        req = _build_request(env, command, conf, version)
        req.netns_fd = netns_fd
        if on_request is not None:
            on_request(req)
        result = _call(handlers or _default_handlers(), req)
        return 0, None if result is None else _text(versions.convert(result, version))
    except CniError as exc:
        log.warning("%s failed: code %d: %s", command, int(exc.code), exc.msg)
        return int(exc.code), _text(_error_doc(version, exc.code, exc.msg, exc.details))
    except Exception as exc:  # the one place an unexpected exception becomes a CNI error
        log.exception("%s failed with an internal error", command)
        msg = escaped(f"{command} failed: internal error: {type(exc).__name__}: {exc}")[:1000]
        return int(Code.IO_FAILURE), _text(_error_doc(version, Code.IO_FAILURE, msg, ""))


def _record(conf: dict[str, Any] | None, command: str, code: int, seconds: float) -> None:
    """Count the operation for the exporter (never blocks, never fails the command)."""
    if conf is None:
        return  # nothing decoded: no config says where (or whether) to record
    from rdma_cni.store import metrics_file

    path = metrics_file.path_from_conf(conf)
    if path:
        metrics_file.record(path, command, code, seconds)


def _decode(stdin: bytes, command: str) -> dict[str, Any]:
    if command not in COMMANDS:
        raise EnvError(
            f"invalid CNI_COMMAND {shown(command[:40])}: expected one of {', '.join(COMMANDS)}"
        )
    try:
        conf: dict[str, Any] = jsondoc.decode(stdin, MAX_STDIN, dict, "expected a JSON object")
    except jsondoc.JsonRefused as e:
        raise DecodeError(f"failed to decode network configuration: {e}") from None
    if _too_deep(conf, MAX_DEPTH):
        raise DecodeError(
            f"failed to decode network configuration: nested deeper than {MAX_DEPTH} levels"
        )
    return conf


def _too_deep(value: object, limit: int) -> bool:
    """Iterative nesting check, so deep documents never reach recursive code (deepcopy)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[object]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _version_doc(stdin: bytes) -> dict[str, Any]:
    """VERSION never fails (like the reference skel): echo a supported cniVersion, else LATEST."""
    raw: object = None
    if len(stdin) <= MAX_STDIN:
        try:
            conf = json.loads(stdin) if stdin.strip() else {}
        except (ValueError, RecursionError):
            conf = {}
        raw = conf.get("cniVersion") if isinstance(conf, dict) else None
    version = raw if isinstance(raw, str) and raw in versions.SUPPORTED else versions.LATEST
    return {"cniVersion": version, "supportedVersions": list(versions.SUPPORTED)}


def _check_gate(command: str, version: str) -> None:
    minimum = MIN_VERSION.get(command)
    if minimum and not versions.at_least(version, minimum):
        raise VersionError(f"{command} needs cniVersion {minimum} or later, got {version}")


def _build_request(
    env: Mapping[str, str], command: str, conf: dict[str, Any], version: str
) -> Request:
    missing = [name for name in REQUIRED[command] if not env.get(name)]
    if missing:
        raise EnvError(f"{command} needs the environment variables {', '.join(missing)}")
    req = Request(command=command, conf=conf, cni_version=version)
    if "CNI_CONTAINERID" in REQUIRED[command]:
        req.container_id = check_container_id(env["CNI_CONTAINERID"])
        req.ifname = check_ifname(env["CNI_IFNAME"])
        req.cni_path = check_path(env.get("CNI_PATH", ""))
        req.netns = _netns(command, env.get("CNI_NETNS", ""))
    req.args = _cni_args(command, env.get("CNI_ARGS", ""))
    prev = conf.get("prevResult")
    if prev is not None:
        req.prev_result = _prev_result(prev, command)
    return req


def _netns(command: str, value: str) -> str:
    if not value:
        return ""
    try:
        return check_netns(value)
    except EnvError as exc:
        if command != "DEL":
            raise
        # DEL must not stop the chain over a path it cannot use: it works from the saved
        # state alone (the netns recorded at ADD, if that still is one)
        log.warning("DEL ignores CNI_NETNS %s (%s): cleanup from the saved state only",
                    shown(value, 256), exc.msg)
        return ""


def _cni_args(command: str, value: str) -> CniArgs:
    try:
        return parse_cni_args(value)
    except EnvError as exc:
        if command != "DEL":
            raise
        # DEL does not use them: failing here would stop the chain (the primary's DEL)
        log.warning("DEL ignores CNI_ARGS: %s", exc.msg)
        return parse_cni_args("")


def _prev_result(prev: object, command: str) -> dict[str, Any] | None:
    try:
        return versions.normalize_prev_result(prev)
    except (DecodeError, VersionError) as exc:
        if command != "DEL":
            raise
        # DEL is best-effort and does not use prevResult: failing here would stop the chain
        log.warning("DEL ignores a prevResult it cannot read: %s", exc.msg)
        return None


def _call(handlers: Handlers, req: Request) -> dict[str, Any] | None:
    if req.command == "ADD":
        return handlers.add(req)
    if req.command == "DEL":
        handlers.delete(req)
    elif req.command == "CHECK":
        handlers.check(req)
    elif req.command == "STATUS":
        handlers.status(req)
    elif req.command == "GC":
        handlers.gc(req)
    return None


def _default_handlers() -> Handlers:
    from rdma_cni.cni.commands import DefaultHandlers

    return DefaultHandlers()


def _error_doc(version: str, code: int, msg: str, details: str) -> dict[str, Any]:
    """The error document. Its texts are the runtime's to show (kubelet events, logs):
    every control character escaped, each text cut at :data:`MAX_MESSAGE`, whatever a
    message quoted from the input."""
    doc: dict[str, Any] = {"cniVersion": version, "code": int(code),
                           "msg": clipped(msg, MAX_MESSAGE)}
    if details:
        doc["details"] = clipped(details, MAX_MESSAGE)
    return doc


def _text(doc: dict[str, Any]) -> str:
    # JSON only: a non-finite number raises here, before anything is written (jsondoc
    # refuses them in the input, so none reaches a result)
    return json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n"


def _write(stdout: IO[str], text: str) -> None:
    """The one write of the answer. An error of stdout's (closed, full) is not caught:
    no second document could be written there either."""
    stdout.write(text)
    stdout.flush()


def unreadable(env: Mapping[str, str], stdout: IO[str], reason: str) -> int:
    """The answer when stdin cannot be read (closed, a directory): VERSION answers as for
    an empty config; any other command fails with 5 (nothing decoded: the latest version)."""
    command = env.get("CNI_COMMAND", "")
    if command == "VERSION":
        _write(stdout, _text(_version_doc(b"")))
        return 0
    msg = f"failed to read network config from stdin: {reason}"
    named = command if command in COMMANDS else shown(command[:40])
    log.warning("%s failed: code %d: %s", named, int(Code.IO_FAILURE), msg)
    _write(stdout, _text(_error_doc(versions.LATEST, Code.IO_FAILURE, msg, "")))
    return 1
