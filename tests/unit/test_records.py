"""rdma_cni/records.py: value classes declared as with dataclasses, made without compiling
code; and the in-process ADD's import set, which no longer holds ``dataclasses``."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rdma_cni.records import FrozenRecordError, field, fields, record, replace

ROOT = Path(__file__).resolve().parents[2]


@record
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = field(default_factory=tuple)
    note: str = field(default="", compare=False, repr=False)


@record
class Point3(Point):
    z: int = 0


@record(frozen=False)
class Box:
    items: dict[str, Any] = field(default_factory=dict)
    size: int = 1


@record
class Normalized:
    name: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.name.lower())


def test_arguments_by_position_and_name_with_defaults() -> None:
    assert Point(1).y == 0 and Point(1, 2).y == 2 and Point(x=1, y=3).y == 3
    assert Point(1, tags=("a",)).tags == ("a",)
    assert Point(1).tags == () and Box().items is not Box().items  # a fresh one per instance
    assert Point.__match_args__ == ("x", "y", "tags", "note")


@pytest.mark.parametrize(("args", "kw", "needle"), [
    ((1, 2, (), "n", 5), {}, "takes 4 arguments"),
    ((), {"y": 1}, "missing argument 'x'"),
    ((1,), {"x": 2}, "unexpected or repeated"),
    ((1,), {"w": 2}, "unexpected or repeated"),
])
def test_misuse_is_a_type_error(args: tuple[Any, ...], kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(TypeError, match=needle):
        Point(*args, **kw)


def test_a_field_without_default_after_one_with_is_refused() -> None:
    with pytest.raises(TypeError, match="non-default argument 'b'"):
        @record
        class Bad:
            a: int = 0
            b: int


def test_equality_and_hash_skip_fields_that_do_not_compare() -> None:
    a, b = Point(1, 2, note="one"), Point(1, 2, note="two")
    assert a == b and hash(a) == hash(b)
    assert Point(1, 2) != Point(1, 3)
    assert Point(1, 2) != Point3(1, 2)  # another class is never equal
    assert len({Point(1), Point(1), Point(2)}) == 2
    assert repr(a) == "Point(x=1, y=2, tags=())"


def test_frozen_by_default_and_mutable_on_request() -> None:
    p = Point(1)
    with pytest.raises(FrozenRecordError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.y  # type: ignore[misc]
    box = Box()
    box.size = 3
    assert box.size == 3 and box.items == {}
    with pytest.raises(TypeError):
        hash(box)


def test_inheritance_post_init_replace_and_fields() -> None:
    p3 = Point3(1, 2, z=3)
    assert (p3.x, p3.y, p3.z) == (1, 2, 3) and fields(Point3) == ("x", "y", "tags", "note", "z")
    assert Normalized("ETH1").name == "eth1"
    moved = replace(p3, y=5)
    assert moved == Point3(1, 5, z=3) and p3.y == 2
    assert replace(Normalized("A"), name="B").name == "b"  # __post_init__ runs again
    with pytest.raises(TypeError, match="no field 'w'"):
        replace(p3, w=1)


def test_what_a_subclass_inherits_is_as_dataclasses_gives_it() -> None:
    """A base's ``__post_init__`` runs for its subclass, a field declared again keeps its
    place, and a mutable default is refused (one list would be shared by every instance)."""
    @record
    class Low(Normalized):
        extra: int = 0

    @record
    class Again(Point):
        x: int = 5

    assert Low("ETH1").name == "eth1"
    assert fields(Again) == ("x", "y", "tags", "note") and Again().x == 5
    assert Again(1, 2).y == 2
    with pytest.raises(ValueError, match="mutable default list for field items"):
        @record
        class Shared:
            items: list[int] = []


def test_the_in_process_add_imports_no_dataclasses_nor_openssl() -> None:
    """``@dataclass`` compiles each generated method when a class is defined (about 1 ms
    per frozen class here) and brings ``inspect``, ``ast`` and ``dis`` along: the
    exec'd in-process ADD's modules declare their records with rdma_cni.records. The
    attachment key's digest takes the interpreter's own SHA-256, and a temporary file's
    name ``os.urandom``: ``hashlib`` and ``secrets`` load OpenSSL's libcrypto
    (bench/README.md, figure 6)."""
    probe = ("import sys, json; import rdma_cni.cli, rdma_cni.cni.dispatch, "
             "rdma_cni.cni.commands.add, rdma_cni.cni.commands.delete, "
             "rdma_cni.datapath.execute, rdma_cni.datapath.teardown, rdma_cni.store.core; "
             "from rdma_cni.vocab.attachment import AttachmentKey; "
             "digest = AttachmentKey('n', 'c', 'eth0').digest(); "
             "print(json.dumps([digest, sorted(m for m in ('dataclasses', 'inspect', "
             "'hashlib', 'secrets', '_hashlib') if m in sys.modules)]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, check=True, cwd=str(ROOT)).stdout
    digest, loaded = json.loads(out)
    assert loaded == []
    assert digest == hashlib.sha256(b"n\x00c\x00eth0").hexdigest()[:40]  # the store's keys
