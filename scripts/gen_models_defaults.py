"""rdma_cni/confdefaults.py's text: the config keys' defaults, bounds and choices, read
from the declaration's fields (scripts/gen_models.py writes it)."""

from __future__ import annotations

import enum
import types
import typing
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from scripts.gen_models_text import HEADER, literal

_DOC = '''"""The config keys' defaults, bounds and choices, as the declaration gives them
(rdma_cni/models/declared.py): literals, importing only ``typing``. The readers of the
raw config that run before (or instead of) its validation, the pass-through path, the
log setup and the resident server among them, take their defaults here. A key of a
sub-object is written ``parent.key``.
"""
'''


def _fields(cls: type[BaseModel], prefix: str = "") -> typing.Iterator[tuple[str, Any]]:
    """(dotted key, FieldInfo) of ``cls`` and of the sub-objects it holds."""
    for name, info in cls.model_fields.items():
        yield prefix + name, info
        sub = info.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            yield from _fields(sub, f"{prefix}{name}.")


def _default(info: Any) -> Any:
    value = info.default
    if value is PydanticUndefined or isinstance(value, dict | list):
        return PydanticUndefined  # required, a factory's, or a sub-object's
    return value.value if isinstance(value, enum.Enum) else value


def _bounds(info: Any) -> tuple[Any, Any] | None:
    ge = next((m.ge for m in info.metadata if isinstance(m, annotated_types.Ge)), None)
    le = next((m.le for m in info.metadata if isinstance(m, annotated_types.Le)), None)
    return None if ge is None or le is None else (ge, le)


def _choices(info: Any) -> tuple[Any, ...] | None:
    """A ``Literal``'s values (an enum's are its class's: ``modes.Mode`` for ``mode``)."""
    tp = info.annotation
    return typing.get_args(tp) if typing.get_origin(tp) is typing.Literal else None


def confdefaults_text(declared: types.ModuleType) -> str:
    defaults, bounds, choices = {}, {}, {}
    for key, info in _fields(declared.CONFIG):
        if (value := _default(info)) is not PydanticUndefined:
            defaults[key] = value
        if (pair := _bounds(info)) is not None:
            bounds[key] = pair
        if (options := _choices(info)) is not None:
            choices[key] = options
    return "\n".join([
        HEADER + _DOC,
        "from typing import Any\n",
        f"DEFAULTS: dict[str, Any] = {literal(defaults)}",
        f"BOUNDS: dict[str, tuple[int, int]] = {literal(bounds)}",
        f"CHOICES: dict[str, tuple[str, ...]] = {literal(choices)}",
    ]) + "\n"
