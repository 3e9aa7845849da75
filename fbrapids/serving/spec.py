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
records into a pandas frame of those types, raising :class:`~fbrapids.errors.RequestError`
(a ``ValueError``) that names the column and record for a missing key, a null integer, a
value of the wrong type, or a number out of its range (a float64 column holds values that
fit float32, the model's dense dtype: ``|x| <= 3.4e38``; ``NaN`` and null are missing).
``fill`` maps raw columns to the value a null (or NaN) becomes before anything else, the
training side's cleaning fills (the demo's ``USER_FILL`` / ``AD_FILL``...): exported with
the spec, so a served null is what training saw, not a 500.  ``time`` maps a raw column to
the form its values are written in (:class:`~fbrapids.views.times.TimeForm`: ``"s"``,
``"%y%m%d%H"``, ``"iso8601"`` ...): a served value is read as UTC epoch seconds by the code
that read the training log's time column, before any feature reads it (a value not of that
form is a ``RequestError`` naming the record and column).  A spec with no item columns
(``item_key`` None: a log of one view) scores each request alone: a call's items are empty
objects, one per score.

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
    fbrapids.errors.RequestError: item 1: column 'ad_id' must be an integer (int64), got 'x'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence, TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa

from fbrapids.errors import RequestError, SpecError, WorkloadError
from fbrapids.kernels import Expr, as_expr, columns_of
from fbrapids.views.times import TimeForm

#: a record of raw columns as a client sends it (a JSON object: column -> value), checked by
#: :func:`records_to_columns`
Record: TypeAlias = Mapping[str, object]

TYPES = {"int64": pa.int64(), "uint64": pa.uint64(), "float64": pa.float64(), "str": pa.large_string(),
         "list<int64>": pa.list_(pa.int64())}


@dataclass
class ServingSpec:
    """The inference-side description of a feature plan and a model's inputs (module docstring)."""

    schema: dict[str, str]
    request_columns: list[str]
    item_columns: list[str]
    item_key: str | None
    request_features: dict[str, Expr] = field(default_factory=dict)
    item_features: dict[str, Expr] = field(default_factory=dict)
    pair_features: dict[str, Expr] = field(default_factory=dict)
    dense: list[str] = field(default_factory=list)
    sparse: list[str] = field(default_factory=list)
    fill: Mapping[str, object] = field(default_factory=dict)
    time: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.request_features = {k: as_expr(v) for k, v in self.request_features.items()}
        self.item_features = {k: as_expr(v) for k, v in self.item_features.items()}
        self.pair_features = {k: as_expr(v) for k, v in self.pair_features.items()}
        bad = [c for c in self.schema.values() if c not in TYPES]
        if bad:
            raise SpecError(f"ServingSpec: column types {bad} not supported (use one of {sorted(TYPES)})")
        for c in [*self.request_columns, *self.item_columns]:
            if c not in self.schema:
                raise SpecError(f"ServingSpec: column {c!r} has no type in schema")
        self.fill = dict(self.fill)
        for c, v in self.fill.items():
            if c not in self.schema:
                raise SpecError(f"ServingSpec: fill names column {c!r}, which has no type in schema")
            if v is None or (isinstance(v, float) and v != v):
                raise SpecError(f"ServingSpec: fill value of column {c!r} must not be null or NaN")
            try:
                _check([v], c, self.schema[c], lambda _: "fill")
            except RequestError as exc:
                raise SpecError(f"ServingSpec: {exc}") from None
        if (self.item_key is None) != (not self.item_columns) or (self.item_key is not None
                                                                    and self.item_key not in self.item_columns):
            raise SpecError(f"ServingSpec: item_key {self.item_key!r} is not an item column (None only without item "
                            "columns)")
        self.time = dict(self.time)
        for c, form in self.time.items():
            if c not in self.schema:
                raise SpecError(f"ServingSpec: time names column {c!r}, which has no type in schema")
            try:
                TimeForm(form)
            except WorkloadError as exc:
                raise SpecError(f"ServingSpec: time of column {c!r}: {exc}") from None
        for name, feats, cols in (("request", self.request_features, self.request_columns),
                                  ("item", self.item_features, self.item_columns),
                                  ("pair", self.pair_features, self.request_columns + self.item_columns)):
            for f, e in feats.items():
                extra = columns_of(e) - set(cols)
                if extra:
                    raise SpecError(f"ServingSpec: {name} feature {f!r} reads columns {sorted(extra)} that "
                                     f"are not {name} columns")
        for c in [*self.dense, *self.sparse]:
            self.side_of(c)

    @property
    def frame_schema(self) -> dict[str, str]:
        """The types of the columns the features read: ``schema``'s, a ``time`` column's
        int64 (UTC epoch seconds)."""
        return {**self.schema, **{c: "int64" for c in self.time}}

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
        raise SpecError(f"ServingSpec: model input {column!r} is neither a feature nor a raw column")


