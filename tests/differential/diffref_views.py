"""Independent references for ``clean`` (fill, json, where, drop) and ``join``, written from
their docstrings (fbrapids/views/clean.py, views/json_fields.py, views/where.py, joins.py)
and WORKLOAD.md section 3, in plain Python on lists of values (None is null).

No operator of ``fbrapids.ops`` lives here (``OPERATORS`` is empty): clean and join are
frame verbs.  Never imports fbrapids.
"""

from __future__ import annotations

import json as _json
import math
from typing import Any, Callable, Sequence

OPERATORS: dict[str, Callable[..., Any]] = {}

MAX_DEPTH = 64


class Refused(Exception):
    """The reference's answer is an error; ``culprits`` are the names it must mention."""

    def __init__(self, *culprits: str) -> None:
        super().__init__(*culprits)
        self.culprits = culprits


def is_null(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or type(v).__name__ in ("NAType", "NaTType")


# -- fill ------------------------------------------------------------------------------------
INT_RANGE = {f"{p}int{w}": ((0, 2**w - 1) if p == "u" else (-(2**(w - 1)), 2**(w - 1) - 1))
             for p in ("", "u") for w in (8, 16, 32, 64)}


def fill_fits(kind: str, value: Any) -> bool:
    """Whether ``value`` is a value of a column of ``kind`` (``int8``..``uint64``, ``float32``,
    ``float64``, ``bool``, ``str``), exactly: no wrap, no rounding of an int, no overflow."""
    if value is None:
        return False
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if kind in INT_RANGE:
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            return False
        lo, hi = INT_RANGE[kind]
        return lo <= int(value) <= hi
    limit = 3.4028234663852886e38 if kind == "float32" else 1.7976931348623157e308
    if isinstance(value, int):
        mant = 24 if kind == "float32" else 53
        v = abs(value)
        return v <= limit and (v < 2**mant or v % (2 ** (v.bit_length() - mant)) == 0)
    return not math.isfinite(value) or abs(value) <= limit * (1 + 2**-25 if kind == "float32" else 1)


def fill(values: Sequence[Any], value: Any) -> tuple[list[Any], int]:
    """Nulls replaced by ``value``, and how many there were."""
    n = sum(1 for v in values if is_null(v))
    return [value if is_null(v) else v for v in values], n


# -- json ------------------------------------------------------------------------------------
def _strict_loads(doc: str) -> Any:
    def no_constant(name: str) -> Any:
        raise ValueError(name)

    def check(s: str) -> None:
        if any(0xD800 <= ord(ch) <= 0xDFFF for ch in s):
            raise ValueError("lone surrogate")

    def hook(pairs: list[tuple[str, Any]]) -> dict:
        out = {}
        for k, v in pairs:  # the last occurrence of a key wins
            check(k)
            if isinstance(v, str):
                check(v)
            out[k] = v
        return out

    value = _json.loads(doc, parse_constant=no_constant, object_pairs_hook=hook)
    if isinstance(value, str):
        check(value)
    if isinstance(value, list):
        for v in value:
            if isinstance(v, str):
                check(v)
    return value


def depth(doc: str) -> int:
    deepest = d = 0
    in_str = esc = False
    for ch in doc:
        if in_str:
            esc, in_str = (False, in_str) if esc else (ch == "\\", ch != '"')
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            d += 1
            deepest = max(deepest, d)
        elif ch in "]}":
            d -= 1
    return deepest


def json_get(doc: Any, path: str) -> tuple[str | None, str]:
    """``(value, status)`` of the dotted ``path`` in ``doc``: status is found / null_input /
    malformed / too_deep / missing / not_string (RFC 8259 strict: whole text one value, no
    NaN/Infinity, no BOM, no lone surrogate, last duplicate key wins)."""
    if is_null(doc):
        return None, "null_input"
    try:
        value = _strict_loads(doc)  # json.loads refuses a BOM and whitespace other than RFC 8259's
    except (ValueError, RecursionError):
        return None, ("too_deep" if depth(doc) > MAX_DEPTH else "malformed")
    if depth(doc) > MAX_DEPTH:
        return None, "too_deep"
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None, "missing"
        value = value[key]
    if not isinstance(value, str):
        return None, "not_string"
    return value, "found"


def extract_json(docs: Sequence[Any], paths: dict[str, str]) -> tuple[dict[str, list[Any]], dict[str, int]]:
    """Columns and counts of ``clean(json={src: paths})`` for one source column."""
    counts = {"rows": len(docs), "null_input": 0, "malformed": 0, "too_deep": 0}
    for name in paths:
        counts[f"missing:{name}"] = counts[f"not_string:{name}"] = 0
    cols: dict[str, list[Any]] = {name: [] for name in paths}
    for doc in docs:
        for i, (name, path) in enumerate(paths.items()):
            value, status = json_get(doc, path)
            cols[name].append(value)
            if status in ("null_input", "malformed", "too_deep") and i == 0:
                counts[status] += 1
            elif status in ("missing", "not_string"):
                counts[f"{status}:{name}"] += 1
    return cols, counts


# -- where: three-valued logic on Python values ----------------------------------------------
UNKNOWN = None


class Overflow(Exception):
    """An integer result the 64-bit arithmetic cannot hold: the filter must refuse it."""


def tv_and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def tv_or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def tv_not(a: bool | None) -> bool | None:
    return None if a is None else not a


def compare(op: str, a: Any, b: Any) -> bool | None:
    """Exact comparison (Python's int / float comparison is exact); null or NaN: unknown."""
    if is_null(a) or is_null(b):
        return None
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def is_in(v: Any, values: Sequence[Any]) -> bool | None:
    """``v in values`` as ``v == values[0] or v == values[1] ...``: null ``v`` is unknown,
    and so is a ``v`` matching no value when a NaN is listed (``v == nan`` is unknown)."""
    if is_null(v):
        return None
    if any(not is_null(w) and v == w for w in values):
        return True
    return None if any(is_null(w) for w in values) else False


def arith(op: str, a: Any, b: Any, unsigned: bool) -> Any:
    """Integer arithmetic exact in 64 bits (uint64 when ``unsigned``), an Overflow beyond;
    ``//`` and ``%`` by zero are null; a float operand (or ``/``) makes it float64
    arithmetic (``+ - * /`` only: the tests draw no float ``//`` or ``%``)."""
    if is_null(a) or is_null(b):
        return None
    if isinstance(a, float) or isinstance(b, float) or op == "/":  # float64 arithmetic (IEEE: x / 0 is inf or NaN)
        a, b = float(a), float(b)
        if op == "/" and b == 0:
            return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b)
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b}[op]()
    if op in ("//", "%") and b == 0:
        return None
    r = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a // b, "%": lambda: a % b}[op]()
    lo, hi = (0, 2**64 - 1) if unsigned else (-(2**63), 2**63 - 1)
    if not lo <= r <= hi:
        raise Overflow(f"{a} {op} {b}")
    return r


