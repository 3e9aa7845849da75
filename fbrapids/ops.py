"""Feature operators: constructors of feature expressions for ``df.fbx.extract``.

Each returns an expression; arguments are column names or other expressions.  Extraction
runs them as compiled meta-kernels, one per layer of the expression DAG (see
``df.fbx.explain``).  Hashing is FarmHash Fingerprint64 (TensorFlow
``to_hash_bucket_fast``); integers hash as their decimal text.

Example:
    >>> import pandas as pd, fbrapids
    >>> from fbrapids import ops
    >>> df = pd.DataFrame({"q": ["red shoes", None], "ts": [1700000000, 1700003600]})
    >>> out = df.fbx.extract(tok=ops.split(ops.fill_null("q", ""), " ", buckets=100), h=ops.hour("ts"))
    >>> out["tok"].tolist(), out["h"].tolist()
    ([[10, 9], []], [22, 23])
"""

from __future__ import annotations

import numbers
from typing import Any, Mapping, Sequence

from fbrapids.errors import OperatorError
from fbrapids.kernels import (
    Call,
    Col,
    Expr,
    Vocabulary,
    as_expr,
    get_operator,
    register_operator,  # noqa: F401  (re-exported)
)

__all__ = ["col", "call", "fill_null", "log1p", "clip", "cast", "bucketize", "hash", "hash_bucket", "cross",
           "split", "length", "lower", "substring", "ngrams", "first_k", "last_k", "hour", "weekday", "day",
           "lookup", "categorify", "json_get", "register_operator", "Vocabulary", "count_encode", "target_encode",
           "quantile_bucketize", "normalize", "minmax", "fill_null_fitted", "history", "window_count",
           "window_mean", "time_since", "pad", "overlap_count"]

ExprLike = Expr | str

def col(name: str) -> Col:
    """The input column ``name``.

    Example:
        >>> col("ts")
        Col(name='ts')
    """
    return Col(name)


def call(op: str, *inputs: ExprLike, **params: object) -> Call:
    """Apply any registered operator (a user operator, say) by name; its parameters are
    checked when the expression is planned (naming the feature).

    Example:
        >>> str(call("hour", "ts"))
        'hour(ts)'
    """
    return Call(op, tuple(as_expr(x) for x in inputs), tuple(params.items()))


def _checked(op: str, *inputs: ExprLike, **params: object) -> Call:
    """:func:`call`, the parameters its :class:`~fbrapids.kernels.Operator` declares checked
    now: a bad one is an OperatorError naming the operator and the parameter where the
    expression is built (the same checks run again when it is planned).

    Example:
        >>> _checked("substring", "title", start=2**64)
        Traceback (most recent call last):
        ...
        fbrapids.errors.OperatorError: substring: parameter 'start' must be an integer in [-9223372036854775808, 9223372036854775807], got 18446744073709551616
    """
    get_operator(op).check_params(params)
    return call(op, *inputs, **params)


def fill_null(x: ExprLike, value: object) -> Call:
    """``x`` with nulls replaced by ``value`` (a number, a string, or ``[]`` for lists).

    A number must fit the column's type exactly (an integer column takes integers in its
    range; a float column rounds to its type): otherwise a FeatureError names the value and
    the column; it is never wrapped.  Null rule: the output is never null (NaN is refused).

    Example:
        >>> str(fill_null("q", ""))
        "fill_null(q, value='')"
    """
    return call("fill_null", x, value=value)


def log1p(x: ExprLike) -> Call:
    """``log(1 + x)`` as float64. Null rule: null in, null out.

    Example:
        >>> str(log1p("price"))
        'log1p(price)'
    """
    return call("log1p", x)


def clip(x: ExprLike, lower: float, upper: float) -> Call:
    """``x`` limited to ``[lower, upper]``, in the input's type. Null rule: null in, null out.

    A bound past the type's range on its own side changes nothing; bounds that leave no
    value of the type, a fractional bound for an integer column, or a bound a float32
    column cannot hold on the other side (``lower=1e39``: never rounded to infinity) are a
    FeatureError naming the column (never wrapped into the type).

    Example:
        >>> str(clip("age", 0, 99))
        'clip(age, lower=0, upper=99)'
    """
    return call("clip", x, lower=lower, upper=upper)