F32_MAX = float(np.finfo(np.float32).max)
SHOW_CHARS = 200  #: characters of an offending value echoed in an error message
_RANGE = {"int64": (-(1 << 63), (1 << 63) - 1), "uint64": (0, (1 << 64) - 1)}


def show(v: object, limit: int = SHOW_CHARS) -> str:
    """``repr(v)`` cut to ``limit`` characters (errors echo a bounded part of the input).

    Example:
        >>> show("x" * 1000, limit=20)
        "'xxxxxxxxxxxxx... (1002 characters)"
    """
    r = "null" if v is None else repr(v)
    return r if len(r) <= limit else f"{r[: limit - 6]}... ({len(r)} characters)"


def _check(values: list[object], name: str, kind: str, what: Callable[[int], str]) -> list[object]:
    """Validate one column's values; returns them as the key of their content (NaN as
    None).  Raises :class:`~fbrapids.errors.RequestError` naming the record and column."""
    if kind in ("int64", "uint64"):
        lo, hi = _RANGE[kind]
        for i, v in enumerate(values):
            if type(v) is not int:
                raise RequestError(f"{what(i)}: column {name!r} must be an integer ({kind}), got {show(v)}")
            if not lo <= v <= hi:
                raise RequestError(f"{what(i)}: column {name!r} value {show(v)} is out of the {kind} range")
        return values
    if kind == "list<int64>":
        lo, hi = _RANGE["int64"]
        for i, v in enumerate(values):
            if v is not None and (type(v) is not list or any(type(x) is not int or not lo <= x <= hi for x in v)):
                raise RequestError(f"{what(i)}: column {name!r} must be a list of integers, got {show(v)}")
        return [tuple(v) if type(v) is list else None for v in values]  # (each None or a list, checked)
    if kind == "float64":
        key = values
        for i, v in enumerate(values):
            if v is None:
                continue
            if type(v) is not int and type(v) is not float:
                raise RequestError(f"{what(i)}: column {name!r} must be a number, got {show(v)}")
            if v != v:  # NaN: missing, like null
                key = key if key is not values else list(values)
                key[i] = None
            elif not -F32_MAX <= v <= F32_MAX:
                raise RequestError(f"{what(i)}: column {name!r} value {show(v)} does not fit float32, the model's "
                                   f"dense dtype (|x| <= {F32_MAX:.7g})")
        return key
    for i, v in enumerate(values):
        if v is not None and type(v) is not str:
            raise RequestError(f"{what(i)}: column {name!r} must be a string or null, got {show(v)}")
        if v is not None and not v.isascii() and not _utf8(v):
            raise RequestError(f"{what(i)}: column {name!r} holds a lone surrogate (not text UTF-8 can encode), "
                               f"got {show(v)}")
    return values


