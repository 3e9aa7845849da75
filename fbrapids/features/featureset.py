"""``FeatureSet``: a named, reusable collection of feature expressions.

Example:
    >>> import pandas as pd
    >>> from fbrapids import ops
    >>> fs = FeatureSet("time", hour=ops.hour("ts"), wd=ops.weekday("ts"))
    >>> fs.extract(pd.DataFrame({"ts": [3600]}))[["hour", "wd"]].values.tolist()
    [[1, 3]]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fbrapids.features.explain import explain
from fbrapids.features.extract import extract
from fbrapids.features.fitted import Fitted, fit
from fbrapids.kernels import Expr, as_expr

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.features.feature_map import ExprLike
    from fbrapids.frames.backend import FrameLike


class FeatureSet:
    """A named, reusable collection of feature expressions."""

    def __init__(self, name: str = "features", **features: ExprLike) -> None:
        self.name = name
        self.features: dict[str, Expr] = {k: as_expr(v) for k, v in features.items()}

    def add(self, **features: ExprLike) -> "FeatureSet":
        """Add (or replace) features; returns self for chaining."""
        self.features.update({k: as_expr(v) for k, v in features.items()})
        return self

    def fit(self, frame: FrameLike, time_column: str | None = "ts") -> Fitted:
        """Every fitted operator of the set fitted over ``frame`` in one pass: a
        :class:`~fbrapids.features.Fitted` to extract on any frame (never refitted)."""
        return fit(frame, self.features, time_column=time_column)

    def extract(self, frame: FrameLike, fused: bool = True) -> FrameLike:
        """``frame`` with this set's features added (see :func:`fbrapids.features.extract`)."""
        return extract(frame, self.features, fused=fused)

    def explain(self, frame: FrameLike, source: bool = False) -> str:
        """What :meth:`extract` runs over ``frame`` (see :func:`fbrapids.features.explain`)."""
        return explain(frame, self.features, source=source)

    def __len__(self) -> int:
        return len(self.features)

    def __repr__(self) -> str:
        return f"FeatureSet({self.name!r}, {', '.join(self.features)})"

    def _repr_html_(self) -> str:
        """What a notebook shows: the expressions as a layered graph, shared sub-expressions
        drawn once (placement is decided when a frame is planned: see :meth:`explain`)."""
        from fbrapids.features.plan_graph import expr_graph, graph_html

        return graph_html(expr_graph(self.features), f"{self!r}: {len(self)} feature(s)")
