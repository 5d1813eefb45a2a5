"""Generate the boundary models' runtime modules from their one declaration.

    python3 scripts/gen_models.py          # write both files
    python3 scripts/gen_models.py --check  # exit 1 if either is out of date

From rdma_cni/models/declared.py (pydantic ``BaseModel`` classes) it writes
rdma_cni/models/generated.py: a plain class per model (on ``models.core.Model``, with
the declaration's annotations and properties) and, for each model in ``VALIDATED``, the
core schema pydantic builds for it, as a Python literal for
``pydantic_core.SchemaValidator`` (serializers, JSON-schema metadata and refs dropped;
each ``cls`` is the generated class). And rdma_cni/confdefaults.py: ``DEFAULTS``,
``BOUNDS`` and ``CHOICES`` of the config's keys, literals only. A callable the schema
calls must be a function or class of the package (the declaration's checks), or a
builtin type: anything of pydantic's own is refused, since the plugin does not import
pydantic. tests/unit/test_models_generated.py compares the output with the files.
"""

from __future__ import annotations

import enum
import inspect
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.gen_models_defaults import confdefaults_text  # noqa: E402
from scripts.gen_models_text import HEADER, code, literal  # noqa: E402

DECLARED = "rdma_cni.models.declared"
GENERATED = ROOT / "rdma_cni/models/generated.py"
CONFDEFAULTS = ROOT / "rdma_cni/confdefaults.py"
_DROPPED = frozenset(("metadata", "ref", "serialization", "json_schema_input_schema"))


class Names:
    """The names a generated module refers to, and the imports that bind them."""

    def __init__(self) -> None:
        self.imports: set[str] = set()

    def of(self, obj: Any) -> str:
        if obj is types.NoneType or obj is None:
            return "None"
        if isinstance(obj, enum.Enum):
            return f"{self.of(type(obj))}.{obj.name}"
        module = getattr(obj, "__module__", "")
        name = getattr(obj, "__qualname__", "")
        if module == "builtins" and isinstance(obj, type):
            return name
        if module == DECLARED and isinstance(obj, type):
            return name
        if not module.startswith("rdma_cni.") or module == DECLARED or "." in name or "<" in name:
            raise SystemExit(f"gen_models: {obj!r} is not a function or class of the package")
        if isinstance(obj, type):
            self.imports.add(f"from {module} import {name}")
            return name
        parent, _, leaf = module.rpartition(".")
        self.imports.add(f"from {parent} import {leaf}")
        return f"{leaf}.{name}"

    def stdlib(self, module: str, name: str) -> str:
        self.imports.add(f"import {module}")
        return f"{module}.{name}"


def cleaned(schema: Any, names: Names, hoisted: dict[str, Any]) -> Any:
    """The core schema with pydantic's extras dropped and every object named. A model's
    schema goes to ``hoisted``, a constant ``<MODEL>_SCHEMA`` each, and is named."""
    if isinstance(schema, dict):
        if schema.get("type") in ("definitions", "definition-ref"):
            raise SystemExit("gen_models: a model used twice by reference is not supported")
        out = {k: cleaned(v, names, hoisted) for k, v in schema.items() if k not in _DROPPED}
        if schema.get("type") != "model":
            return out
        name = f"{schema['cls'].__name__.upper()}_SCHEMA"
        hoisted[name] = out
        return code(name)
    if isinstance(schema, list):
        return [cleaned(v, names, hoisted) for v in schema]
    if isinstance(schema, str | int | float | bool) and not isinstance(schema, enum.Enum):
        return schema
    if schema is None:
        return None
    return code(names.of(schema))


def hint(tp: Any, names: Names) -> str:
    """The source text of a resolved annotation."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return f"Literal[{', '.join(literal(a) for a in args)}]"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(hint(a, names) for a in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(hint(a, names) for a in args)}]"
    if tp is typing.Any:
        return "Any"
    if getattr(tp, "__module__", "") == "ipaddress":
        return names.stdlib("ipaddress", tp.__name__)
    return names.of(tp)


def model_class(cls: Any, names: Names) -> str:
    """The generated class of one declared model: annotations, docstring, properties."""
    lines = [f"class {cls.__name__}(Model):"]
    doc = cls.__dict__.get("__doc__")
    if doc:
        lines += [f'    """{doc}"""', ""]
    hints = typing.get_type_hints(cls, vars(sys.modules[DECLARED]))
    lines += [f"    {field}: {hint(hints[field], names)}" for field in cls.model_fields]
    for value in cls.__dict__.values():
        if isinstance(value, property):
            source = textwrap.dedent(inspect.getsource(value.fget))  # type: ignore[arg-type]
            lines += ["", textwrap.indent(source.rstrip("\n"), "    ")]
    return "\n".join(lines) + "\n"


def models_of(declared: types.ModuleType) -> list[type]:
    from pydantic import BaseModel

    return [v for k, v in vars(declared).items() if isinstance(v, type)
            and issubclass(v, BaseModel) and v.__module__ == DECLARED
            and k == v.__name__ and not k.startswith("_")]


def generated_text() -> str:
    """rdma_cni/models/generated.py."""
    declared = _declared()
    names = Names()
    names.imports.add("from rdma_cni.models.core import Model")
    classes = [model_class(cls, names) for cls in models_of(declared)]
    hoisted: dict[str, Any] = {}
    for cls in declared.VALIDATED:
        cleaned(cls.__pydantic_core_schema__, names, hoisted)
    schemas = [f"{name}: Any = {literal(schema)}\n" for name, schema in hoisted.items()]
    doc = ('"""The boundary models\' classes and validation schemas (see '
           'rdma_cni/models/declared.py)."""\n')
    head = [HEADER + doc, "from __future__ import annotations\n",
            _imports(names.imports | {"from typing import Any, Literal"})]
    return "\n".join(head) + "\n\n" + "\n\n".join(classes + schemas)


def _imports(lines: set[str]) -> str:
    """Import lines in isort's order: stdlib, then the package."""
    std = sorted(x for x in lines if "rdma_cni" not in x)
    ours = sorted(x for x in lines if "rdma_cni" in x)
    std = sorted(x for x in std if x.startswith("import ")) + sorted(
        x for x in std if x.startswith("from "))
    return "\n".join(std) + "\n\n" + "\n".join(ours) + "\n"


def _declared() -> types.ModuleType:
    import importlib

    return importlib.import_module(DECLARED)


def main(argv: list[str]) -> int:
    outputs = {GENERATED: generated_text(), CONFDEFAULTS: confdefaults_text(_declared())}
    stale = [p for p, text in outputs.items() if not p.exists() or p.read_text() != text]
    if "--check" in argv:
        for p in stale:
            print(f"gen_models: {p.relative_to(ROOT)} is out of date", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.write_text(outputs[p])
        print(f"gen_models: wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
