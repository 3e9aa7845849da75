"""Independent references for the scalar, numeric, time and lookup operators of
``fbrapids.ops`` (and the utilities ``col``, ``call``, ``register_operator``,
``Vocabulary``), written from their docstrings in plain Python: exact integers, Python
floats, ``datetime`` for the calendar, ``json`` for documents.  Never imports fbrapids.

Every reference takes one row's value (None for null) and returns the row's answer
(None for null), or raises :class:`Misfit` where the docstring says the operation is an
error (a value that does not fit its type).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import struct
from typing import Any, Callable, Iterable, Mapping


class Misfit(ValueError):
    """The documented answer is an error: a value that does not fit its type."""


#: integer ranges by kernel type name (bool holds 0 / 1)
INT_RANGE = {"i8": (-2**7, 2**7 - 1), "i16": (-2**15, 2**15 - 1), "i32": (-2**31, 2**31 - 1),
             "i64": (-2**63, 2**63 - 1), "u8": (0, 2**8 - 1), "u16": (0, 2**16 - 1), "u32": (0, 2**32 - 1),
             "u64": (0, 2**64 - 1), "bool": (0, 1)}
F32_MAX = struct.unpack("f", b"\xff\xff\x7f\x7f")[0]


def to_f32(v: float) -> float:
    """``v`` rounded to the nearest float32 (as a Python float); inf past its range."""
    try:
        return struct.unpack("f", struct.pack("f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


# -- scalar ---------------------------------------------------------------------------------
def col(v: Any) -> Any:
    """``col(name)``: the column itself."""
    return v


def fill_null(v: Any, value: Any) -> Any:
    """``x`` with nulls replaced by ``value``: never null."""
    return value if v is None else v


def log1p(v: Any) -> float | None:
    """``log(1 + x)`` as float64; null in, null out.  As numpy: -1 gives -inf, below it NaN."""
    if v is None:
        return None
    v = float(v)
    if v == -1:
        return -math.inf
    if v < -1 or math.isnan(v):
        return math.nan
    return math.log1p(v) if not math.isinf(v) else math.inf


def clip(v: Any, lower: float, upper: float, type_name: str) -> Any:
    """``x`` limited to ``[lower, upper]`` in the input's type; null in, null out.  Bounds
    that leave no value of the type are an error, and so is a bound that must be written
    into an integer type but is not an integer, or into float32 but overflows it."""
    if type_name in INT_RANGE:
        lo, hi = INT_RANGE[type_name]
        if lower > hi or upper < lo:
            raise Misfit(f"bounds [{lower}, {upper}] leave no value of {type_name}")
        for b, side in ((lower, lower >= lo), (upper, upper <= hi)):
            if side and not float(b).is_integer():
                raise Misfit(f"bound {b} is not an integer")
    if type_name == "f32":  # a finite bound that float32 cannot hold, not past its own side of the range
        for b, own_side in ((lower, lower < 0), (upper, upper > 0)):
            if math.isfinite(b) and math.isinf(to_f32(b)) and not own_side:
                raise Misfit(f"bound {b} overflows f32")
    if v is None:
        return None
    if type_name == "f32":
        lower, upper = to_f32(lower), to_f32(upper)
    return min(max(v, lower), upper)


def cast(v: Any, to: str) -> Any:
    """``x`` as the fixed-width type ``to``: exact, or an error (never wrapped); floats to
    integers truncate toward zero; to bool: ``x != 0``; to a float type: rounded to it,
    an error when a finite value overflows it."""
    if v is None:
        return None
    if to == "bool":
        return v != 0
    if to in ("f32", "f64"):
        out = to_f32(float(v)) if to == "f32" else float(v)
        if math.isinf(out) and not math.isinf(v):
            raise Misfit(f"{v} overflows {to}")
        return out
    if isinstance(v, float):
        if not math.isfinite(v):
            raise Misfit(f"{v} is no integer")
        v = math.trunc(v)
    lo, hi = INT_RANGE[to]
    if not lo <= int(v) <= hi:
        raise Misfit(f"{v} does not fit {to}")
    return int(v)


def bucketize(v: Any, boundaries: Iterable[float]) -> int | None:
    """TensorFlow ``Bucketize``: how many boundaries ``b`` have ``b <= x`` (exact Python
    comparison of ints and floats); null in, null out."""
    if v is None:
        return None
    return sum(1 for b in boundaries if b <= v)


# -- time -------------------------------------------------------------------------------------
_DAYS_400Y = 146_097  # the Gregorian calendar repeats every 400 years
_EPOCH = dt.date(1970, 1, 1)


def hour(seconds: int | None) -> int | None:
    """Hour of day (UTC, 0-23) of epoch seconds."""
    return None if seconds is None else (seconds % 86400) // 3600


def weekday(seconds: int | None) -> int | None:
    """Day of week (UTC, Monday = 0) of epoch seconds; 1970-01-01 was a Thursday."""
    return None if seconds is None else (seconds // 86400 + 3) % 7


def day(seconds: int | None) -> int | None:
    """Day of month (UTC, 1-31) of epoch seconds, for any int64 / uint64 second: the day
    moved by whole 400-year cycles into ``datetime``'s range first."""
    if seconds is None:
        return None
    days = seconds // 86400
    return (_EPOCH + dt.timedelta(days=days % _DAYS_400Y)).day


