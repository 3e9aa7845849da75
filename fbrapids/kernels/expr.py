"""Feature expressions: a tree of operator calls over frame columns.

Expressions are immutable and hash by structure, so identical sub-expressions (in one
feature or across features) are recognised and computed once by the planner.

Example:
    >>> from fbrapids.kernels.expr import Col, Call
    >>> a = Call("hash_bucket", (Col("q"),), (("buckets", 10),))
    >>> b = Call("hash_bucket", (Col("q"),), (("buckets", 10),))
    >>> a.key == b.key, str(a)
    (True, 'hash_bucket(q, buckets=10)')
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fbrapids.errors import OperatorTypeError


class TypedScalar(tuple):
    """A bool or float parameter in a key: equal only to a parameter of the same kind and
    value, so ``True`` is not ``1``, ``2.0`` is not ``2`` and ``-0.0`` is not ``0.0`` (Python
    equality would let a plan built for one serve the other: ``fill_null(x, True)``, an
    error on an int column, answered 1 after ``fill_null(x, 1)`` had run).  Its ``repr`` is
    the value's, so ``repr`` of a key (fitted state ids) is unchanged.

    Example:
        >>> TypedScalar(True) == TypedScalar(1.0), TypedScalar(-0.0) == TypedScalar(0.0), repr(TypedScalar(2.0))
        (False, False, '2.0')
    """

    value: bool | float | np.bool_ | np.floating

    def __new__(cls, v: bool | float | np.bool_ | np.floating) -> "TypedScalar":
        tag = ("bool", bool(v)) if isinstance(v, (bool, np.bool_)) else ("float", float(v).hex())
        self = super().__new__(cls, tag)
        self.value = v
        return self

    def __getnewargs__(self) -> tuple:
        return (self.value,)

    def __repr__(self) -> str:
        return repr(self.value)


def _sorted_items(items: list[tuple[object, object]]) -> tuple:
    try:
        return tuple(sorted(items))
    except TypeError:  # keys of mixed kinds: by their text
        return tuple(sorted(items, key=repr))


def param_key(v: object) -> object:
    """A hashable, content-based key for a parameter value (arrays by digest); bools and
    floats typed (:class:`TypedScalar`), so equal keys mean the same parameters.

    Example:
        >>> param_key(True) == param_key(1), param_key({1: 0.5}) == param_key({1: 0.5})
        (False, True)
    """
    if isinstance(v, (bool, float, np.bool_, np.floating)):
        return TypedScalar(v)
    if isinstance(v, np.ndarray):
        return ("ndarray", str(v.dtype), v.shape, hashlib.sha1(np.ascontiguousarray(v).tobytes()).hexdigest())
    if isinstance(v, (list, tuple)):
        return tuple(param_key(x) for x in v)
    if isinstance(v, dict):
        return _sorted_items([(param_key(k), param_key(x)) for k, x in v.items()])
    key = getattr(v, "key", None)
    if key is not None and not callable(key):
        return key
    return v


class Expr:
    """Base class of feature expressions."""

    key: tuple

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expr) and self.key == other.key


@dataclass(frozen=True, eq=False)
class Col(Expr):
    """A column of the input frame."""

    name: str

    @property
    def key(self) -> tuple:  # type: ignore[override]
        return ("col", self.name)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """An operator applied to argument expressions, with parameters."""

    op: str
    args: tuple[Expr, ...]
    params: tuple[tuple[str, object], ...] = field(default=())

    @property
    def key(self) -> tuple:  # type: ignore[override]
        return ("call", self.op, tuple(a.key for a in self.args),
                tuple((k, param_key(v)) for k, v in self.params))

    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)

    def __str__(self) -> str:
        ps = ", ".join(f"{k}={_short(v)}" for k, v in self.params)
        return f"{self.op}({', '.join(str(a) for a in self.args)}{', ' if ps and self.args else ''}{ps})"


def _short(v: object) -> str:
    if isinstance(v, np.ndarray):
        return f"<array {v.dtype} x{len(v)}>"
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def as_expr(x: object) -> Expr:
    """Column names become :class:`Col`; expressions pass through.

    Example:
        >>> as_expr("ts")
        Col(name='ts')
    """
    if isinstance(x, Expr):
        return x
    if isinstance(x, str):
        return Col(x)
    raise OperatorTypeError(f"expected a column name or a feature expression, got {type(x).__name__}: {x!r}")


def columns_of(e: Expr) -> set[str]:
    """The frame columns an expression reads."""
    if isinstance(e, Col):
        return {e.name}
    out: set[str] = set()
    for a in e.args if isinstance(e, Call) else ():
        out |= columns_of(a)
    return out
