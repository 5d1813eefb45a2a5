"""The test tree's own rule: what tests share lives in tests/support/ (or another helper
module), so no test module imports another test module and nothing imports a conftest
(fixtures are registered once, by ``pytest_plugins`` in tests/conftest.py)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """What each import statement anywhere in ``tree`` loads that is forbidden, with its
    line: the module, or (``from a import b``, where b may be a module) a.b."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if _forbidden(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [base] if _forbidden(base) else \
                [f"{base}.{a.name}".lstrip(".") for a in node.names if _forbidden(a.name)]
            out += [(node.lineno, name) for name in names]
    return out


def _forbidden(name: str) -> bool:
    parts = [p for p in name.split(".") if p]
    return any(p.startswith("test_") or p == "conftest" for p in parts)


def offenders(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        found += [f"{path.relative_to(root)}:{line}: imports {name}"
                  for line, name in _imported(tree)]
    return found


def test_no_test_module_or_conftest_is_imported() -> None:
    assert offenders(TESTS) == []


def test_the_scan_sees_each_kind_of_import(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text(
        "import test_b\nfrom integration.conftest import rig\nfrom unit import test_c\n"
        "def f():\n    from test_d import x\n"
        "import support.rigs\nfrom support.fakenode import Node\nimport testhooks\n")
    assert offenders(tmp_path) == [
        "test_a.py:1: imports test_b", "test_a.py:2: imports integration.conftest",
        "test_a.py:3: imports unit.test_c", "test_a.py:5: imports test_d"]