def seconds_of_ns(ns: int | None) -> int | None:
    """Epoch seconds (floored) of an instant in integer nanoseconds."""
    return None if ns is None else ns // 10**9


# -- dictionaries --------------------------------------------------------------------------
def lookup(v: Any, mapping: Mapping[Any, Any], oov: Any) -> Any:
    """Dictionary value -> id (or float); ``oov`` for values not in it and for nulls.
    Python ints compare exactly: 2^64 - 1 is not -1."""
    if v is None:
        return oov
    return mapping.get(v, oov)


def vocabulary_from_values(values: Iterable[Any], start: int = 1) -> dict[Any, int]:
    """``Vocabulary.from_values``: ids ``start, start + 1, ...`` in the order given."""
    return {v: start + i for i, v in enumerate(values)}


def vocabulary_from_counts(counts: Mapping[Any, int], min_freq: int = 1) -> dict[Any, int]:
    """``Vocabulary.from_counts``: values seen at least ``min_freq`` times (nulls never),
    ids 1.. by descending count, ties by value."""
    kept = sorted(((k, c) for k, c in counts.items() if c >= min_freq and k is not None), key=lambda kc: (-kc[1], kc[0]))
    return {k: i + 1 for i, (k, _) in enumerate(kept)}


# -- JSON ------------------------------------------------------------------------------------
def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_get(doc: str | None, path: str) -> str | None:
    """The string at the dotted ``path`` of a strict JSON document (RFC 8259: the whole text
    one value; ``NaN`` / ``Infinity`` are not JSON); null when the input is null, does not
    parse, lacks the path, or holds a non-string there."""
    if doc is None:
        return None
    try:
        node = json.loads(doc, parse_constant=_no_constants)
    except ValueError:
        return None
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, str) else None


# -- user operators --------------------------------------------------------------------------
def user_affine(x: float | None, y: float | None) -> float | None:
    """The body of the user operator the tests register: ``z = x * 2.5 - y`` (f64)."""
    return None if x is None or y is None else x * 2.5 - y


def call(fn: Callable[..., Any], *values: Any) -> Any:
    """``call(op, ...)``: the named operator applied to its inputs."""
    return fn(*values)


def register_operator(x: float | None, y: float | None) -> float | None:
    """A registered user operator answers what its C body computes (here ``user_affine``)."""
    return user_affine(x, y)


OPERATORS: dict[str, Callable[..., Any]] = {
    "col": col, "call": call, "fill_null": fill_null, "log1p": log1p, "clip": clip, "cast": cast,
    "bucketize": bucketize, "hour": hour, "weekday": weekday, "day": day, "lookup": lookup,
    "Vocabulary": vocabulary_from_counts, "json_get": json_get, "register_operator": register_operator,
}
