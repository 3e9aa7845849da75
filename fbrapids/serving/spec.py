"""What a served model needs: raw input schema, feature expressions by side, model inputs.

A :class:`ServingSpec` splits the training-side feature plan by where its inputs live:

* ``request_features``: computed from the request's columns (user, query, context), once
  per request;
* ``item_features``: computed from a candidate item's columns (ad id, title, price), once
  per item, and cached by the item's ``item_key``;
* ``pair_features``: features over both (crosses of a user and an ad field), computed once
  per (request, item) pair.

``dense`` and ``sparse`` name the model's inputs in the order it was trained with; each is a
feature output or a raw column of one side.  ``schema`` gives each raw column's type
(``"int64"``, ``"uint64"``, ``"float64"``, ``"str"``, ``"list<int64>"``: a JSON array of
integers, e.g. a user's behaviour item ids; null is an empty list); :func:`records_to_frame` turns JSON
records into a pandas frame of those types, raising ``ValueError`` that names the column
and record for a missing key, a null integer, or a value of the wrong type.

Example:
    >>> from fbrapids import ops
    >>> spec = ServingSpec(schema={"user_id": "int64", "ad_id": "int64"}, request_columns=["user_id"],
    ...                    item_columns=["ad_id"], item_key="ad_id",
    ...                    request_features={"u": ops.hash_bucket("user_id", 100)},
    ...                    item_features={"a": ops.hash_bucket("ad_id", 100)}, dense=[], sparse=["u", "a"])
    >>> spec.side_of("u"), spec.side_of("a")
    ('request', 'item')
    >>> records_to_frame([{"ad_id": 1}, {"ad_id": "x"}], {"ad_id": "int64"}, ["ad_id"], "item")
    Traceback (most recent call last):
    ...
    ValueError: item 1: column 'ad_id' must be an integer (int64), got 'x'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from fbrapids.kernels.expr import Expr, as_expr, columns_of

TYPES = {"int64": pa.int64(), "uint64": pa.uint64(), "float64": pa.float64(), "str": pa.large_string(),
         "list<int64>": pa.list_(pa.int64())}
LIST_INT64 = pd.ArrowDtype(pa.list_(pa.int64()))


@dataclass
class ServingSpec:
    """The inference-side description of a feature plan and a model's inputs (module docstring)."""

    schema: dict[str, str]
    request_columns: list[str]
    item_columns: list[str]
    item_key: str
    request_features: dict[str, Any] = field(default_factory=dict)
    item_features: dict[str, Any] = field(default_factory=dict)
    pair_features: dict[str, Any] = field(default_factory=dict)
    dense: list[str] = field(default_factory=list)
    sparse: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.request_features = {k: as_expr(v) for k, v in self.request_features.items()}
        self.item_features = {k: as_expr(v) for k, v in self.item_features.items()}
        self.pair_features = {k: as_expr(v) for k, v in self.pair_features.items()}
        bad = [c for c in self.schema.values() if c not in TYPES]
        if bad:
            raise ValueError(f"ServingSpec: column types {bad} not supported (use one of {sorted(TYPES)})")
        for c in [*self.request_columns, *self.item_columns]:
            if c not in self.schema:
                raise ValueError(f"ServingSpec: column {c!r} has no type in schema")
        if self.item_key not in self.item_columns:
            raise ValueError(f"ServingSpec: item_key {self.item_key!r} is not an item column")
        for name, feats, cols in (("request", self.request_features, self.request_columns),
                                  ("item", self.item_features, self.item_columns),
                                  ("pair", self.pair_features, self.request_columns + self.item_columns)):
            for f, e in feats.items():
                extra = columns_of(e) - set(cols)
                if extra:
                    raise ValueError(f"ServingSpec: {name} feature {f!r} reads columns {sorted(extra)} that "
                                     f"are not {name} columns")
        for c in [*self.dense, *self.sparse]:
            self.side_of(c)

    @property
    def features(self) -> dict[str, Expr]:
        """Every feature, as the training side extracts them (one ``df.fbx.extract`` call)."""
        return {**self.request_features, **self.item_features, **self.pair_features}

    def side_of(self, column: str) -> str:
        """``"request"``, ``"item"`` or ``"pair"``: where a model input is computed."""
        if column in self.request_features or (column in self.request_columns and column not in self.features):
            return "request"
        if column in self.item_features or (column in self.item_columns and column not in self.features):
            return "item"
        if column in self.pair_features:
            return "pair"
        raise ValueError(f"ServingSpec: model input {column!r} is neither a feature nor a raw column")


def _column(values: list[Any], name: str, kind: str, what: Callable[[int], str]) -> pd.Series:
    if kind in ("int64", "uint64"):
        for i, v in enumerate(values):
            if type(v) is not int:
                got = "null" if v is None else repr(v)
                raise ValueError(f"{what(i)}: column {name!r} must be an integer ({kind}), got {got}")
        try:
            return pd.Series(np.asarray(values, dtype=np.dtype(kind)), name=name)
        except OverflowError as exc:
            raise ValueError(f"column {name!r} holds a value out of the {kind} range") from exc
    if kind == "list<int64>":
        for i, v in enumerate(values):
            if v is not None and (type(v) is not list or any(type(x) is not int for x in v)):
                raise ValueError(f"{what(i)}: column {name!r} must be a list of integers, got {v!r}")
        arr = pa.array([[] if v is None else v for v in values], type=pa.list_(pa.int64()))
        return pd.Series(pd.arrays.ArrowExtensionArray(arr), name=name, dtype=LIST_INT64)
    if kind == "float64":
        for i, v in enumerate(values):
            if v is not None and (type(v) not in (int, float)):
                raise ValueError(f"{what(i)}: column {name!r} must be a number, got {v!r}")
        return pd.Series(np.asarray([np.nan if v is None else v for v in values], dtype=np.float64), name=name)
    for i, v in enumerate(values):
        if v is not None and type(v) is not str:
            raise ValueError(f"{what(i)}: column {name!r} must be a string or null, got {v!r}")
    return pd.Series(pa.array(values, type=pa.large_string()).to_pandas(), name=name)


def records_to_frame(records: Sequence[Mapping[str, Any]], schema: Mapping[str, str], columns: Sequence[str],
                     what: str | Callable[[int], str]) -> pd.DataFrame:
    """A pandas frame of ``columns`` typed by ``schema`` from JSON-like ``records``.

    ``what`` names a record in errors: a word (``"item"`` gives ``"item 3"``) or a function
    of the record's position (for records picked out of a larger request).  Raises
    ``ValueError`` naming the record and column for a non-mapping record, a missing key,
    or a bad value.
    """
    if isinstance(what, str):
        word = what
        what = lambda i: f"{word} {i}"  # noqa: E731
    data = {}
    for i, r in enumerate(records):
        if type(r) is not dict and not isinstance(r, Mapping):
            raise ValueError(f"{what(i)}: expected an object of columns, got {type(r).__name__}")
    for c in columns:
        try:
            values = [r[c] for r in records]
        except KeyError:
            i = next(i for i, r in enumerate(records) if c not in r)
            raise ValueError(f"{what(i)}: missing column {c!r}") from None
        data[c] = _column(values, c, schema[c], what)
    return pd.DataFrame(data)