def cast(x: ExprLike, to: str) -> Call:
    """``x`` converted to the fixed-width type ``to`` (``"i8"``, ``"i32"``, ``"f64"``, ...).

    Exact, or a KernelRuntimeError naming the column, the row and the value that does not
    fit (never wrapped).  Floats to integers truncate toward zero; to ``"bool"`` is
    ``x != 0``; to a float type rounds to nearest (an integer past 2^53 to float64 too).

    Example:
        >>> str(cast("hour", "i8"))
        "cast(hour, to='i8')"
    """
    return call("cast", x, to=to)


def bucketize(x: ExprLike, boundaries: Sequence[float]) -> Call:
    """TensorFlow ``Bucketize``: the number of boundaries ``b`` with ``b <= x`` (int32).

    Null rule: null in, null out.  The comparison is exact, as Python compares an int and
    a float: an integer column is never read through float64 (``x = 2**53`` is below the
    boundary ``2**53 + 1``; uint64 ids at ``2**64 - 1`` included), and an integer boundary
    that float64 cannot hold is kept as the integer.  Boundaries must be sorted numbers
    (no NaN): an OperatorError naming the operator and the parameter when built.

    Example:
        >>> str(bucketize("age", [18, 25]))
        'bucketize(age, boundaries=(18.0, 25.0))'
        >>> bucketize("id", [2**53 + 1]).params
        (('boundaries', (9007199254740993,)),)
    """
    bs = tuple(_boundary(b) for b in boundaries)
    if not bs or any(a > b for a, b in zip(bs, bs[1:])):
        raise OperatorError(f"bucketize: parameter 'boundaries' must be a non-empty sorted list, got {boundaries!r}")
    return call("bucketize", x, boundaries=bs)


def _boundary(b: object) -> int | float:
    """A bucketize boundary: a float where float64 holds it exactly, else the integer."""
    if isinstance(b, bool) or not isinstance(b, numbers.Real) or b != b:
        raise OperatorError(f"bucketize: parameter 'boundaries' must hold numbers (no NaN), got {b!r}")
    if not isinstance(b, numbers.Integral):
        return float(b)
    try:
        f = float(b)
    except OverflowError:
        return int(b)
    return f if f == b else int(b)


def hash(x: ExprLike) -> Call:  # noqa: A001 - the operator's name
    """FarmHash Fingerprint64 (uint64) of a string's UTF-8 bytes (NUL bytes included) or of an
    integer's decimal text (the exact value at any width: uint64 ``2**64 - 1`` hashes
    ``"18446744073709551615"``; a bool hashes as ``"1"`` / ``"0"``); of each element for a
    list. Null rule: null in, null out; a list with null elements is an error naming the column.

    Example:
        >>> str(hash("q"))
        'hash(q)'
    """
    return call("hash", x)


def hash_bucket(x: ExprLike, buckets: int) -> Call:
    """``fingerprint64(str(x)) mod buckets`` (int64), TensorFlow ``to_hash_bucket_fast``;
    element-wise on lists (texts as :func:`hash`; ``1 <= buckets < 2**63``). Null rule:
    null in, null out; a list with null elements is an error naming the column.

    Example:
        >>> str(hash_bucket("user_id", 1 << 20))
        'hash_bucket(user_id, buckets=1048576)'
    """
    return _checked("hash_bucket", x, buckets=buckets)


def cross(*xs: ExprLike, buckets: int | None = 1 << 20, cap: int | None = None, sep: str = "_") -> Call:
    """Hashed feature cross: ``hb(str(x1) + sep + ... + sep + str(xk), buckets)``.

    With list inputs, the cartesian product with the first input outermost, keeping the
    first ``cap`` combinations (``None`` or 0: all) (a list<int64> result); scalars join as
    lists of one.  ``sep`` is a non-empty string.
    ``buckets=None`` (or 0) gives raw fingerprints (uint64).  Keys of any length hash (a
    key past 4,096 bytes is hashed piece by piece: the same fingerprint).  Null rule: a
    null input gives null; an empty list gives [].

    Example:
        >>> str(cross("category", "city", buckets=1 << 20))
        "cross(category, city, buckets=1048576, cap=None, sep='_')"
    """
    if len(xs) < 2:
        raise OperatorError(f"cross needs at least 2 inputs, got {len(xs)}")
    return _checked("cross", *xs, buckets=buckets, cap=cap, sep=sep)


