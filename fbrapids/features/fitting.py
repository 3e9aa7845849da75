"""Fitting: operators flagged ``needs_fit`` (``categorify``) are fitted over a frame and
replaced by fitted operators before planning.  Fit on train, apply everywhere: a fitted
feature set (:meth:`fbrapids.features.FeatureSet.fit`) is never refitted.

A fitter takes the frame, the fitted argument expression and the call's parameters, and
gives the expression that replaces the call.  A new fitted operator is a built-in with
``needs_fit=True`` plus its fitter in :data:`FITTERS` (or :func:`register_fitter`).

Example:
    >>> import pandas as pd
    >>> from fbrapids import ops
    >>> df = pd.DataFrame({"c": ["a", "b", "a"]})
    >>> fitted = fit(df, {"cid": ops.categorify("c")})
    >>> fitted["cid"].op, needs_fit(fitted["cid"])
    ('lookup', False)
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from fbrapids import backend as backends
from fbrapids.errors import FeatureError
from fbrapids.features.plans import plan_for
from fbrapids.features.run import run_features
from fbrapids.kernels import Call, Expr, Vocabulary, as_expr, operators
from fbrapids.views.inputs import prepare

log = logging.getLogger(__name__)

#: ``(frame, argument expression, params) -> fitted expression``
Fitter = Callable[[Any, Expr, dict[str, Any]], Expr]


def fit_categorify(frame: Any, arg: Expr, params: dict[str, Any]) -> Expr:
    """A vocabulary of the values seen at least ``min_freq`` times over ``frame`` (one pass),
    as a ``lookup`` (ids 1.. by descending count; 0 for unseen values and nulls)."""
    min_freq = int(params.get("min_freq", 1))
    values = run_features(frame, {"__fbx_fit": arg})["__fbx_fit"]
    counts = values.value_counts(dropna=True)
    if hasattr(counts, "compute"):
        counts = counts.compute()
    counts = backends.to_host(counts)
    plan = plan_for(prepare(getattr(frame, "_meta", frame), {"v": arg}), {"v": arg})
    kind = "str" if plan.nodes[plan.outputs["v"]].type == "str" else "int"
    vocab = Vocabulary.from_counts(counts, min_freq=min_freq, kind=kind)
    log.info("categorify(%s): %d values kept of %d (min_freq=%d)", arg, len(vocab), len(counts), min_freq)
    return Call("lookup", (arg,), (("vocab", vocab), ("oov", 0)))


def unfitted_categorify(arg: Expr, params: dict[str, Any]) -> Expr:
    """What ``explain`` shows for an unfitted categorify: a lookup in an empty vocabulary."""
    return Call("lookup", (arg,), (("vocab", Vocabulary([], [], kind="str")), ("oov", 0)))


#: operator name -> (fitter, stand-in for ``explain`` before fitting)
FITTERS: dict[str, tuple[Fitter, Callable[[Expr, dict[str, Any]], Expr]]] = {
    "categorify": (fit_categorify, unfitted_categorify),
}


def register_fitter(name: str, fitter: Fitter, stand_in: Callable[[Expr, dict[str, Any]], Expr]) -> None:
    """Say how operator ``name`` (registered with ``needs_fit=True``) is fitted."""
    FITTERS[name] = (fitter, stand_in)


def _flagged(op: str) -> bool:
    known = operators().get(op)  # an unknown name is reported by the planner, naming the feature
    return known is not None and known.needs_fit


def needs_fit(e: Expr) -> bool:
    """Whether ``e`` calls an operator that must be fitted first."""
    return isinstance(e, Call) and (_flagged(e.op) or any(needs_fit(a) for a in e.args))


def _fitter(op: str) -> tuple[Fitter, Callable[[Expr, dict[str, Any]], Expr]]:
    try:
        return FITTERS[op]
    except KeyError:
        raise FeatureError(f"operator {op!r} needs fitting but no fitter is registered for it") from None


def _replace(e: Expr, fn: Callable[[Call, tuple[Expr, ...]], Expr]) -> Expr:
    if not isinstance(e, Call):
        return e
    args = tuple(_replace(a, fn) for a in e.args)
    if _flagged(e.op):
        return fn(e, args)
    return Call(e.op, args, e.params) if args != e.args else e


def fit(frame: Any, features: Mapping[str, Any]) -> dict[str, Expr]:
    """``features`` with every call needing a fit replaced by its fitted form over ``frame``
    (each distinct call fitted once)."""
    fitted: dict[tuple, Expr] = {}

    def fit_call(e: Call, args: tuple[Expr, ...]) -> Expr:
        key = (e.op, tuple(a.key for a in args), e.params)
        if key not in fitted:
            fitted[key] = _fitter(e.op)[0](frame, args[0], e.param_dict())
        return fitted[key]

    return {name: _replace(as_expr(e), fit_call) for name, e in features.items()}


def stand_ins(features: Mapping[str, Expr]) -> dict[str, Expr]:
    """``features`` with unfitted calls shown as their stand-ins (for ``explain``)."""
    return {name: _replace(e, lambda c, args: _fitter(c.op)[1](args[0], c.param_dict()))
            for name, e in features.items()}