def _utf8(s: str) -> bool:
    """Whether ``s`` encodes as UTF-8 (JSON's ``"\\ud800"`` decodes to a lone surrogate, which does not)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _array(values: list[object], kind: str) -> np.ndarray | pd.api.extensions.ExtensionArray:
    """The typed column array (numpy or pandas extension array) of validated ``values``."""
    if kind in ("int64", "uint64"):
        return np.asarray(values, dtype=np.dtype(kind))
    if kind == "list<int64>":
        return pd.arrays.ArrowExtensionArray(pa.array([[] if v is None else v for v in values],
                                                      type=pa.list_(pa.int64())))
    if kind == "float64":
        return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    return pd.array(np.asarray(values, dtype=object), dtype="str")  # pyarrow large_string storage, null as missing


def _labeller(what: str | Callable[[int], str]) -> Callable[[int], str]:
    if isinstance(what, str):
        word = what
        return lambda i: f"{word} {i}"
    return what


def records_to_columns(records: Sequence[Record], schema: Mapping[str, str], columns: Sequence[str],
                       what: str | Callable[[int], str], fill: Mapping[str, object] | None = None,
                       filled: dict[str, int] | None = None,
                       time: Mapping[str, str] | None = None) -> tuple[dict[str, list[object]], list[tuple[object, ...]]]:
    """Validate ``records`` (as :func:`records_to_frame`) without building a frame: each
    column's values, and each record's content key, the tuple of its values of ``columns``
    (NaN as None), equal for two records exactly when their typed values are equal.
    :func:`columns_frame` builds the frame of any subset of the rows.

    ``fill``: column -> value that replaces a null (or a float NaN) before validation, the
    training side's cleaning fills (:attr:`ServingSpec.fill`); ``filled`` (if given) counts
    the values replaced per column.  ``time``: column -> form (:attr:`ServingSpec.time`):
    those columns' values, validated as ``schema`` says, come back as UTC epoch seconds
    (build their frame with :attr:`ServingSpec.frame_schema`); the content key keeps the
    value sent.

    Example:
        >>> schema = {"a": "int64", "p": "float64"}
        >>> values, keys = records_to_columns([{"a": 1, "p": 2}, {"a": 1, "p": 2.0}, {"a": 1, "p": None}],
        ...                                   schema, ["a", "p"], "item")
        >>> keys, keys[0] == keys[1], columns_frame(values, schema, rows=[2, 0])["p"].tolist()
        ([(1, 2), (1, 2.0), (1, None)], True, [nan, 2.0])
    """
    what = _labeller(what)
    values, keys = {}, []
    for i, r in enumerate(records):
        if type(r) is not dict and not isinstance(r, Mapping):
            raise RequestError(f"{what(i)}: expected an object of columns, got {type(r).__name__}")
    for c in columns:
        try:
            values[c] = [r[c] for r in records]
        except KeyError:
            i = next(i for i, r in enumerate(records) if c not in r)
            raise RequestError(f"{what(i)}: missing column {c!r}") from None
        if fill and c in fill:
            values[c], n = _filled(values[c], fill[c])
            if n and filled is not None:
                filled[c] = filled.get(c, 0) + n
        keys.append(_check(values[c], c, schema[c], what))
        if time and c in time:
            values[c] = _seconds(values[c], c, time[c], what)
    return values, list(zip(*keys)) if keys else [() for _ in records]


def _seconds(values: list[object], name: str, form: str, what: Callable[[int], str]) -> list[object]:
    """A time column's validated values as UTC epoch seconds, read in ``form`` as training
    read the log's (:meth:`~fbrapids.views.times.TimeForm.parse`)."""
    tf = TimeForm(form)
    secs, bad = tf.parse(pd.Series(values, dtype=object if any(isinstance(v, str) or v is None for v in values)
                                   else None))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RequestError(f"{what(i)}: column {name!r} must be {tf.describe()}, got {show(values[i])}")
    return secs.tolist()


def _filled(values: list[object], value: object) -> tuple[list[object], int]:
    """``values`` with null and NaN replaced by ``value``, and how many were."""
    at = [i for i, v in enumerate(values) if v is None or (type(v) is float and v != v)]
    if not at:
        return values, 0
    out = list(values)
    for i in at:
        out[i] = value
    return out, len(at)


def columns_frame(values: Mapping[str, list[object]], schema: Mapping[str, str],
                  rows: Sequence[int] | np.ndarray | None = None) -> pd.DataFrame:
    """The typed frame of validated column ``values`` (:func:`records_to_columns`), of the
    given ``rows`` (all by default)."""
    if not values:  # no columns (a spec without item columns): the rows still count
        return pd.DataFrame(index=pd.RangeIndex(len(rows) if rows is not None else 0))
    if rows is not None:
        idx = rows.tolist() if isinstance(rows, np.ndarray) else rows
        values = {c: [v[i] for i in idx] for c, v in values.items()}
    # from arrays, not Series: pandas skips aligning an index per column (2-3x faster)
    return pd.DataFrame({c: _array(v, schema[c]) for c, v in values.items()})


def records_to_frame(records: Sequence[Record], schema: Mapping[str, str], columns: Sequence[str],
                     what: str | Callable[[int], str], fill: Mapping[str, object] | None = None,
                     filled: dict[str, int] | None = None, time: Mapping[str, str] | None = None) -> pd.DataFrame:
    """A pandas frame of ``columns`` typed by ``schema`` from JSON-like ``records``.

    ``what`` names a record in errors: a word (``"item"`` gives ``"item 3"``) or a function
    of the record's position (for records picked out of a larger request).  Raises
    :class:`~fbrapids.errors.RequestError` (a ``ValueError``) naming the record and column
    for a non-mapping record, a missing key, a value of the wrong type, an integer out of
    its range, or a number that does not fit float32 (the model's dense dtype); the
    offending value is echoed cut to ``SHOW_CHARS`` characters.  ``time``: as
    :func:`records_to_columns`' (those columns come out int64 UTC epoch seconds).
    """
    values = records_to_columns(records, schema, columns, what, fill, filled, time)[0]
    return columns_frame(values, {**schema, **{c: "int64" for c in time or {}}})
