"""The table of modes (rdma_cni/vocab/modes.py) against DESIGN.md §2, §3, §4 and §8, and
the rule that no module but modes.py spells a mode name."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rdma_cni.errors import Code, ConfigError
from rdma_cni.vocab import modes
from rdma_cni.vocab.kinds import LinkKind as Link
from rdma_cni.vocab.modes import Capacity, Mode, NicRule, RdmaNetnsMode

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rdma_cni"
NAMES = ("shared", "shared-multi", "shared-host", "exclusive")
RDMA, RDMA_HOST = "vke.volcengine.com/rdma", "vke.volcengine.com/rdma-host"
S, X = RdmaNetnsMode.SHARED, RdmaNetnsMode.EXCLUSIVE

# DESIGN §2 (datapath, sharing, notes), §3 (fewer distinct NICs than blocks is an
# error in shared and exclusive; shared-multi spreads), §4 (/30 refused in the shared
# modes), §8 (resourceName default, slotsPerNic, hostSlots, deviceConf.mac/ips),
# §2 (RDMA netns mode: shared modes need shared; topologyManagerPolicy).
#        link              nics            ipam   one    resource   capacity
#        mac    netns   topology  claims
EXPECTED = {
    "shared": (Link.IPVLAN, NicRule.OWN, True, False, RDMA, Capacity.PER_NIC,
               False, (S,), True, True),
    "shared-multi": (Link.MACVLAN, NicRule.SPREAD, True, False, RDMA, Capacity.SLOTS_PER_NIC,
                     True, (S,), True, False),
    "shared-host": (Link.IPVLAN, NicRule.EVERY, True, True, RDMA_HOST, Capacity.HOST_SLOTS,
                    False, (S,), False, False),
    "exclusive": (Link.PHYSICAL, NicRule.OWN, False, False, RDMA, Capacity.PER_NIC,
                  False, (S, X), True, True),
}


def _row(t: modes.Traits) -> tuple[object, ...]:
    return (t.link, t.nics, t.pod_ipam, t.one_block, t.resource, t.capacity, t.custom_mac,
            t.rdma_netns, t.topology_policy, t.claims_nic)


@pytest.mark.parametrize("name", NAMES)
def test_each_trait_matches_the_design(name: str) -> None:
    traits = Mode(name).traits
    assert _row(traits) == EXPECTED[name]
    assert traits.shares_nic is not traits.claims_nic
    assert traits.max_prefix == (30 if traits.pod_ipam else None)


def test_modes_are_the_config_strings_in_the_documented_order() -> None:
    assert modes.MODES == NAMES == tuple(Mode)
    assert set(modes.TRAITS) == set(Mode)
    for name in NAMES:
        mode = Mode(name)
        assert mode == name and str(mode) == name and f"{mode}" == name
        assert json.dumps({"mode": mode}) == json.dumps({"mode": name})  # state, conflist
        assert json.loads(json.dumps(mode)) == mode


def test_link_kinds_are_the_saved_plan_kinds() -> None:
    assert [k.value for k in Link] == ["ipvlan", "macvlan", "physical"]


def test_rdma_device_moves_only_with_a_physical_nic_in_exclusive_netns_mode() -> None:
    moving = [(m.value, n) for m in Mode for n in (S, X, None) if m.traits.moves_rdma_device(n)]
    assert moving == [("exclusive", X)]
    assert Mode.EXCLUSIVE.traits.moves_rdma_device("exclusive")  # as RDMA netlink reads it


def test_of_and_parse() -> None:
    assert Mode.of("shared-host") is Mode.SHARED_HOST
    assert Mode.of(Mode.SHARED) is Mode.SHARED
    for bad in ("bogus", "", None, 3, "Shared"):
        assert modes.parse(bad) is None
        with pytest.raises(ConfigError) as info:
            Mode.of(bad, "--mode")
        assert info.value.code == Code.INVALID_CONFIG
        assert info.value.msg.endswith(
            "from --mode: expected one of shared, shared-multi, shared-host, exclusive")
    assert modes.parse("exclusive") is Mode.EXCLUSIVE


def test_names_for_messages() -> None:
    assert modes.names() == "shared, shared-multi, shared-host, exclusive"
    assert modes.names(last=" or ") == "shared, shared-multi, shared-host or exclusive"
    assert modes.names_where(lambda t: t.custom_mac) == "shared-multi"
    assert modes.names_where(lambda t: t.pod_ipam) == "shared, shared-multi or shared-host"
    assert modes.names_where(lambda t: t.claims_nic) == "shared or exclusive"
    assert modes.where(lambda t: t.one_block) == (Mode.SHARED_HOST,)


def test_importing_the_table_is_cheap() -> None:
    probe = ("import sys, json; import rdma_cni.vocab.modes; "
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('rdma_cni') "
             "or m in ('pydantic', 'pydantic_core', 'pyroute2', 'grpc', 'netaddr'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, check=True, cwd=str(ROOT)).stdout
    assert json.loads(out) == ["rdma_cni", "rdma_cni.errors", "rdma_cni.records", "rdma_cni.vocab",
                               "rdma_cni.vocab.kinds", "rdma_cni.vocab.modes"]


# -- no mode name outside modes.py ------------------------------------------------

#: (file, string): the same word in another vocabulary, with the reason
ALLOWED = {
    ("rdma_cni/tools/doctor_integrity.py", "shared"),  # mount propagation (proc(5))
}
_WORDS = re.compile(r"\b(shared-multi|shared-host)\b|\bmode (shared|exclusive)\b|"
                    r"\b(shared|exclusive) mode\b")


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, kinds) and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}


def mode_literals(source: str, where: str) -> list[str]:
    """Mode names spelled in ``source``: a string constant that is a mode name, or
    (outside docstrings) a message naming one. ``where`` is the file, for ALLOWED."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        text = node.value
        if (where, text) in ALLOWED:
            continue
        if text in NAMES or (id(node) not in docs and _WORDS.search(text)):
            found.append(f"{where}:{node.lineno}: {text!r}")
    return found


def test_the_checker_finds_what_it_should() -> None:
    src = '''
"""Module docstring about shared-multi mode is prose."""
a = mode == "exclusive"
b = mode in ("shared", "x")
c = f"{x} in shared-host: {y}"
d = {"shared-multi": 1}
e = "use mode exclusive"
f = "exclusive mode only"
g = "shared:1"
h = "a data dir shared between nodes"
'''
    found = mode_literals(src, "rdma_cni/x.py")
    assert sorted(int(f.split(":")[1]) for f in found) == [3, 4, 5, 6, 7, 8]
    assert mode_literals('k = "shared"', "rdma_cni/tools/doctor_integrity.py") == []


def test_no_mode_name_outside_modes_py() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "rdma_cni/vocab/modes.py" or rel.startswith("rdma_cni/proto/"):
            continue
        found += mode_literals(path.read_text(encoding="utf-8"), rel)
    assert found == [], "mode names belong in rdma_cni/vocab/modes.py:\n" + "\n".join(found)
