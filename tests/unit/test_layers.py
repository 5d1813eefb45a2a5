"""The package's layers, read from the source with ``ast`` (nothing is imported).

Lowest first (README "Code map", docs/architecture.md "Layers"): the base modules,
then vocab/, adapters/, models/ and store/ (neither imports the other), ipam/, node/,
datapath/, cni/, resident/, tools/, kube/ and the command line. A module imports from
its own package or from a lower layer only; vocab/ imports nothing of ours but the
base modules ``errors`` and ``defaults``. No circle either, between packages or
between files, counting the imports made inside functions (they run on first call)
and the modules ``cli.SUBCOMMANDS`` names as strings. Imports under
``if TYPE_CHECKING`` never run: the layer rule holds for them, the circle rule not.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
PKG = "rdma_cni"
#: lowest first; an import between two packages of one layer is refused, except in
#: the first (leaf modules) and the last (the command line)
LAYERS = [
    {"errors", "defaults", "confdefaults", "jsondoc", "regfile", "testhooks", "log", "logsetup",
     "cliargs", "__init__", "proto", "records", "lightpkg"},
    {"vocab"}, {"adapters"}, {"models", "store"}, {"ipam"}, {"node"}, {"datapath"},
    {"cni"}, {"resident"}, {"tools"}, {"kube"}, {"cli", "__main__"},
]
SIDEWAYS_OK = {0, len(LAYERS) - 1}
VOCAB_MAY = {"rdma_cni.errors", "rdma_cni.defaults", "rdma_cni.records"}


class Edge(NamedTuple):
    src: str
    dst: str
    where: str  # file:line
    kind: str  # top, func (inside a def), typing (under TYPE_CHECKING)


class _Imports(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: list[tuple[int, str, ast.Import | ast.ImportFrom]] = []
        self.kind = "top"

    def _inside(self, node: ast.AST, kind: str) -> None:
        outer, self.kind = self.kind, kind if self.kind == "top" else self.kind
        self.generic_visit(node)
        self.kind = outer

    def visit_FunctionDef(self, node: ast.AST) -> None:
        self._inside(node, "func")

    def visit_AsyncFunctionDef(self, node: ast.AST) -> None:
        self._inside(node, "func")

    def visit_Lambda(self, node: ast.AST) -> None:
        self._inside(node, "func")

    def visit_If(self, node: ast.If) -> None:
        t = node.test
        name = t.id if isinstance(t, ast.Name) else getattr(t, "attr", None)
        if name != "TYPE_CHECKING":
            self.generic_visit(node)
            return
        outer, self.kind = self.kind, "typing"
        for n in node.body:
            self.visit(n)
        self.kind = outer
        for n in node.orelse:
            self.visit(n)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.append((node.lineno, self.kind, node))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.found.append((node.lineno, self.kind, node))


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted((root / PKG).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _known(name: str, known: set[str]) -> str:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def targets(mod: str, is_pkg: bool, node: ast.Import | ast.ImportFrom,
            known: set[str]) -> list[str]:
    """The modules of ours one import statement loads."""
    if isinstance(node, ast.Import):
        return [m for a in node.names if (m := _known(a.name, known))]
    base = node.module or ""
    if node.level:
        parts = mod.split(".")[: len(mod.split(".")) - (0 if is_pkg else 1)]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    if base != PKG and not base.startswith(PKG + "."):
        return []
    subs = [f"{base}.{a.name}" for a in node.names]
    out = [s for s in subs if s in known]
    if len(out) < len(subs) and _known(base, known):
        out.append(_known(base, known))
    return out


def subcommand_edges(root: Path, known: set[str]) -> list[Edge]:
    """cli -> each module ``cli.SUBCOMMANDS`` names (loaded by importlib on use)."""
    tree = ast.parse((root / PKG / "cli.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SUBCOMMANDS":
            assert isinstance(node.value, ast.Dict)
            return [Edge(f"{PKG}.cli", v.value, f"{PKG}/cli.py:{v.lineno}", "func")
                    for v in node.value.values if isinstance(v, ast.Constant)]
    raise AssertionError("rdma_cni/cli.py has no SUBCOMMANDS")


def edges(root: Path) -> list[Edge]:
    files = modules(root)
    known = set(files)
    out = []
    for mod, path in files.items():
        c = _Imports()
        c.visit(ast.parse(path.read_text(), str(path)))
        for line, kind, node in c.found:
            for dst in targets(mod, path.name == "__init__.py", node, known):
                if dst != mod:
                    out.append(Edge(mod, dst, f"{path.relative_to(root)}:{line}", kind))
    return out + subcommand_edges(root, known)


def package_of(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def cycles(pairs: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    adj: dict[str, list[str]] = defaultdict(list)
    for s, d in sorted(pairs):
        adj[s].append(d)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted({n for p in pairs for n in p}):
        if v not in index:
            visit(v)
    return out


def layer_of(pkg: str) -> int:
    return next((i for i, group in enumerate(LAYERS) if pkg in group), -1)


def against_layers(all_edges: list[Edge]) -> list[Edge]:
    bad = []
    for e in all_edges:
        s, d = layer_of(package_of(e.src)), layer_of(package_of(e.dst))
        same = package_of(e.src) == package_of(e.dst)
        if same or min(s, d) < 0:  # a package without a layer fails its own test
            continue
        if d > s or (d == s and s not in SIDEWAYS_OK):
            bad.append(e)
    return bad


def _run(all_edges: list[Edge]) -> list[Edge]:
    return [e for e in all_edges if e.kind != "typing"]


def _shown(found: list[Edge]) -> str:
    return f"{len(found)}:\n" + "\n".join(f"  {e.where} {e.src} -> {e.dst} ({e.kind})"
                                          for e in found)


# -- the tree ----------------------------------------------------------------------

def test_every_package_has_a_layer() -> None:
    pkgs = {package_of(m) for m in modules(ROOT)}
    assert sorted(p for p in pkgs if layer_of(p) < 0) == []


def test_the_subcommands_name_modules_that_exist() -> None:
    known = set(modules(ROOT))
    assert [e.dst for e in subcommand_edges(ROOT, known) if e.dst not in known] == []


def test_no_circle_between_packages() -> None:
    pairs = {(package_of(e.src), package_of(e.dst)) for e in _run(edges(ROOT))}
    found = cycles({(s, d) for s, d in pairs if s != d})
    assert found == [], f"{len(found)} package-level circle(s): {found}"


def test_no_circle_between_files() -> None:
    found = cycles({(e.src, e.dst) for e in _run(edges(ROOT))})
    assert found == [], f"{len(found)} file-level circle(s): {found}"


def test_no_import_against_the_layers() -> None:
    found = against_layers(edges(ROOT))
    assert found == [], "imports against the layers " + _shown(found)


def test_vocab_imports_only_the_base() -> None:
    found = [e for e in edges(ROOT) if package_of(e.src) == "vocab"
             and package_of(e.dst) != "vocab" and e.dst not in VOCAB_MAY]
    assert found == [], "vocab imports beyond errors and defaults " + _shown(found)


def test_the_port_protocols_have_at_most_ten_methods() -> None:
    tree = ast.parse((ROOT / PKG / "vocab" / "ports.py").read_text())
    classes = {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}

    def methods(name: str) -> set[str]:
        c = classes[name]
        own = {f.name for f in c.body if isinstance(f, ast.FunctionDef)}
        return own.union(*(methods(b.id) for b in c.bases
                           if isinstance(b, ast.Name) and b.id in classes))

    sizes = {name: len(methods(name)) for name in classes if name != "NetlinkPort"}
    assert {n: k for n, k in sizes.items() if k > 10} == {}
    assert len(methods("NetlinkPort")) == len(set().union(*map(methods, sizes)))


# -- the checker -------------------------------------------------------------------

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    files = {"cli.py": "SUBCOMMANDS = {'x': 'rdma_cni.tools.x'}\n", "__init__.py": "",
             **files}
    for rel, text in files.items():
        path = tmp_path / PKG / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_checker_finds_circles_and_upward_imports(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "store/__init__.py": "", "node/__init__.py": "", "tools/__init__.py": "",
        "vocab/__init__.py": "", "tools/x.py": "import rdma_cni.cli\n",
        "store/a.py": "def f():\n    from rdma_cni.node import b\n",
        "node/b.py": "from rdma_cni.store import a\nfrom . import c\n",
        "node/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from rdma_cni.node.b import B\n",
        "vocab/k.py": "from rdma_cni import errors, jsondoc\n",
        "errors.py": "", "jsondoc.py": "",
    })
    found = edges(root)
    run = _run(found)
    pairs = {(package_of(e.src), package_of(e.dst)) for e in run}
    assert sorted(cycles({(s, d) for s, d in pairs if s != d})) == [
        ["cli", "tools"], ["node", "store"]]
    assert sorted(cycles({(e.src, e.dst) for e in run})) == [
        ["rdma_cni.cli", "rdma_cni.tools.x"], ["rdma_cni.node.b", "rdma_cni.store.a"]]
    assert [(e.src, e.kind) for e in against_layers(found)] == [
        ("rdma_cni.store.a", "func"), ("rdma_cni.tools.x", "top")]
    assert {e.dst for e in found if e.src == "rdma_cni.vocab.k"} == {
        "rdma_cni.errors", "rdma_cni.jsondoc"}
