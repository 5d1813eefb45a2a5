"""Boundary models on pydantic's validation core, without pydantic's model layer.

The config and annotation models are declared once, as pydantic ``BaseModel`` classes
(rdma_cni/models/declared.py). scripts/gen_models.py writes the core schemas pydantic
builds from them into rdma_cni/models/generated.py, with a plain class per model on
:class:`Model`; ``pydantic_core.SchemaValidator`` validates with those schemas
(pydantic's own engine: the same validators, the same errors). Importing ``pydantic``
and building its model classes costs about 60 ms per exec (its submodules,
``importlib.metadata`` for its plugin lookup, dataclasses of its own); the exec'd
plugin pays that on every in-process ADD, so the boundary imports ``pydantic_core``
only (bench/README.md, figure 6).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import rdma_cni.adapters.pydanticcorepkg  # isort: skip  # noqa: F401 - before pydantic_core
from pydantic_core._pydantic_core import SchemaValidator, ValidationError

from rdma_cni.errors import escaped, shown

__all__ = ["Model", "ValidationError", "explain", "validator"]

M = TypeVar("M", bound="Model")


class Model:
    """An immutable record whose attributes the validator sets (like a frozen BaseModel)."""

    __slots__ = (
        "__dict__",
        "__pydantic_extra__",
        "__pydantic_fields_set__",
        "__pydantic_private__",
    )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    def __hash__(self) -> int:
        return hash((type(self), *self.__dict__.values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({fields})"


def validator(schema: Any, cls: type[M]) -> Callable[[Any], M]:
    """The validating constructor of ``cls`` from its generated ``schema`` (raises
    ValidationError)."""
    validate: Callable[[Any], M] = SchemaValidator(schema).validate_python
    return validate


_PY_TYPE = re.compile(r" or instance of \w+")
_QUOTED = re.compile(r"'([^'\\]*)'")


def explain(exc: ValidationError) -> str:
    """The first three errors of ``exc``, one clause each: ``where: what``. A key of the
    location that is not plain printable ASCII (a pod author's unknown key may hold a
    newline or a terminal escape) is shown JSON-quoted, like a value."""
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(_key(x) for x in err["loc"])
        msg = _PY_TYPE.sub("", err["msg"].removeprefix("Value error, "))
        msg = escaped(_QUOTED.sub(r'"\1"', msg))  # pydantic quotes choices Python-style
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def _key(part: str | int) -> str:
    text = str(part)
    if text.isascii() and text.isprintable() and '"' not in text and len(text) <= 64:
        return text
    return shown(text)
