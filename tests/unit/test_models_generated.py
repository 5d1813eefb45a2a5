"""The boundary models are declared once (rdma_cni/models/declared.py, pydantic
``BaseModel``); what the plugin runs is generated from that declaration by
scripts/gen_models.py, and only the declaration imports pydantic."""

from __future__ import annotations

import ast
import ipaddress
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rdma_cni import confdefaults, logsetup
from scripts import gen_models
from scripts.gen_models_defaults import confdefaults_text

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "rdma_cni"
DECLARED = "rdma_cni/models/declared.py"


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports (``from a import b`` counts as ``a`` and ``a.b``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _modules() -> dict[str, set[str]]:
    return {str(p.relative_to(REPO)): _imported(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_generated_module_is_the_declarations() -> None:
    """Regenerated in memory, byte for byte: run scripts/gen_models.py after editing
    rdma_cni/models/declared.py."""
    assert gen_models.GENERATED.read_text() == gen_models.generated_text()


def test_confdefaults_is_the_declarations() -> None:
    assert gen_models.CONFDEFAULTS.read_text() == confdefaults_text(gen_models._declared())


def test_check_mode_agrees() -> None:
    run = subprocess.run([sys.executable, "scripts/gen_models.py", "--check"], cwd=REPO,
                         capture_output=True, text=True)
    assert (run.returncode, run.stderr) == (0, "")


def test_only_the_declaration_imports_pydantic() -> None:
    users = sorted(path for path, names in _modules().items()
                   if any(n == "pydantic" or n.startswith("pydantic.") for n in names))
    assert users == [DECLARED]


def test_no_module_imports_the_declaration() -> None:
    users = sorted(path for path, names in _modules().items()
                   if "rdma_cni.models.declared" in names)
    assert users == []


def test_confdefaults_imports_only_typing() -> None:
    """The fast-path readers (the pass-through ADD among them) import it: literals only."""
    assert _imported(PACKAGE / "confdefaults.py") == {"typing", "typing.Any"}


def test_validation_never_loads_the_declaration() -> None:
    code = """
import sys
from rdma_cni.models.netconf import load_netconf
from rdma_cni.models.blocks import validate_blocks
load_netconf({"cniVersion": "1.0.0", "name": "n", "mode": "shared"})
validate_blocks([(0, {"cniConf": {"name": "rdma"}, "deviceConf": {"ifName": "net1"}})])
print(sorted(m for m in ("pydantic", "rdma_cni.models.declared") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


def test_log_levels_are_the_declared_choices() -> None:
    assert tuple(logsetup._LEVELS) == confdefaults.CHOICES["logLevel"]


def test_native_front_default_socket_is_the_declared_one() -> None:
    """front/rdma-cni-front.c is C: its default is checked against the declaration."""
    source = (REPO / "front/rdma-cni-front.c").read_text()
    match = re.search(r'^#define DEFAULT_SOCKET "([^"]*)"$', source, re.MULTILINE)
    assert match is not None
    assert match.group(1) == confdefaults.DEFAULTS["residentSocket"]


def test_the_generator_refuses_what_the_plugin_could_not_import() -> None:
    """pydantic's own validators (its native IPv4Address here) and functions of the
    declaration module itself would make the runtime import pydantic or the declaration."""
    import pydantic

    class Native(pydantic.BaseModel):
        address: ipaddress.IPv4Address

    for schema in (Native.__pydantic_core_schema__,
                   {"type": "function-plain", "function": {"type": "no-info",
                                                           "function": _in_declared}}):
        with pytest.raises(SystemExit, match="not a function or class of the package"):
            gen_models.cleaned(schema, gen_models.Names(), {})


def _in_declared(value: object) -> object:
    return value


_in_declared.__module__ = gen_models.DECLARED
