"""Differential check of the boundary models: today's pydantic-core schemas
(rdma_cni/models/generated.py, from rdma_cni/models/declared.py) against the pydantic
``BaseModel`` classes of 6948f88, pinned in tests/fixtures/models_6948f88.py.

Every input goes through today's ``load_netconf`` (``validate_blocks``) twice, once with
its schema validator and once with the pinned class's ``model_validate`` in its place:
both must accept it with the same values (types included, sub-models field by field) or refuse it
with the same error text. The inputs: a valid config (a valid block) with each key, and
each key of every sub-object, set to each of the values in ``VALUES`` or left out, and
seeded random mixes of several such changes: 6,980 inputs (``pytest -s`` prints each
side's count; ``test_case_count`` holds the total the docs quote).
"""

from __future__ import annotations

import copy
import ipaddress
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fixtures import models_6948f88 as old

from rdma_cni.errors import CniError
from rdma_cni.models import blocks as new_blocks
from rdma_cni.models import netconf as new_netconf
from rdma_cni.models.core import Model

DROP = object()  # leave the key out
CIDR = "198.51.100.0/24"
VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 2, 16, 64, 65, 67, 68, 100, 1024, 1025, 32765, 32766,
    65535, 65536, 0x7FFFFF00, 0x7FFFFF01, 2**63, 1.0, 1.5, float("inf"),
    "", " ", "x", "0", "1", "16", "true", "a" * 253, "a" * 254, "rdma", "shared",
    "shared-multi", "exclusive", "shared-host", "SHARED", "auto", "config", "debug",
    "warning", "/abs/dir", "rel/dir", "rnic0", "eth0", "eth1", "lo", "..", "a b",
    "x" * 16, "198.51.100.9", CIDR, "198.51.100.9/24", "2001:db8::1", "not-an-ip",
    "02:00:00:00:00:01", "02:AB:00:00:00:01", "01:00:5e:00:00:01", "é", "/x\x00y",
    [], ["rnic0"], ["rnic0", "rnic0"], ["lo"], [1], [CIDR, "198.51.100.7"], ["x", None],
    {}, {"x": 1}, {"name": "rdma"}, {CIDR: {}}, {CIDR: {"rangeStart": "198.51.100.9"}},
    {"198.51.100.9/24": {}}, {"deviceID": "rnic0"},
]
NETCONF_BASE: dict[str, Any] = {
    "cniVersion": "0.4.0", "name": "vpc-cni", "type": "rdma-cni", "mode": "shared-multi",
    "devices": ["rnic0", "rnic1"], "mtu": 9000, "maxInterfaces": 8,
    "ipam": {"type": "host-local", "ranges": {CIDR: {
        "rangeStart": "198.51.100.9", "rangeEnd": "198.51.100.99",
        "exclude": ["198.51.100.20/30", "198.51.100.40"]}}},
    "routing": {"tableBase": 200, "rulePriority": 30000},
    "kubelet": {"podResourcesSocket": "/k.sock", "checkpointFile": "/ckpt",
                "devicePluginDir": "/dp"},
    "dataDir": "/var/lib/x", "runtimeConfig": {"deviceID": "rnic0"},
}
RANGE = ("ipam", "ranges", CIDR)
NETCONF_PATHS: list[tuple[Any, ...]] = [
    *[(k,) for k in ("cniVersion", "name", "type", "cniConfName", "mode", "devices",
                     "resourceName", "allocation", "maxInterfaces", "mtu", "ipam", "routing",
                     "kubelet", "slotsPerNic", "hostSlots", "dataDir", "logFile", "logLevel",
                     "residentSocket", "metricsFile", "runtimeConfig", "bogus")],
    ("devices", 0), ("ipam", "type"), ("ipam", "ranges"), ("ipam", "bogus"), RANGE,
    (*RANGE, "rangeStart"), (*RANGE, "rangeEnd"), (*RANGE, "exclude"),
    (*RANGE, "exclude", 0), (*RANGE, "bogus"), ("routing", "tableBase"),
    ("routing", "rulePriority"), ("routing", "bogus"), ("kubelet", "podResourcesSocket"),
    ("kubelet", "checkpointFile"), ("kubelet", "devicePluginDir"), ("kubelet", "bogus"),
]
BLOCK_BASE: dict[str, Any] = {
    "name": "n", "namespace": "ns", "cniConf": {"name": "rdma"},
    "deviceConf": {"ifName": "eth9", "mac": "02:00:00:00:00:01", "ips": ["198.51.100.9"]},
}
BLOCK_PATHS: list[tuple[Any, ...]] = [
    ("name",), ("namespace",), ("cniConf",), ("cniConf", "name"), ("cniConf", "bogus"),
    ("deviceConf",), ("deviceConf", "ifName"), ("deviceConf", "mac"), ("deviceConf", "ips"),
    ("deviceConf", "ips", 0), ("deviceConf", "bogus"), ("bogus",),
]
RANDOM_MIXES = 1500


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of ``doc`` with ``path`` set to ``value`` (or removed: DROP); a path through
    something that is no longer a container leaves the document as it is."""
    doc = copy.deepcopy(doc)
    node = doc
    for part in path[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return doc
    last = path[-1]
    if isinstance(node, dict) and value is DROP:
        node.pop(last, None)
    elif isinstance(node, dict) or (isinstance(node, list) and isinstance(last, int)
                                     and last < len(node)):
        if value is DROP:
            del node[last]
        else:
            node[last] = copy.deepcopy(value)
    return doc


def cases(base: dict[str, Any], paths: list[tuple[Any, ...]], seed: int) -> Iterator[Any]:
    yield base
    for path in paths:
        for value in [*VALUES, DROP]:
            yield _set(base, path, value)
    rng = random.Random(seed)
    for _ in range(RANDOM_MIXES):
        doc = base
        for _ in range(rng.randint(2, 5)):
            doc = _set(doc, rng.choice(paths), rng.choice([*VALUES, DROP]))
        yield doc


def shape(value: Any) -> Any:
    """Values with their types, models field by field (either model family)."""
    if isinstance(value, Model | old.BaseModel):
        fields = value.__dict__ if isinstance(value, Model) else dict(value)
        return (type(value).__name__, {k: shape(v) for k, v in fields.items()})
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [shape(v) for v in value]
    if isinstance(value, ipaddress.IPv4Address):
        return ("IPv4Address", str(value))
    return (type(value).__name__, value)


def outcome(fn: Callable[[Any], Any], arg: Any) -> Any:
    try:
        return ("ok", shape(fn(arg)))
    except CniError as exc:
        return ("refused", exc.code, exc.msg)
    except Exception as exc:  # a crash on either side is a difference too
        return ("raised", type(exc).__name__, str(exc))


def differences(new: Callable[[Any], Any], ref: Callable[[Any], Any],
                inputs: Iterator[Any]) -> tuple[int, list[tuple[Any, Any, Any]]]:
    n, differ = 0, []
    for doc in inputs:
        n += 1
        a, b = outcome(new, doc), outcome(ref, doc)
        if a != b:
            differ.append((doc, a, b))
    return n, differ


def n_cases(paths: list[tuple[Any, ...]]) -> int:
    return 1 + len(paths) * (len(VALUES) + 1) + RANDOM_MIXES


def pinned(fn: Callable[[Any], Any], module: Any, name: str,
           validate: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` with ``module.name`` (the schema's validator it calls) replaced by
    ``validate`` for the length of each call."""
    def run(arg: Any) -> Any:
        saved = getattr(module, name)
        setattr(module, name, validate)
        try:
            return fn(arg)
        finally:
            setattr(module, name, saved)
    return run


