"""Independent references for the fitted and history operators of ``fbrapids.ops``.

Written from the operators' docstrings in plain Python (``fractions`` / ``math.fsum`` for
exact statistics, pyfarmhash for out-of-vocabulary buckets); nothing here imports
fbrapids.  Values are Python objects, ``None`` for null (of any kind).

Fitted operators take the training column(s) and the column(s) to apply to: fit on the
training rows, apply anywhere, never refit.

History operators take one frame's columns: ``keys``, ``times`` (integers: epoch
seconds or any integer unit, or instants in nanoseconds with ``per_second=10**9`` for a
datetime column), ``items`` / ``values`` and an optional ``events`` flag column.  An event
is a row with a non-null key and time and a true flag (and, for ``window_mean``, a non-null
value); a row sees only its key's events strictly before its own time.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable, Sequence

import farmhash

PAD_ID, NULL_ID, OOV_ID = 0, 1, 2
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


# -- helpers -----------------------------------------------------------------------------------
def _fingerprint(v: Any) -> int:
    text = v if isinstance(v, str) else str(int(v))
    return farmhash.fingerprint64(text.encode("utf-8", "surrogatepass"))


def _counts(values: Sequence[Any]) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for v in values:
        if v is not None:
            out[v] = out.get(v, 0) + 1
    return out


# -- fitted operators ---------------------------------------------------------------------------
def categorify_vocabulary(train: Sequence[Any], min_freq: int = 1, max_size: int | None = None) -> list[Any]:
    """The kept values, most frequent first (ties by value): seen at least ``min_freq``
    times, at most ``max_size`` of them.  Lists count element-wise."""
    flat: list[Any] = []
    for v in train:
        if isinstance(v, list):
            flat += v
        else:
            flat.append(v)
    counts = _counts(flat)
    kept = sorted((v for v, n in counts.items() if n >= min_freq), key=lambda v: (-counts[v], v))
    return kept if max_size is None else kept[:max_size]


def categorify(train: Sequence[Any], apply: Sequence[Any], min_freq: int = 1, max_size: int | None = None,
               oov_buckets: int = 0) -> list[Any]:
    """Ids: 0 padding, 1 null, ``2 .. 1 + B`` out of vocabulary (``B = max(oov_buckets, 1)``;
    the value's fingerprint mod B picks one), the vocabulary from ``2 + B``.  A null list
    stays null; lists are mapped element-wise."""
    vocab = categorify_vocabulary(train, min_freq, max_size)
    width = max(oov_buckets, 1)
    ids = {v: OOV_ID + width + i for i, v in enumerate(vocab)}

    def one(v: Any) -> int:
        if v is None:
            return NULL_ID
        if v in ids:
            return ids[v]
        return OOV_ID + (_fingerprint(v) % width if width > 1 else 0)

    return [None if v is None and any(isinstance(x, list) for x in apply) else
            [one(x) for x in v] if isinstance(v, list) else one(v) for v in apply]


def count_encode(train_keys: Sequence[tuple], apply_keys: Sequence[tuple]) -> list[int]:
    """Rows per key tuple of the training rows; 0 for an unseen key or one with a null."""
    counts = _counts([k for k in train_keys if None not in k])
    return [0 if None in k else counts.get(k, 0) for k in apply_keys]


def _te(s: Fraction, c: int, prior: Fraction, smoothing: float) -> float:
    if smoothing > 0:
        return float((s + Fraction(smoothing) * prior) / (c + Fraction(smoothing)))
    return float(s / c) if c else float(prior)


def target_encode(train_keys: Sequence[tuple], train_labels: Sequence[Any], apply_keys: Sequence[tuple],
                  smoothing: float = 20.0) -> list[float]:
    """Frozen statistics: ``(sum + smoothing * prior) / (count + smoothing)`` per key tuple,
    prior = the mean label of the labelled training rows (0 when none); rows with a null
    label or key count in neither."""
    labelled = [(k, Fraction(y)) for k, y in zip(train_keys, train_labels) if y is not None]
    prior = sum((y for _, y in labelled), Fraction(0)) / len(labelled) if labelled else Fraction(0)
    sums: dict[tuple, Fraction] = {}
    counts: dict[tuple, int] = {}
    for k, y in labelled:
        if None not in k:
            sums[k] = sums.get(k, Fraction(0)) + y
            counts[k] = counts.get(k, 0) + 1
    return [_te(sums.get(k, Fraction(0)) if None not in k else Fraction(0), counts.get(k, 0) if None not in k else 0,
                prior, smoothing) for k in apply_keys]


def _splitmix64(z: int) -> int:
    mask = (1 << 64) - 1
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & mask
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def fold(row_id: Any, folds: int, seed: int = 0, position: int | None = None) -> int:
    """A training row's fold: ``splitmix64(h + 0x9E3779B97F4A7C15 * (seed + 1)) % folds``,
    ``h`` the Fingerprint64 of the ``fold_by`` value's text (0 for a null) or, without
    ``fold_by`` (``row_id`` None and ``position`` given), the row's position."""
    h = position if position is not None else 0 if row_id is None else _fingerprint(row_id)
    return _splitmix64((h + 0x9E3779B97F4A7C15 * (seed + 1)) & ((1 << 64) - 1)) % folds


def target_encode_oof(keys: Sequence[tuple], labels: Sequence[Any], folds_of_rows: Sequence[int],
                      smoothing: float = 20.0) -> list[float]:
    """Out of fold, on the training rows themselves: each row's key sums and prior over the
    rows of the OTHER folds only (its own label never enters its encoding)."""
    out = []
    for k, f in zip(keys, folds_of_rows):
        others = [(kk, Fraction(y)) for kk, y, ff in zip(keys, labels, folds_of_rows) if ff != f and y is not None]
        prior = sum((y for _, y in others), Fraction(0)) / len(others) if others else Fraction(0)
        mine = [y for kk, y in others if None not in k and kk == k]
        out.append(_te(sum(mine, Fraction(0)), len(mine), prior, smoothing))
    return out


def quantile_boundaries(train: Sequence[Any], n: int) -> list[Any]:
    """Boundary ``i`` (1 <= i < n) is ``sorted[i * N // n]`` of the non-null training
    values; repeats and the minimum are dropped."""
    xs = sorted(v for v in train if v is not None)
    out: list[Any] = []
    for i in range(1, n):
        if not xs:
            break
        b = xs[i * len(xs) // n]
        if b > xs[0] and (not out or b > out[-1]):
            out.append(b)
    return out


def quantile_bucketize(train: Sequence[Any], apply: Sequence[Any], n: int) -> list[int]:
    """Null -> 0; a value -> 1 + the number of boundaries ``<=`` it (compared exactly)."""
    bounds = quantile_boundaries(train, n)
    return [0 if v is None else 1 + sum(1 for b in bounds if Fraction(b) <= Fraction(v)) for v in apply]


def _moments(train: Sequence[Any]) -> tuple[float, float] | None:
    xs = [Fraction(v) for v in train if v is not None]
    if not xs:
        return None
    mean = sum(xs, Fraction(0)) / len(xs)
    var = sum(((x - mean) ** 2 for x in xs), Fraction(0)) / len(xs)
    return float(mean), math.sqrt(float(var))


def normalize(train: Sequence[Any], apply: Sequence[Any]) -> list[Any]:
    """``(x - mean) / std``, population std (a constant column: std taken as 1); null in,
    null out; fitted on no values: every output null."""
    m = _moments(train)
    if m is None:
        return [None] * len(apply)
    mean, std = m
    return [None if v is None else (float(v) - mean) / (std or 1.0) for v in apply]


def minmax(train: Sequence[Any], apply: Sequence[Any]) -> list[Any]:
    """``(x - min) / (max - min)`` (a constant column: divided by 1); null in, null out;
    fitted on no values: every output null."""
    xs = [v for v in train if v is not None]
    if not xs:
        return [None] * len(apply)
    lo, hi = min(xs), max(xs)
    return [None if v is None else (float(v) - float(lo)) / (float(hi - lo) or 1.0) for v in apply]


def median(train: Sequence[Any]) -> float | None:
    xs = sorted(v for v in train if v is not None)
    if not xs:
        return None
    return float(Fraction(xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2)


def fill_null_fitted(train: Sequence[Any], apply: Sequence[Any], stat: str = "mean") -> list[Any]:
    """``x`` as float with nulls replaced by the training mean / median (nulls stay null
    when the training column has no values)."""
    m = _moments(train)
    value = None if m is None else (m[0] if stat == "mean" else median(train))
    return [value if v is None else float(v) for v in apply]


# -- history operators ---------------------------------------------------------------------------
def window_units(window: int | str, per_second: int = 1) -> int:
    """A window in time units: an int is already in them; ``"1h"`` / ``"1d"`` are seconds
    times ``per_second`` (the units of one second)."""
    if isinstance(window, str):
        return int(window[:-1]) * UNITS[window[-1]] * per_second
    return int(window)


def _events(keys: Sequence[Any], times: Sequence[Any], events: Sequence[Any] | None,
            values: Sequence[Any] | None = None) -> list[int]:
    rows = []
    for i, (k, t) in enumerate(zip(keys, times)):
        if k is None or t is None:
            continue
        if events is not None and not events[i]:
            continue
        if values is not None and values[i] is None:
            continue
        rows.append(i)
    return rows


def _earlier(i: int, keys: Sequence[Any], times: Sequence[Any], rows: list[int], lo: int | None = None) -> list[int]:
    if keys[i] is None or times[i] is None:
        return []
    t = times[i]
    return [j for j in rows if keys[j] == keys[i] and times[j] < t and (lo is None or times[j] >= lo)]


def _item_order(v: Any) -> tuple:
    return (v is not None, v if v is not None else 0)


def history(keys: Sequence[Any], items: Sequence[Any], times: Sequence[Any], last_n: int = 50,
            events: Sequence[Any] | None = None) -> list[list[Any]]:
    """The key's last ``last_n`` event items strictly before the row's time, oldest first;
    equal times ordered by item (nulls first); a row with a null key or time: []."""
    rows = _events(keys, times, events)
    out = []
    for i in range(len(keys)):
        seen = sorted(_earlier(i, keys, times, rows), key=lambda j: (times[j], _item_order(items[j])))
        out.append([items[j] for j in seen][-last_n:] if last_n > 0 else [])
    return out


def window_count(keys: Sequence[Any], times: Sequence[Any], window: int | str, events: Sequence[Any] | None = None,
                 per_second: int = 1) -> list[int]:
    """The key's events in ``[t - window, t)``; 0 for a null key or time."""
    w = window_units(window, per_second)
    rows = _events(keys, times, events)
    return [len(_earlier(i, keys, times, rows, None if times[i] is None else times[i] - w)) for i in range(len(keys))]


def window_mean(keys: Sequence[Any], values: Sequence[Any], times: Sequence[Any], window: int | str,
                events: Sequence[Any] | None = None, per_second: int = 1) -> list[Any]:
    """The mean of the non-null values of the key's events in ``[t - window, t)`` (exact
    sum, then divided); null (NaN) when there are none."""
    w = window_units(window, per_second)
    rows = _events(keys, times, events, values)
    out: list[Any] = []
    for i in range(len(keys)):
        seen = _earlier(i, keys, times, rows, None if times[i] is None else times[i] - w)
        out.append(float(sum((Fraction(values[j]) for j in seen), Fraction(0)) / len(seen)) if seen else None)
    return out


def time_since(keys: Sequence[Any], times: Sequence[Any], events: Sequence[Any] | None = None,
               per_second: int = 1) -> list[Any]:
    """``t`` minus the key's latest event time strictly before ``t`` (null when none): in
    the integer time's own units, or in whole seconds (floored) for a datetime
    (``per_second`` the units of one second of ``times``)."""
    rows = _events(keys, times, events)
    out: list[Any] = []
    for i in range(len(keys)):
        seen = _earlier(i, keys, times, rows)
        out.append(None if not seen else (times[i] - max(times[j] for j in seen)) // per_second)
    return out


OPERATORS: dict[str, Callable[..., Any]] = {
    "categorify": categorify, "count_encode": count_encode, "target_encode": target_encode,
    "quantile_bucketize": quantile_bucketize, "normalize": normalize, "minmax": minmax,
    "fill_null_fitted": fill_null_fitted, "history": history, "window_count": window_count,
    "window_mean": window_mean, "time_since": time_since,
}
