"""One CRI v1 declaration: the tests' containerd client (tests/support/cri.proto) declares
every message, field and enum value of the agent's own subset
(rdma_cni/proto/cri_v1.proto, generated into cri_v1_pb2.py) alike: same names, numbers,
types and cardinality, so what the tests send a runtime is what the agent reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.cri import load_cri

from rdma_cni.proto import cri_v1_pb2

pytest.importorskip("grpc_tools")


def _field(f: Any) -> tuple[Any, ...]:
    kind = f.message_type or f.enum_type
    return f.number, f.type, f.is_repeated, kind.name if kind is not None else None


def _disagreements(ours: Any, tests: Any) -> list[str]:
    out = []
    for name, msg in ours.message_types_by_name.items():
        other = tests.message_types_by_name.get(name)
        if other is None:
            out.append(f"message {name} is missing")
            continue
        for f in msg.fields:
            o = other.fields_by_name.get(f.name)
            if o is None or _field(o) != _field(f):
                out.append(f"{name}.{f.name}: {_field(f)} against "
                           f"{_field(o) if o is not None else 'nothing'}")
    for name, enum in ours.enum_types_by_name.items():
        other = tests.enum_types_by_name.get(name)
        values = {v.name: v.number for v in enum.values}
        if other is None or {v.name: v.number for v in other.values
                             if v.name in values} != values:
            out.append(f"enum {name} differs")
    return out


def test_the_tests_cri_proto_declares_the_agents_subset_alike(tmp_path: Path) -> None:
    tests = load_cri(tmp_path).DESCRIPTOR
    assert tests.package == "runtime.v1"  # the method paths the runtime serves
    assert _disagreements(cri_v1_pb2.DESCRIPTOR, tests) == []
