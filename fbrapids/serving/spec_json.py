"""A :class:`~fbrapids.serving.spec.ServingSpec` as JSON data, and back, with no code in it.

Loading an export must run nothing the file chooses, so the spec is not pickled: feature
expressions become ``{"col": name}`` or ``{"call": op, "args": [...], "params": [[name,
value], ...]}``, and parameter values are JSON scalars and lists, or one of a few tagged
objects: ``{"tuple": [...]}``, ``{"dict": [[key, value], ...]}``, ``{"ndarray": {"dtype",
"shape", "base64"}}`` (numeric and boolean dtypes only), ``{"scalar": {"dtype", "value"}}``
(a numpy scalar) and ``{"vocabulary": {"kind", "keys", "ids"}}`` (a fitted ``lookup``).
Decoding builds only these data objects; an operator name is checked against the
operator registry when the spec is loaded, and anything else is an
:class:`~fbrapids.errors.UnsafeFileError` naming where it was found.

Example:
    >>> from fbrapids import ops
    >>> from fbrapids.serving.spec import ServingSpec
    >>> spec = ServingSpec(schema={"u": "int64", "a": "int64"}, request_columns=["u"], item_columns=["a"],
    ...                    item_key="a", request_features={"uh": ops.hash_bucket("u", 100)}, sparse=["uh", "a"])
    >>> data = spec_to_json(spec)
    >>> data["request_features"]["uh"]["call"]
    'hash_bucket'
    >>> spec_from_json(data).request_features["uh"] == spec.request_features["uh"]
    True
"""

from __future__ import annotations

import base64
from typing import Any, Mapping

import numpy as np

from fbrapids.errors import ExportError, OperatorError, UnsafeFileError
from fbrapids.kernels import Call, Col, Expr, Vocabulary
from fbrapids.serving.spec import ServingSpec

SIDES = ("request_features", "item_features", "pair_features")
_PLAIN = ("schema", "request_columns", "item_columns", "item_key", "dense", "sparse")
MAX_SPEC_ENTRIES = 4096  #: the most features, columns or model inputs one side of a spec may list
_NUMERIC_KINDS = "biuf"


def _encode(v: Any, where: str) -> Any:
    if isinstance(v, Col):
        return {"col": v.name}
    if isinstance(v, Call):
        return {"call": v.op, "args": [_encode(a, where) for a in v.args],
                "params": [[k, _encode(x, f"{where} parameter {k!r}")] for k, x in v.params]}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return [_encode(x, where) for x in v]
    if isinstance(v, tuple):
        return {"tuple": [_encode(x, where) for x in v]}
    if isinstance(v, dict):
        return {"dict": [[_encode(k, where), _encode(x, where)] for k, x in v.items()]}
    if isinstance(v, np.ndarray) and v.dtype.kind in _NUMERIC_KINDS:
        return {"ndarray": {"dtype": v.dtype.str, "shape": list(v.shape),
                            "base64": base64.b64encode(np.ascontiguousarray(v).tobytes()).decode()}}
    if isinstance(v, np.generic) and v.dtype.kind in _NUMERIC_KINDS:
        return {"scalar": {"dtype": v.dtype.str, "value": v.item()}}
    if isinstance(v, Vocabulary):
        return {"vocabulary": {"kind": v.kind, "keys": list(v.keys), "ids": v.ids.tolist()}}
    raise ExportError(f"{where}: a value of type {type(v).__name__} cannot be written as JSON data")


def _dtype(s: Any, where: str) -> np.dtype:
    try:
        dt = np.dtype(str(s))
    except TypeError:
        dt = None
    if dt is None or dt.kind not in _NUMERIC_KINDS:
        raise UnsafeFileError(f"{where}: dtype {s!r} is not a numeric dtype")
    return dt


