"""Fuzz targets shared by the hypothesis and atheris drivers.

Each target takes one input and must either return or raise a :class:`CniError`
(the kubelet checkpoint parser: the exceptions its wrapper ``checkpoint_devices``
turns into a CniError). Anything else escaping is a bug.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from rdma_cni.adapters.kubelet import parse_checkpoint
from rdma_cni.cni import dispatch, versions
from rdma_cni.cni.request import Request
from rdma_cni.errors import CniError, Code
from rdma_cni.models.annotation import our_blocks
from rdma_cni.models.blocks import validate_blocks
from rdma_cni.models.cniargs import parse_cni_args
from rdma_cni.models.netconf import load_netconf

#: what parse_checkpoint may raise (checkpoint_devices maps these to IOFailure)
CHECKPOINT_ERRORS = (ValueError, TypeError, KeyError, AttributeError)
RESOURCE = "vke.volcengine.com/rdma"


class Bug(Exception):
    """A fuzz input broke a contract."""


def decode(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def netconf(obj: Any) -> None:
    if isinstance(obj, dict):
        load_netconf(obj)


def cni_args(text: str) -> None:
    parse_cni_args(text)


def annotation(obj: Any, conf_name: str = "rdma", max_ifaces: int = 16) -> None:
    conf = {"runtimeConfig": {"io.kubernetes.cri.pod-annotations":
                              {"k8s.volcengine.com/pod-networks": obj}}}
    validate_blocks(our_blocks(conf, conf_name, max_ifaces))


def annotation_text(text: str) -> None:
    annotation(text)


def checkpoint(text: str, uid: str = "uid-1") -> None:
    try:
        ids = parse_checkpoint(text, uid, RESOURCE)
    except CHECKPOINT_ERRORS:
        return
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise Bug(f"checkpoint gave {ids!r}")


def prev_result(obj: Any, version: str = "0.4.0") -> None:
    out = versions.normalize_prev_result(obj)
    if out.get("cniVersion") != versions.LATEST:
        raise Bug("normalized prevResult is not in the latest form")
    for v in versions.SUPPORTED:
        json.dumps(versions.convert(out, v))
    versions.convert(out, version)


class FakeHandlers:
    """Handlers that only read the request, so the dispatcher's own parsing is fuzzed."""

    def add(self, req: Request) -> dict[str, Any]:
        if req.prev_result is not None:
            return req.prev_result
        return versions.empty_result()

    def delete(self, req: Request) -> None:
        _ = req.key.digest()

    def check(self, req: Request) -> None:
        _ = req.args.pod

    def status(self, req: Request) -> None:
        return None

    def gc(self, req: Request) -> None:
        raise CniError("fake GC refuses", code=Code.TRY_AGAIN_LATER)


def run_dispatch(env: dict[str, str], stdin: bytes) -> None:
    """dispatch.run must return 0/1, print at most one JSON document and never turn a
    parsing problem into an internal error (code 5 from a non-CniError)."""
    conf = decode(stdin)
    if isinstance(conf, dict):  # never let fuzz input choose where metrics are written
        conf["metricsFile"] = ""
        stdin = json.dumps(conf).encode()
    out, err = io.StringIO(), io.StringIO()
    rc = dispatch.run(env, stdin, out, err, handlers=FakeHandlers())
    text = out.getvalue()
    if rc not in (0, 1):
        raise Bug(f"exit status {rc}")
    docs = text.strip().splitlines()
    if len(docs) > 1 or (rc == 1 and not docs):
        raise Bug(f"stdout {text[:200]!r}")
    if docs:
        doc = json.loads(docs[0])
        if rc == 1 and "internal error" in str(doc.get("msg")):
            raise Bug(f"internal error: {doc['msg'][:300]}")


def dispatch_bytes(data: bytes) -> None:
    """Split fuzz bytes into an environment and stdin."""
    head, _, stdin = data.partition(b"\n\n")
    env: dict[str, str] = {}
    for line in head.decode("utf-8", "replace").split("\n"):
        key, _, value = line.partition("=")
        if key and "\x00" not in key + value:
            env[key] = value
    env.setdefault("CNI_COMMAND", "ADD")
    run_dispatch(env, stdin)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


#: name -> target over raw bytes (the atheris driver picks one by the first byte)
BYTE_TARGETS: dict[str, Callable[[bytes], None]] = {
    "netconf": lambda d: netconf(decode(d)),
    "cni_args": lambda d: cni_args(_text(d)),
    "annotation": lambda d: annotation_text(_text(d)),
    "checkpoint": lambda d: checkpoint(_text(d)),
    "prev_result": lambda d: prev_result(decode(d)) if decode(d) is not None else None,
    "dispatch": dispatch_bytes,
}


def guarded(target: Callable[[Any], None], value: Any) -> None:
    """Run ``target``; a CniError is an accepted outcome, anything else propagates."""
    with suppress(CniError):
        target(value)
