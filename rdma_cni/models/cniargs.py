"""``CNI_ARGS``: ``K=V;K=V`` pairs, with ``IgnoreUnknown`` and the Kubernetes keys typed.

Pure and cheap: it runs on every invocation, the pass-through ADD included.
"""

from __future__ import annotations

from typing import NamedTuple

from rdma_cni.errors import EnvError, escaped, shown

K8S_KEYS = ("K8S_POD_NAMESPACE", "K8S_POD_NAME", "K8S_POD_INFRA_CONTAINER_ID", "K8S_POD_UID")
_KNOWN = frozenset((*K8S_KEYS, "IgnoreUnknown"))
MAX_LEN = 4096


class CniArgs(NamedTuple):
    pod_namespace: str = ""
    pod_name: str = ""
    infra_container_id: str = ""
    pod_uid: str = ""
    ignore_unknown: bool = False
    extra: dict[str, str] = {}  # never mutated: each parse builds its own

    @property
    def pod(self) -> str:
        return f"{self.pod_namespace}/{self.pod_name}" if self.pod_name else ""


def _truthy(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "t"):
        return True
    if lowered in ("0", "false", "f", ""):
        return False
    raise EnvError(f"invalid CNI_ARGS: IgnoreUnknown={shown(value)} is not a boolean")


def parse_cni_args(raw: str) -> CniArgs:
    if len(raw) > MAX_LEN:
        raise EnvError(f"invalid CNI_ARGS: longer than {MAX_LEN} characters")
    if "\x00" in raw or "\n" in raw:
        raise EnvError("invalid CNI_ARGS: contains a NUL or newline character")
    pairs: dict[str, str] = {}
    for item in raw.split(";"):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise EnvError(f"invalid CNI_ARGS: {shown(item)} is not KEY=VALUE")
        pairs[key] = value
    ignore = _truthy(pairs.get("IgnoreUnknown", ""))
    extra = {k: v for k, v in pairs.items() if k not in _KNOWN}
    if extra and not ignore:
        keys = ", ".join(escaped(k) for k in sorted(extra))
        raise EnvError(f"invalid CNI_ARGS: unknown keys {keys}")
    return CniArgs(
        pod_namespace=pairs.get("K8S_POD_NAMESPACE", ""),
        pod_name=pairs.get("K8S_POD_NAME", ""),
        infra_container_id=pairs.get("K8S_POD_INFRA_CONTAINER_ID", ""),
        pod_uid=pairs.get("K8S_POD_UID", ""),
        ignore_unknown=ignore,
        extra=extra,
    )
