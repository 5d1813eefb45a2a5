"""The typed attachment state: what ADD made, enough for DEL/CHECK/GC to work from
the saved record alone. Stdlib only (DEL loads it on every call; no pydantic).

The JSON form is the record of ``state/<digest>.json`` (see :mod:`rdma_cni.store.core`)::

    {"schema": 1, "key": {...}, "status": "ready", "mode": "shared-multi",
     "netns": "/var/run/netns/x", "pod": "ns/name", "podUID": "...",
     "rulePriority": 20000, "interfaces": [...], "result": {...} | null,
     "origin": {...}, "cniConfName": "rdma", "request": "<token>",
     "nicPendingSince": {"boot": "<boot id>", "boottime": 1234.5},
     "written": {"boot": "<boot id>", "boottime": 812.5}}

``origin``, ``cniConfName`` (release 0.1.0 wrote none), ``request``,
``nicPendingSince`` and ``written`` are optional; every other field has its default
here, once. Both of those are a :class:`rdma_cni.store.boot.BootMark` (the boot's
``CLOCK_BOOTTIME`` with the kernel's boot ID): ``written`` when ADD wrote the record
(earlier releases wrote none), ``nicPendingSince`` when a DEL first saw an exclusive NIC
not back (earlier releases wrote a number, the wall clock, which reads as a mark of no
boot).
Keys this release does not know are kept in :attr:`AttachmentState.extra` and
written back, so a round trip loses nothing a newer release wrote."""

from __future__ import annotations

from typing import Any

from rdma_cni.confdefaults import DEFAULTS
from rdma_cni.records import field, record, replace
from rdma_cni.store.boot import BootMark, is_number
from rdma_cni.store.records import plan_from_dict, plan_to_dict
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.plan import IfacePlan

SCHEMA = 1
CONF_NAME = "cniConfName"
PENDING_SINCE = "nicPendingSince"
_KNOWN = frozenset({"schema", "key", "status", "mode", "netns", "pod", "podUID",
                    "rulePriority", "interfaces", "result", "origin", CONF_NAME,
                    "request", PENDING_SINCE, "written"})


class StateError(ValueError):
    """A record whose interfaces teardown cannot use."""


@record
class AttachmentState:
    status: str = ""
    mode: str = ""
    netns: str = ""
    pod: str = ""  # "namespace/name"
    pod_uid: str = ""
    rule_priority: int = DEFAULTS["routing.rulePriority"]
    interfaces: tuple[IfacePlan, ...] = ()
    result: dict[str, Any] | None = None  # our part of the CNI result (ready records)
    origin: dict[str, Any] | None = None  # see rdma_cni.node.origin
    conf_name: str = ""  # the entry's cniConfName; "" in records of 0.1.0
    request: str = ""  # the token of the ADD that wrote it
    nic_pending_since: BootMark | None = None  # DEL first saw an exclusive NIC not back
    written: BootMark | None = None  # when ADD wrote it
    key: AttachmentKey | None = None  # set by the store
    schema: int = SCHEMA
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def legacy(self) -> bool:
        """Written by release 0.1.0 (no cniConfName)."""
        return not self.conf_name

    def with_(self, **changes: Any) -> AttachmentState:
        return replace(self, **changes)

    @classmethod
    def from_json(cls, rec: dict[str, Any]) -> AttachmentState:
        """Tolerant of every record this release and 0.1.0 wrote; :class:`StateError`
        when an interface entry cannot be used."""
        try:
            interfaces = tuple(plan_from_dict(d) for d in rec.get("interfaces") or [])
        except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
            raise StateError(f"unusable interfaces: {exc!r}"[:200]) from exc
        return cls(
            status=_str(rec.get("status")), mode=_str(rec.get("mode")),
            netns=_str(rec.get("netns")), pod=_str(rec.get("pod")),
            pod_uid=_str(rec.get("podUID")),
            rule_priority=_int(rec.get("rulePriority")) or DEFAULTS["routing.rulePriority"],
            interfaces=interfaces, result=_dict(rec.get("result")),
            origin=_dict(rec.get("origin")), conf_name=_str(rec.get(CONF_NAME)),
            request=_str(rec.get("request")),
            nic_pending_since=_mark(rec.get(PENDING_SINCE)),
            written=_mark(rec.get("written"), of_a_boot=True),
            key=_key(rec.get("key")),
            schema=_int(rec.get("schema")) or SCHEMA,
            extra={k: v for k, v in rec.items() if k not in _KNOWN},
        )

    def to_json(self) -> dict[str, Any]:
        rec: dict[str, Any] = {
            **self.extra, "schema": self.schema, "status": self.status, "mode": self.mode,
            "netns": self.netns, "pod": self.pod, "podUID": self.pod_uid,
            "rulePriority": self.rule_priority,
            "interfaces": [plan_to_dict(p) for p in self.interfaces], "result": self.result,
        }
        optional = ((CONF_NAME, self.conf_name), ("origin", self.origin),
                    ("request", self.request))
        rec.update((k, v) for k, v in optional if v)
        marks = ((PENDING_SINCE, self.nic_pending_since), ("written", self.written))
        rec.update((k, v.to_json()) for k, v in marks if v is not None)
        if self.key is not None:
            rec["key"] = self.key.as_dict()
        return rec


def make_state(status: str, mode: str, netns: str, pod: str, uid: str, priority: int,
               plans: list[IfacePlan], result: dict[str, Any] | None = None,
               origin: dict[str, Any] | None = None, *,
               conf_name: str = "", request: str = "",
               written: BootMark | None = None) -> AttachmentState:
    """``origin`` (:func:`rdma_cni.node.origin.origin_of`): the node and netns identity;
    ``conf_name``: the entry's cniConfName (see
    :attr:`rdma_cni.vocab.attachment.AttachmentKey.legacy`); ``written``: when
    (:meth:`rdma_cni.store.boot.BootMark.now`)."""
    return AttachmentState(status=status, mode=mode, netns=netns, pod=pod, pod_uid=uid,
                           rule_priority=priority, interfaces=tuple(plans), result=result,
                           origin=origin or None, conf_name=conf_name, request=request,
                           written=written)


def _mark(v: Any, of_a_boot: bool = False) -> BootMark | None:
    mark = BootMark.from_json(v)
    return None if mark is None or (of_a_boot and mark.boot is None) else mark


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _int(v: Any) -> int:
    return int(v) if is_number(v) else 0


def _key(v: Any) -> AttachmentKey | None:
    try:
        return AttachmentKey.from_dict(v) if isinstance(v, dict) else None
    except KeyError:
        return None


def _dict(v: Any) -> dict[str, Any] | None:
    return v if isinstance(v, dict) else None