def split(x: ExprLike, sep: str = " ", buckets: int | None = None) -> Call:
    """Split a string on every occurrence of ``sep`` (a non-empty string: any bytes, NUL and
    multi-byte characters included), empty pieces removed.

    ``buckets=None``: list<str>; ``buckets > 0``: the tokens' hash buckets (list<int64>);
    ``buckets=0``: their raw fingerprints (list<uint64>).  Null rule: null in, null out.

    Example:
        >>> str(split("query", " ", buckets=1 << 18))
        "split(query, sep=' ', buckets=262144)"
    """
    return _checked("split", x, sep=sep, buckets=buckets)


def length(x: ExprLike) -> Call:
    """UTF-8 bytes of a string (not code points: ``"é"`` is 2); elements of a list (int32).
    Null rule: null in, null out; a list with null elements is an error naming the column.

    Example:
        >>> str(length(split("q")))
        "length(split(q, sep=' ', buckets=None))"
    """
    return call("length", x)


def lower(x: ExprLike) -> Call:
    """ASCII lower case; other bytes (UTF-8 included) unchanged. Null rule: null in, null out.

    Example:
        >>> str(lower("city"))
        'lower(city)'
    """
    return call("lower", x)


def substring(x: ExprLike, start: int, length: int | None = None) -> Call:
    """Code points ``[start, start + length)`` of UTF-8 text: a negative start counts from
    the end (clamped at the first code point, then ``length`` code points are taken);
    ``length=None`` to the end. ``start`` and ``length`` must fit an int64 (an error naming
    the parameter when the expression is built). Null rule: null in, null out.

    Example:
        >>> str(substring("title", 0, 3))
        'substring(title, start=0, length=3)'
    """
    return _checked("substring", x, start=start, length=length)


def ngrams(tokens: ExprLike, n: int, sep: str = " ", buckets: int | None = None) -> Call:
    """The ``n``-grams of a token list joined by ``sep`` (list<str>), or with ``buckets > 0``
    their hash buckets (list<int64>), ``buckets=0`` their raw fingerprints (list<uint64>).
    N-grams of any length hash. Null rule: null in, null out.

    Example:
        >>> str(ngrams(split("q"), 2, buckets=1 << 20))
        "ngrams(split(q, sep=' ', buckets=None), n=2, sep=' ', buckets=1048576)"
    """
    return _checked("ngrams", tokens, n=n, sep=sep, buckets=buckets)


def first_k(x: ExprLike, k: int) -> Call:
    """The first ``k`` elements of a list (the whole list when shorter). Integer lists come
    back as list<int64>, or list<uint64> for unsigned elements (values exact). Null rule: null
    in, null out; a list with null elements is an error naming the column.

    Example:
        >>> str(first_k("clicks", 5))
        'first_k(clicks, k=5)'
    """
    return _checked("first_k", x, k=k)


def last_k(x: ExprLike, k: int) -> Call:
    """The last ``k`` elements of a list (recent behaviour; ``k=0`` gives []). Element types
    as :func:`first_k`. Null rule: null in, null out; null elements: an error naming the column.

    Example:
        >>> str(last_k("clicks", 5))
        'last_k(clicks, k=5)'
    """
    return _checked("last_k", x, k=k)


def hour(ts: ExprLike) -> Call:
    """Hour of day (UTC, 0-23) (int32) of a datetime64 column in any unit (a time-zoned
    one in UTC, unlike pandas' local ``.dt.hour``; naive taken as UTC) or of integer epoch
    seconds (int64 / uint64, any value). Null rule: null in, null out (NaT is null).

    Example:
        >>> str(hour("ts"))
        'hour(ts)'
    """
    return call("hour", ts)


def weekday(ts: ExprLike) -> Call:
    """Day of week (UTC, Monday = 0) (int32) of a datetime64 column or epoch seconds, as
    :func:`hour`. Null rule: null in, null out.

    Example:
        >>> str(weekday("ts"))
        'weekday(ts)'
    """
    return call("weekday", ts)


