"""A :class:`~fbrapids.serving.spec.ServingSpec` as JSON data, and back, with no code in it.

Loading an export must run nothing the file chooses, so the spec is not pickled: its
feature expressions are written in the one expression JSON format of
:mod:`fbrapids.kernels.expr_json` (the fitted states' too), which decodes into data objects
only; an operator name is checked against the operator registry when the spec is loaded,
and anything else is an :class:`~fbrapids.errors.UnsafeFileError` naming where it was found.

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

from typing import Any, Mapping

from fbrapids.errors import ExportError, OperatorError, UnsafeFileError
from fbrapids.kernels import Call, Expr
from fbrapids.kernels.expr_json import expr_from_json, expr_to_json
from fbrapids.serving.spec import ServingSpec

SIDES = ("request_features", "item_features", "pair_features")
_PLAIN = ("schema", "request_columns", "item_columns", "item_key", "dense", "sparse")
MAX_SPEC_ENTRIES = 4096  #: the most features, columns or model inputs one side of a spec may list


def _check_ops(e: Expr, where: str) -> None:
    from fbrapids.kernels import get_operator

    if isinstance(e, Call):
        try:
            get_operator(e.op)
        except OperatorError:
            raise UnsafeFileError(f"{where}: unknown operator {e.op!r}") from None
        for a in e.args:
            _check_ops(a, where)


def spec_to_json(spec: ServingSpec) -> dict[str, object]:
    """``spec`` as JSON-ready data (module docstring); :class:`~fbrapids.errors.ExportError`
    naming the feature and parameter for a value JSON cannot hold."""
    out: dict[str, object] = {k: getattr(spec, k) for k in _PLAIN}
    for side in SIDES:
        out[side] = {f: expr_to_json(e, f"{side[:-9]} feature {f!r}", ExportError) for f, e in getattr(spec, side).items()}
    if spec.fill:
        out["fill"] = dict(spec.fill)
    if spec.time:
        out["time"] = dict(spec.time)
    return out


def spec_from_json(data: object, source: str = "spec") -> ServingSpec:
    """The :class:`ServingSpec` of :func:`spec_to_json`'s data; builds data objects only."""
    if not isinstance(data, Mapping) or not set(_PLAIN) <= set(data):
        raise UnsafeFileError(f"{source}: not a serving spec (needs {', '.join(_PLAIN)})")
    # (ServingSpec's own checks type the values read: a wrong one is its TypeError / ValueError)
    kw: dict[str, Any] = {k: data[k] for k in _PLAIN}
    fill = data.get("fill", {})
    if not isinstance(fill, Mapping):
        raise UnsafeFileError(f"{source}: fill must be an object of column -> value")
    kw["fill"] = dict(fill)
    time = data.get("time", {})
    if not isinstance(time, Mapping) or not all(isinstance(v, str) for v in time.values()):
        raise UnsafeFileError(f"{source}: time must be an object of column -> form")
    kw["time"] = dict(time)
    for name in (*SIDES, *_PLAIN, "fill", "time"):  # sizes first: nothing is built for a crafted spec of 200,000 features
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
            expr = expr_from_json(e, where)
            _check_ops(expr, where)
            kw[side][f] = expr
    try:
        return ServingSpec(**kw)
    except (ValueError, TypeError) as exc:
        raise UnsafeFileError(f"{source}: {exc}") from None
