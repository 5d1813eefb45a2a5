"""Boundary models on pydantic's validation core, without pydantic's model layer.

The config and annotation models are validated by ``pydantic_core.SchemaValidator``
(pydantic's own engine: the same validators, the same errors) from schemas written
here with ``pydantic_core.core_schema``, the ones ``pydantic.BaseModel`` would
generate for the same fields. Importing ``pydantic`` and building its model classes
costs about 60 ms per exec (its submodules, ``importlib.metadata`` for its plugin
lookup, dataclasses of its own); the exec'd plugin pays that on every in-process ADD,
so the boundary imports ``pydantic_core`` only (bench/README.md, figure 6).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic_core import PydanticCustomError, SchemaValidator, ValidationError
from pydantic_core import core_schema as cs

from rdma_cni.errors import escaped, shown

__all__ = ["Model", "ValidationError", "after", "explain", "field", "ipv4_address", "model",
           "sub_model", "validator"]

M = TypeVar("M", bound="Model")
_MISSING: Any = object()


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


def field(schema: cs.CoreSchema, default: Any = _MISSING,
          factory: Callable[[], Any] | None = None) -> cs.ModelField:
    """A model field: required, with a default value, or with a default factory."""
    if factory is not None:
        schema = cs.with_default_schema(schema, default_factory=factory)
    elif default is not _MISSING:
        schema = cs.with_default_schema(schema, default=default)
    return cs.model_field(schema)


def sub_model(schema: cs.ModelSchema) -> cs.ModelField:
    """A sub-object field that may be left out: then validated from ``{}`` (a new object
    with the sub-model's defaults each time, as pydantic's ``default_factory=Model``)."""
    return cs.model_field(cs.with_default_schema(schema, default={}, validate_default=True))


def model(cls: type[Model], fields: dict[str, cs.ModelField],
          extra: Literal["forbid", "ignore"], strict: bool = False) -> cs.ModelSchema:
    """The schema of ``cls`` built from ``fields`` (pydantic's model, field-for-field)."""
    config = cs.CoreConfig(title=cls.__name__, extra_fields_behavior=extra)
    if strict:
        config["strict"] = True
    return cs.model_schema(cls, cs.model_fields_schema(fields, model_name=cls.__name__),
                           config=config)


def after(schema: cs.CoreSchema, check: Callable[[Any], Any]) -> cs.CoreSchema:
    """``schema``, then ``check`` (a ValueError it raises is a ``value_error``)."""
    return cs.no_info_after_validator_function(check, schema)


def _ipv4(value: Any) -> ipaddress.IPv4Address:
    if isinstance(value, ipaddress.IPv4Address):
        return value
    try:
        return ipaddress.IPv4Address(value)
    except ValueError:
        raise PydanticCustomError("ip_v4_address", "Input is not a valid IPv4 address") from None


def ipv4_address() -> cs.CoreSchema:
    """An ``ipaddress.IPv4Address`` from its text (pydantic's lax IPv4Address)."""
    return cs.no_info_plain_validator_function(_ipv4)


def validator(schema: cs.CoreSchema, cls: type[M]) -> Callable[[Any], M]:
    """The validating constructor of ``cls`` (raises ValidationError)."""
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