def day(ts: ExprLike) -> Call:
    """Day of month (UTC, 1-31) (int32) of a datetime64 column or epoch seconds, as
    :func:`hour`. Null rule: null in, null out.

    Example:
        >>> str(day("ts"))
        'day(ts)'
    """
    return call("day", ts)


def lookup(x: ExprLike, vocab: Mapping[Any, int | float] | Sequence[Any] | Vocabulary, oov: int | float = 0) -> Call:
    """Dictionary value -> id (int64); ``oov`` for values not in it.

    ``vocab`` is a dict ``{value: id}``, a sequence (ids 1, 2, ... in order) or a
    :class:`Vocabulary` (e.g. ``Vocabulary.from_counts(series.value_counts(), min_freq)``).
    A dict with float values (scores, prices, embeddings of one number) gives float64 and
    ``oov`` (a float) for the rest.  Keys match as Python compares them, in both forms:
    uint64 ids exactly (``2**64 - 1`` is not ``-1``; ``2**63 - 2`` is not ``2**63 - 1``,
    never through float64), a float column's value only a key equal to it (``2**53 + 1``
    matches no float64).  Null rule: a null input gives ``oov``.

    Example:
        >>> str(lookup("city", {"c1": 1, "c2": 2}))
        'lookup(city, vocab=Vocabulary(str, 2 keys), oov=0)'
        >>> str(lookup("city", {"c1": 0.25}, oov=0.0))
        "lookup_value(city, keys=('c1',), values=(0.25,), default=0.0)"
    """
    if isinstance(vocab, Mapping):
        ids: dict[Any, int] = {}
        for k, v in vocab.items():
            if isinstance(v, float):  # a float value anywhere: values, not ids
                return call("lookup_value", x, keys=tuple(vocab), values=tuple(float(v) for v in vocab.values()),
                            default=float(oov))
            ids[k] = v
        vocab = Vocabulary.from_mapping(ids)
    elif not isinstance(vocab, Vocabulary):
        vocab = Vocabulary.from_values(vocab)
    return call("lookup", x, vocab=vocab, oov=oov)


def pad(x: ExprLike, n: int, value: int | str | None = 0, side: str = "right") -> Call:
    """A list made exactly ``n`` long: ``side="right"`` keeps the first ``n`` elements and pads
    after them; ``side="left"`` keeps the last ``n`` (the most recent) and pads before them.
    A null list becomes ``n`` padding values (0 is categorify's padding id).  The result
    keeps the input's list type and its elements exactly (uint64 ids, null elements);
    ``value`` must be an element of that type (``None``: null padding), else an error
    naming the expression and the value.

    Example:
        >>> str(pad("hist", 50, 0, side="left"))
        "pad(hist, n=50, value=0, side='left')"
    """
    if side not in ("left", "right"):
        raise OperatorError(f"pad: side must be 'left' or 'right', got {side!r}")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, str))):
        raise OperatorError(f"pad: parameter 'value' must be an integer, a string or None, got {value!r}")
    get_operator("pad").check_params({"n": n})  # (before int(): a string is no length)
    return call("pad", x, n=int(n), value=value, side=side)


def overlap_count(a: ExprLike, b: ExprLike) -> Call:
    """How many elements of list ``a`` appear in list ``b`` (int64; a duplicate in ``a`` counts
    each time). Elements compare by value: int64 5 matches uint64 5, never the string "5";
    null elements never match. Null rule: null if either list is null.

    Example:
        >>> str(overlap_count(split("query"), split("title")))
        "overlap_count(split(query, sep=' ', buckets=None), split(title, sep=' ', buckets=None))"
    """
    return call("overlap_count", a, b)