def one_block(block: Any) -> Any:
    return [b for _, b in new_blocks.validate_blocks([(0, block)])]


#: name -> (today's entry point, the module and name of the validator it calls, the pinned
#: class, the valid base input, its paths, the seed of the random mixes)
SIDES: dict[str, tuple[Any, ...]] = {
    "netconf": (new_netconf.load_netconf, new_netconf, "_parse_netconf", old.NetConf,
                NETCONF_BASE, NETCONF_PATHS, 6948),
    "annotation block": (one_block, new_blocks, "parse_block", old.Block,
                         BLOCK_BASE, BLOCK_PATHS, 88),
}


@pytest.mark.parametrize("name", sorted(SIDES))
def test_same_as_the_basemodel_declaration(name: str) -> None:
    entry, module, attr, cls, base, paths, seed = SIDES[name]
    n, differ = differences(entry, pinned(entry, module, attr, cls.model_validate),
                            cases(base, paths, seed))
    print(f"{name} differential: {n} cases, {len(differ)} differ")
    assert differ == [], differ[:3]
    assert n == n_cases(paths)


def test_case_count() -> None:
    """The figure the docs quote (README, bench/README, CHANGELOG): change them with it."""
    assert n_cases(NETCONF_PATHS) + n_cases(BLOCK_PATHS) == 6980