# -- join ------------------------------------------------------------------------------------
def join(left_keys: Sequence[Any], right_keys: Sequence[Any], how: str, validate: str | None
         ) -> list[tuple[int, int | None]]:
    """``(left row, right row or None)`` pairs of the join, in the view's row order and,
    per view row, the right side's order; null keys never match.  ``validate`` as pandas'
    ``merge(validate=)`` over non-null keys; Refused naming any key repeated on a
    validated side."""
    def repeated(keys: Sequence[Any]) -> list[Any]:
        seen: dict[Any, int] = {}
        for k in keys:
            if not is_null(k):
                seen[k] = seen.get(k, 0) + 1
        return [k for k, n in seen.items() if n > 1]

    bad = (repeated(right_keys) if validate in ("one_to_one", "many_to_one") else []) + \
        (repeated(left_keys) if validate in ("one_to_one", "one_to_many") else [])
    if bad:  # the docstring names "a key that breaks validate": any of them, on either side
        raise Refused(*(repr(k) for k in bad))
    where: dict[Any, list[int]] = {}
    for j, k in enumerate(right_keys):
        if not is_null(k):
            where.setdefault(k, []).append(j)
    out: list[tuple[int, int | None]] = []
    for i, k in enumerate(left_keys):
        hits = [] if is_null(k) else where.get(k, [])
        if hits:
            out += [(i, j) for j in hits]
        elif how == "left":
            out.append((i, None))
    return out