def categorify(x: ExprLike, min_freq: int = 1, max_size: int | None = None, oov_buckets: int = 0,
               vocab: str | None = None) -> Call:
    """A fitted vocabulary: value -> id, for scalars or element-wise for lists.

    Fit it on the training frame (``fitted = train.fbx.fit(...)``), then extract ``fitted``
    anywhere; it is never refitted.  The vocabulary keeps values seen at least
    ``min_freq`` times, at most ``max_size`` of them (the most frequent; ties by value).
    Ids: 0 padding (what :func:`pad` adds), 1 null, ``2 .. 1 + max(oov_buckets, 1)`` out
    of vocabulary (with ``oov_buckets``, rare and unseen values are spread over that many
    ids by their FarmHash), then the vocabulary by descending count.  Calls with the same
    ``vocab`` name share one vocabulary fitted over all their columns (history item ids
    then equal candidate item ids).  Values compare exactly (``"a"`` and ``"a\\x00"`` differ;
    ids past 2^53 stay distinct; an int state matches uint64 / float values by exact value);
    a state fitted on numbers applied to text (ids read as strings) or the reverse is an
    ``OperatorTypeError`` naming the column, never all out of vocabulary.

    Example:
        >>> str(categorify("city", min_freq=2))
        'categorify(city, min_freq=2, max_size=None, oov_buckets=0, vocab=None)'
    """
    return call("categorify", x, min_freq=min_freq, max_size=max_size, oov_buckets=oov_buckets, vocab=vocab)


def count_encode(*keys: ExprLike) -> Call:
    """Rows per key (tuple) in the fitted frame, int64; 0 for unseen or null keys (a tuple
    with any null).  Keys compare as :func:`categorify`'s values do.

    Example:
        >>> str(count_encode("user_id", "category"))
        'count_encode(user_id, category, n_keys=2)'
    """
    return call("count_encode", *keys, n_keys=len(keys))


def target_encode(*keys: ExprLike, label: ExprLike, smoothing: float = 20.0, folds: int = 5, seed: int = 0,
                  fold_by: ExprLike | None = None) -> Call:
    """Smoothed mean ``label`` per key (tuple): ``(sum + smoothing * prior) / (count + smoothing)``.

    Fitted on the training frame; other frames get the frozen statistics.  On the
    training frame itself (``extract(fitted, training=True)``) each row gets out-of-fold
    statistics over ``folds`` seeded folds -- keys' and prior's sums without the row's fold --
    so no row's label enters its own encoding.  ``fold_by`` (a row id column of integers or
    text, e.g. ``"instance_id"``) seeds the folds so they do not depend on partitioning
    (required on dask); without it the row position does.  A row's fold is
    ``splitmix64(h + 0x9E3779B97F4A7C15 * (seed + 1)) % folds`` (mod 2^64 arithmetic), ``h``
    its ``fold_by`` value's FarmHash Fingerprint64 (``hash(fold_by)``: the text, an integer's
    decimal text; 0 for a null) or, without ``fold_by``, its position ``0 .. n - 1``;
    ``splitmix64(z)``: ``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
    z *= 0x94D049BB133111EB; z ^= z >> 31``.  Applied with frozen statistics the frame
    needs only the keys (no label: a serving frame has none).  Labels are summed as float64
    (out of fold, the other folds' sums are added up, never the row's fold subtracted from
    the total, so a large label never cancels small ones); rows with a null label count in
    neither sum nor count.

    Example:
        >>> str(target_encode("user_id", label="click", fold_by="instance_id"))
        'target_encode(user_id, click, instance_id, n_keys=1, smoothing=20.0, folds=5, seed=0, fold_by=True)'
    """
    if not keys:
        raise OperatorError("target_encode needs at least one key")
    extra = (fold_by,) if fold_by is not None else ()
    return call("target_encode", *keys, label, *extra, n_keys=len(keys), smoothing=float(smoothing),
                folds=int(folds), seed=int(seed), fold_by=fold_by is not None)


def quantile_bucketize(x: ExprLike, n: int) -> Call:
    """Fitted quantile buckets of ``x``: null -> 0, values -> 1..n (int32); boundaries exact
    from value counts, so the same whatever the partitioning or backend.

    Example:
        >>> str(quantile_bucketize("price", 10))
        'quantile_bucketize(price, n=10)'
    """
    return call("quantile_bucketize", x, n=int(n))


def normalize(x: ExprLike) -> Call:
    """``(x - mean) / std`` with the fitted mean and population std (float64); null in, null out.
    A constant column (std 0) is divided by 1; fitted on no values, every output is null.

    Example:
        >>> str(normalize("price"))
        'normalize(price)'
    """
    return call("normalize", x)


