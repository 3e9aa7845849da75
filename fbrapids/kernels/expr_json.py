"""Feature expressions as JSON data, and back, with no code in them: the one format of a
fitted state's features (:meth:`fbrapids.features.Fitted.save`) and of a serving export's
spec (:mod:`fbrapids.serving.spec_json`).

An expression is ``{"col": name}`` or ``{"call": op, "args": [...], "params": [[name,
value], ...]}``; a parameter value is a JSON scalar or list, or one of a few tagged objects:
``{"tuple": [...]}``, ``{"dict": [[key, value], ...]}``, ``{"ndarray": {"dtype", "shape",
"base64"}}`` (numeric and boolean dtypes only), ``{"scalar": {"dtype", "value"}}`` (a numpy
scalar) and ``{"vocabulary": {"kind", "keys", "ids"}}`` (a fitted ``lookup``).  Decoding
builds only these data objects, and anything else is an
:class:`~fbrapids.errors.UnsafeFileError` naming where it was found.  Fitted states saved
before the format was shared (``{"op": ...}`` calls, ``{"array": [...], "dtype"}`` arrays of
a numeric, boolean or string dtype) still load.

Example:
    >>> from fbrapids import ops
    >>> e = ops.bucketize("age", [18, 25])
    >>> doc = expr_to_json(e)
    >>> doc["call"], expr_from_json(doc) == e
    ('bucketize', True)
    >>> expr_from_json({"call": "hash_bucket", "args": [{"col": "u"}], "params": [["n", {"pickle": "..."}]]})
    Traceback (most recent call last):
    ...
    fbrapids.errors.UnsafeFileError: expression parameter 'n': unknown tag 'pickle'
"""

from __future__ import annotations

import base64

import numpy as np

from fbrapids.errors import FbrapidsError, UnsafeFileError
from fbrapids.kernels.expr import Call, Col, Expr
from fbrapids.kernels.vocab import Vocabulary

_NUMERIC_KINDS = "biuf"
_LEGACY_ARRAY_KINDS = "biufUS"  # a fitted state's {"array": ...} of before the shared format
_LEGACY_CALL = {"op", "args", "params"}


def to_json(v: object, where: str = "expression", error: type[FbrapidsError] = UnsafeFileError) -> object:
    """``v`` (an expression, or a parameter value) as JSON data; ``error`` (naming ``where``)
    for a value JSON cannot hold."""
    if isinstance(v, Col):
        return {"col": v.name}
    if isinstance(v, Call):
        return {"call": v.op, "args": [to_json(a, where, error) for a in v.args],
                "params": [[k, to_json(x, f"{where} parameter {k!r}", error)] for k, x in v.params]}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return [to_json(x, where, error) for x in v]
    if isinstance(v, tuple):
        return {"tuple": [to_json(x, where, error) for x in v]}
    if isinstance(v, dict):
        return {"dict": [[to_json(k, where, error), to_json(x, where, error)] for k, x in v.items()]}
    if isinstance(v, np.ndarray) and v.dtype.kind in _NUMERIC_KINDS:
        return {"ndarray": {"dtype": v.dtype.str, "shape": list(v.shape),
                            "base64": base64.b64encode(np.ascontiguousarray(v).tobytes()).decode()}}
    if isinstance(v, np.generic) and v.dtype.kind in _NUMERIC_KINDS:
        return {"scalar": {"dtype": v.dtype.str, "value": v.item()}}
    if isinstance(v, Vocabulary):
        return {"vocabulary": {"kind": v.kind, "keys": list(v.keys), "ids": v.ids.tolist()}}
    raise error(f"{where}: a value of type {type(v).__name__} cannot be written as JSON data")


def _dtype(s: object, where: str, kinds: str = _NUMERIC_KINDS) -> np.dtype:
    try:
        dt = np.dtype(str(s))
    except TypeError:
        dt = None
    if dt is None or dt.kind not in kinds:
        raise UnsafeFileError(f"{where}: dtype {s!r} is not a {'numeric' if kinds == _NUMERIC_KINDS else 'plain'} dtype")
    return dt


def from_json(v: object, where: str = "expression") -> object:
    """The expression or value :func:`to_json` wrote; builds data objects only."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return [from_json(x, where) for x in v]
    if isinstance(v, dict) and set(v) == _LEGACY_CALL:
        v = {"call": v["op"], "args": v["args"], "params": v["params"]}
    if isinstance(v, dict) and set(v) == {"array", "dtype"}:
        v = {"array": v}
    if not isinstance(v, dict) or len(v) not in (1, 3) or (len(v) == 3 and set(v) != {"call", "args", "params"}):
        raise UnsafeFileError(f"{where}: unrecognised value {str(v)[:200]}")
    tag, body = next(iter(v.items())) if len(v) == 1 else ("call", v)
    try:
        if tag == "col":
            return Col(str(body))
        if tag == "call":
            decoded = [from_json(a, where) for a in body["args"]]
            args = tuple(a for a in decoded if isinstance(a, Expr))
            if len(args) != len(decoded):
                raise TypeError("arguments must be expressions")
            params = tuple((str(k), from_json(x, f"{where} parameter {k!r}")) for k, x in body["params"])
            return Call(str(body["call"]), args, params)
        if tag == "tuple":
            return tuple(from_json(x, where) for x in body)
        if tag == "dict":
            return {from_json(k, where): from_json(x, where) for k, x in body}
        if tag == "ndarray":
            dt = _dtype(body["dtype"], where)
            shape = tuple(int(n) for n in body["shape"])
            return np.frombuffer(base64.b64decode(body["base64"], validate=True), dtype=dt).reshape(shape).copy()
        if tag == "array":
            return np.asarray(body["array"], dtype=_dtype(body["dtype"], where, _LEGACY_ARRAY_KINDS))
        if tag == "scalar":
            return _dtype(body["dtype"], where).type(body["value"])
        if tag == "vocabulary":
            return Vocabulary(body["keys"], body["ids"], kind=body["kind"])
    except UnsafeFileError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        raise UnsafeFileError(f"{where}: malformed {tag!r} value ({exc})") from None
    raise UnsafeFileError(f"{where}: unknown tag {tag!r}")


def expr_to_json(e: Expr, where: str = "expression", error: type[FbrapidsError] = UnsafeFileError) -> object:
    """A feature expression as JSON data (round-trips through :func:`expr_from_json`)."""
    return to_json(e, where, error)


def expr_from_json(doc: object, where: str = "expression") -> Expr:
    """The expression :func:`expr_to_json` wrote (or a fitted state of before the shared
    format); :class:`~fbrapids.errors.UnsafeFileError` for anything that is not one."""
    e = from_json(doc, where)
    if not isinstance(e, Expr):
        raise UnsafeFileError(f"{where}: not an expression")
    return e
