"""Which features need fitting: calls of operators flagged ``needs_fit`` in the registry
(``categorify``, ``count_encode``, ``target_encode``, ``quantile_bucketize``, ``normalize``,
``minmax``, ``fill_null_fitted``) that do not carry their fitted state yet.

Fitting itself -- one pass for all of them -- and applying the frozen states are in
:mod:`fbrapids.features.fitted`; the statistics of each operator in
:mod:`fbrapids.fitting.encoders`.

Example:
    >>> from fbrapids import ops
    >>> needs_fit(ops.hash_bucket(ops.categorify("c"), 10)), needs_fit(ops.hour("ts"))
    (True, False)
"""

from __future__ import annotations

from fbrapids.kernels import Call, Expr, operators


def _flagged(op: str) -> bool:
    known = operators().get(op)  # an unknown name is reported by the planner, naming the feature
    return known is not None and known.needs_fit


def needs_fit(e: Expr) -> bool:
    """Whether ``e`` calls an operator that must be fitted first (and carries no state)."""
    if not isinstance(e, Call):
        return False
    if _flagged(e.op) and "state" not in e.param_dict():
        return True
    return any(needs_fit(a) for a in e.args)