def minmax(x: ExprLike) -> Call:
    """``(x - min) / (max - min)`` with the fitted min and max (float64); null in, null out.
    Values outside the fitted range map outside [0, 1]; a constant column is divided by 1;
    fitted on no values, every output is null.

    Example:
        >>> str(minmax("price"))
        'minmax(price)'
    """
    return call("minmax", x)


def fill_null_fitted(x: ExprLike, stat: str = "mean") -> Call:
    """``x`` (as float64) with nulls replaced by its fitted ``"mean"`` or ``"median"`` (the
    mean of the two middle values for an even count); fitted on no values, nulls stay null.

    Example:
        >>> str(fill_null_fitted("age", "median"))
        "fill_null_fitted(age, stat='median')"
    """
    if stat not in ("mean", "median"):
        raise OperatorError(f"fill_null_fitted: stat must be 'mean' or 'median', got {stat!r}")
    return call("fill_null_fitted", x, stat=stat)


def history(key: ExprLike, item: ExprLike, time: ExprLike, last_n: int = 50, events: ExprLike | None = None) -> Call:
    """The key's last ``last_n`` items strictly before the row's time, oldest first (a list).

    ``events`` (a boolean / 0-1 column, e.g. ``"click"``; null is false) keeps only those
    rows as events.  Events at equal times are ordered by item (null items first).  A row
    with a null key or time gets ``[]``.

    ``time`` is a datetime64 column (any unit, with or without a time zone: instants are
    compared exactly in the column's unit) or integer times (epoch seconds or any integer
    unit; exact int64, never through float64).  On dask only the inputs are shuffled by
    ``key``; the frame keeps its partitions and row order.

    Example:
        >>> str(history("user_id", "category", "ts", last_n=50, events="click"))
        'history(user_id, ts, category, click, last_n=50)'
    """
    extra = (events,) if events is not None else ()
    return call("history", key, time, item, *extra, last_n=int(last_n))


def window_count(key: ExprLike, time: ExprLike, window: int | str, events: ExprLike | None = None) -> Call:
    """The key's events in ``[t - window, t)`` (int64; 0 for a row with a null key or time).

    ``window``: ``"90m"``, ``"1h"``, ``"1d"``, ``"7d"`` (s / m / h / d / w), or a number:
    seconds for a datetime ``time`` (whatever its unit), the column's own units for an
    integer ``time`` (a string window takes integer times as epoch seconds).  Times as in
    :func:`history`; ``events`` as there.

    Example:
        >>> str(window_count("user_id", "ts", "1d"))
        "window_count(user_id, ts, window='1d')"
    """
    extra = (events,) if events is not None else ()
    return call("window_count", key, time, *extra, window=window)


def window_mean(key: ExprLike, value: ExprLike, time: ExprLike, window: int | str,
                events: ExprLike | None = None) -> Call:
    """Mean of ``value`` over the key's events in ``[t - window, t)`` with a non-null
    ``value`` (float64; NaN when none).  Only values inside the window enter its sum (a huge
    old value never cancels out of later windows).  ``window`` and times as in
    :func:`window_count`.

    Example:
        >>> str(window_mean("user_id", "click", "ts", "7d"))
        "window_mean(user_id, ts, click, window='7d')"
    """
    extra = (events,) if events is not None else ()
    return call("window_mean", key, time, value, *extra, window=window)


def time_since(key: ExprLike, time: ExprLike, events: ExprLike | None = None) -> Call:
    """Time since the key's previous event strictly before the row's time (int64, null when
    none or when the key or time is null): in the integer time's own units, or in whole
    seconds (floored) for a datetime column, whatever its unit.

    Example:
        >>> str(time_since("user_id", "ts"))
        'time_since(user_id, ts)'
    """
    extra = (events,) if events is not None else ()
    return call("time_since", key, time, *extra)


def json_get(x: ExprLike, path: str) -> Call:
    """The string at the dotted ``path`` of a strict JSON document (RFC 8259, the whole
    text one value; WORKLOAD.md section 3). Null rule: null when the input is null, does
    not parse, lacks the path, or holds a non-string there.

    Example:
        >>> str(json_get("ctx", "device.os"))
        "json_get(ctx, path='device.os')"
    """
    return call("json_get", x, path=path)
