"""Value classes declared as with ``dataclasses``, without its code generation.

``@dataclass`` compiles each generated method (``__init__``, ``__eq__``, ``__hash__``,
``__repr__``, and a frozen class's ``__setattr__`` and ``__delattr__``) from source text
when the class is defined: about 1 ms per frozen class on a 2-vCPU VM, and the exec'd
in-process ADD defines some twenty of them on its way (bench/README.md, figure 6). The
methods here are closures over the field list, made without compiling anything, and
``dataclasses`` itself (with ``inspect``, ``ast`` and ``dis``) is not imported.

What is kept of ``dataclasses``: fields from the class's own annotations after those of
a record base, in order; a default or :func:`field` (``default``, ``default_factory``,
``compare``, ``repr``); ``__post_init__``; equality and hashing over the compared fields;
frozen by default (``@record(frozen=False)``: mutable, unhashable); :func:`replace`;
:func:`fields`. Not kept: ``order``, ``kw_only``, ``InitVar``, ``slots``. Positional and
keyword arguments are taken as ``dataclasses`` takes them, and misuse is a TypeError.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")
_MISSING: Any = object()


class FrozenRecordError(AttributeError):
    """An assignment to a field of a frozen record."""


class _Field:
    __slots__ = ("compare", "default", "default_factory", "repr")

    def __init__(self, default: Any, default_factory: Any, compare: bool, repr: bool) -> None:
        self.default, self.default_factory = default, default_factory
        self.compare, self.repr = compare, repr


def field(*, default: Any = _MISSING, default_factory: Callable[[], Any] = _MISSING,
          compare: bool = True, repr: bool = True) -> Any:
    if default is not _MISSING and default_factory is not _MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return _Field(default, default_factory, compare, repr)


class _Spec:
    """A record class's fields: names in order, defaults, factories, and which ones
    equality (and the hash) and the repr use."""

    __slots__ = ("compared", "defaults", "factories", "names", "shown")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.defaults: dict[str, Any] = {}
        self.factories: dict[str, Callable[[], Any]] = {}
        self.compared: list[str] = []
        self.shown: list[str] = []

    def add(self, name: str, f: _Field) -> None:
        """Field ``name`` after those already added; one a base declared is declared
        again in its place (as ``dataclasses`` does)."""
        if f.default is not _MISSING and type(f.default).__hash__ is None:
            raise ValueError(f"mutable default {type(f.default).__name__} for field {name} "
                             "is not allowed: use default_factory")
        if name not in self.names:
            self.names.append(name)
        self.defaults.pop(name, None)
        self.factories.pop(name, None)
        if f.default is not _MISSING:
            self.defaults[name] = f.default
        elif f.default_factory is not _MISSING:
            self.factories[name] = f.default_factory
        for group, wanted in ((self.compared, f.compare), (self.shown, f.repr)):
            if name in group:
                group.remove(name)
            if wanted:
                group.append(name)
        for group in (self.compared, self.shown):  # in field order
            group.sort(key=self.names.index)

    def check(self) -> None:
        defaulted = False
        for name in self.names:
            if name in self.defaults or name in self.factories:
                defaulted = True
            elif defaulted:
                raise TypeError(f"non-default argument {name!r} follows default argument")


@overload
def record(cls: type[T], /) -> type[T]: ...
@overload
def record(*, frozen: bool = True) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(field_specifiers=(field,), frozen_default=True)
def record(cls: type[T] | None = None, /, *, frozen: bool = True) -> Any:
    """The class decorator (``@record`` or ``@record(frozen=False)``)."""
    def wrap(c: type[T]) -> type[T]:
        return _build(c, frozen)
    return wrap if cls is None else wrap(cls)


def _spec_of(cls: type) -> _Spec:
    spec = _Spec()
    for base in reversed(cls.__mro__[1:]):
        inherited: _Spec | None = base.__dict__.get("__record__")
        for name in inherited.names if inherited is not None else ():
            assert inherited is not None
            spec.add(name, _Field(inherited.defaults.get(name, _MISSING),
                                  inherited.factories.get(name, _MISSING),
                                  name in inherited.compared, name in inherited.shown))
    own: dict[str, Any] = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 - strings
    for name, annotation in own.items():
        if "ClassVar" in str(annotation):
            continue
        value = cls.__dict__.get(name, _MISSING)
        f = value if isinstance(value, _Field) else _Field(value, _MISSING, True, True)
        if isinstance(value, _Field):
            if f.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        spec.add(name, f)
    spec.check()
    return spec


def _build(cls: type[T], frozen: bool) -> type[T]:
    spec = _spec_of(cls)
    key = attrgetter(*spec.compared) if spec.compared else (lambda _: ())
    one = len(spec.compared) == 1

    def equal(self: Any, other: Any) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return key(self) == key(other)

    def shown(self: Any) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in spec.shown)
        return f"{type(self).__qualname__}({fields})"

    def hashed(self: Any) -> int:
        return hash((key(self),) if one else key(self))

    def assign(self: Any, name: str, value: Any) -> None:
        raise FrozenRecordError(f"cannot assign to field {name!r}")

    def delete(self: Any, name: str) -> None:
        raise FrozenRecordError(f"cannot delete field {name!r}")

    methods: dict[str, Any] = {
        "__record__": spec, "__match_args__": tuple(spec.names),
        "__init__": _init(spec, getattr(cls, "__post_init__", None)),
        "__eq__": equal, "__repr__": shown, "__hash__": None}
    if frozen:
        methods.update({"__hash__": hashed, "__setattr__": assign, "__delattr__": delete})
    for name, value in methods.items():
        setattr(cls, name, value)
    return cls


def _init(spec: _Spec, post: Callable[[Any], None] | None) -> Callable[..., None]:
    names, n, defaults = tuple(spec.names), len(spec.names), spec.defaults
    known = frozenset(names)

    def init(self: Any, *args: Any, **kw: Any) -> None:
        if len(args) > n:
            raise TypeError(f"{type(self).__name__}() takes {n} arguments, {len(args)} given")
        values = dict(defaults)
        values.update(zip(names, args, strict=False))
        if kw:
            if not known.issuperset(kw) or not kw.keys().isdisjoint(names[:len(args)]):
                raise TypeError(f"{type(self).__name__}() got unexpected or repeated "
                                f"arguments: {', '.join(sorted(kw))}")
            values.update(kw)
        if len(values) < n:
            _fill(spec, values, type(self).__name__)
        self.__dict__.update(values)
        if post is not None:
            post(self)
    return init


def _fill(spec: _Spec, values: dict[str, Any], cls_name: str) -> None:
    """The fields ``values`` lacks: made by their factories (TypeError: one has none)."""
    for name in spec.names:
        if name in values:
            continue
        if name not in spec.factories:
            raise TypeError(f"{cls_name}() missing argument {name!r}")
        values[name] = spec.factories[name]()


def fields(cls_or_record: Any) -> tuple[str, ...]:
    """The field names of a record class or instance, in order."""
    spec: _Spec = cls_or_record.__record__
    return tuple(spec.names)


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of record ``obj`` with ``changes`` (as ``dataclasses.replace``)."""
    spec: _Spec = obj.__record__  # type: ignore[attr-defined]
    values = {name: getattr(obj, name) for name in spec.names}
    for name in changes:
        if name not in values:
            raise TypeError(f"{type(obj).__name__} has no field {name!r}")
    values.update(changes)
    return type(obj)(**values)