def _decode(v: Any, where: str) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return [_decode(x, where) for x in v]
    if not isinstance(v, dict) or len(v) not in (1, 3) or (len(v) == 3 and set(v) != {"call", "args", "params"}):
        raise UnsafeFileError(f"{where}: unrecognised value {str(v)[:200]}")
    tag, body = next(iter(v.items())) if len(v) == 1 else ("call", v)
    try:
        if tag == "col":
            return Col(str(body))
        if tag == "call":
            args = tuple(_decode(a, where) for a in body["args"])
            if not all(isinstance(a, Expr) for a in args):
                raise TypeError("arguments must be expressions")
            params = tuple((str(k), _decode(x, f"{where} parameter {k!r}")) for k, x in body["params"])
            return Call(str(body["call"]), args, params)
        if tag == "tuple":
            return tuple(_decode(x, where) for x in body)
        if tag == "dict":
            return {_decode(k, where): _decode(x, where) for k, x in body}
        if tag == "ndarray":
            dt = _dtype(body["dtype"], where)
            shape = tuple(int(n) for n in body["shape"])
            return np.frombuffer(base64.b64decode(body["base64"], validate=True), dtype=dt).reshape(shape).copy()
        if tag == "scalar":
            return _dtype(body["dtype"], where).type(body["value"])
        if tag == "vocabulary":
            return Vocabulary(body["keys"], body["ids"], kind=body["kind"])
    except UnsafeFileError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        raise UnsafeFileError(f"{where}: malformed {tag!r} value ({exc})") from None
    raise UnsafeFileError(f"{where}: unknown tag {tag!r}")


def _check_ops(e: Expr, where: str) -> None:
    from fbrapids.kernels import get_operator

    if isinstance(e, Call):
        try:
            get_operator(e.op)
        except OperatorError:
            raise UnsafeFileError(f"{where}: unknown operator {e.op!r}") from None
        for a in e.args:
            _check_ops(a, where)


def spec_to_json(spec: ServingSpec) -> dict[str, Any]:
    """``spec`` as JSON-ready data (module docstring); :class:`~fbrapids.errors.ExportError`
    naming the feature and parameter for a value JSON cannot hold."""
    out: dict[str, Any] = {k: getattr(spec, k) for k in _PLAIN}
    for side in SIDES:
        out[side] = {f: _encode(e, f"{side[:-9]} feature {f!r}") for f, e in getattr(spec, side).items()}
    if spec.fill:
        out["fill"] = dict(spec.fill)
    return out


def spec_from_json(data: Mapping[str, Any], source: str = "spec") -> ServingSpec:
    """The :class:`ServingSpec` of :func:`spec_to_json`'s data; builds data objects only."""
    if not isinstance(data, Mapping) or not set(_PLAIN) <= set(data):
        raise UnsafeFileError(f"{source}: not a serving spec (needs {', '.join(_PLAIN)})")
    kw: dict[str, Any] = {k: data[k] for k in _PLAIN}
    fill = data.get("fill", {})
    if not isinstance(fill, Mapping):
        raise UnsafeFileError(f"{source}: fill must be an object of column -> value")
    kw["fill"] = dict(fill)
    for name in (*SIDES, *_PLAIN, "fill"):  # sizes first: nothing is built for a crafted spec of 200,000 features
        v = data.get(name)
        if isinstance(v, (list, Mapping)) and len(v) > MAX_SPEC_ENTRIES:
            raise UnsafeFileError(f"{source}: {name} lists {len(v)} entries, more than {MAX_SPEC_ENTRIES}; refused")
    for side in SIDES:
        feats = data.get(side, {})
        if not isinstance(feats, Mapping):
            raise UnsafeFileError(f"{source}: {side} must be an object")
        kw[side] = {}
        for f, e in feats.items():
            where = f"{source}: {side[:-9]} feature {f!r}"
            expr = _decode(e, where)
            if not isinstance(expr, Expr):
                raise UnsafeFileError(f"{where}: not an expression")
            _check_ops(expr, where)
            kw[side][f] = expr
    try:
        return ServingSpec(**kw)
    except (ValueError, TypeError) as exc:
        raise UnsafeFileError(f"{source}: {exc}") from None
