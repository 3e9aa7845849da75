"""The dictionary path: an operator computed once per distinct input value (or distinct
tuple of values, for a cross) of a partition, its results scattered to the rows.

Users, ads, cities, title and interest tokens recur thousands of times per partition; the
row path fingerprints each occurrence.  For the operators
:func:`~fbrapids.kernels.plan.dictionary_capable` allows (pure functions of their inputs'
values), the runtime instead

1. codes the inputs: an Arrow dictionary / pandas categorical column as it comes (its
   codes are free), a column already coded by an earlier operator (``split`` of a coded
   column feeds ``ngrams`` the same codes), or an Arrow ``dictionary_encode`` (nulls are
   a value of their own, so the null rule is the row path's);
2. for a cross, combines the inputs' codes into one code per distinct tuple;
3. runs the operator's own one-operator plan (:meth:`~fbrapids.kernels.plan.Plan.node_plan`,
   the same C) over the distinct values, and takes its result by the codes,

so the output is the row path's bit for bit.  The choice is per operator and partition
(:func:`choose`), never below :data:`MIN_ROWS` rows: operators over coded inputs take it;
a scalar operator (``hash``, ``hash_bucket``, ``cross``, ``lookup``) over a plain column does
not on the CPU, where coding a column costs about what fingerprinting it does; a token
operator (``split``, ``ngrams``: several fingerprints per row) over a plain column is
screened with a strided sample (mostly distinct text stays on the row path), then its input
is coded (once per partition, shared by the operators that read it) and the path is kept
where the distinct values are at most :data:`MAX_DISTINCT_SHARE` of the rows.  The layer
kernel skips the operators chosen (its skip array, :mod:`fbrapids.kernels.abi`), so a plan
is compiled once whatever the choice.  ``FBRAPIDS_DICTIONARY=off`` (or :func:`dictionary_mode`)
turns the path off, ``on`` forces it for every capable operator (the tests' switch).

Example:
    >>> import pandas as pd
    >>> from fbrapids import ops
    >>> from fbrapids.kernels.plan import build_plan
    >>> from fbrapids.kernels.runtime_host import HostPlan
    >>> plan = build_plan({"h": ops.hash_bucket("u", 97)}, {"u": "i64"})
    >>> frame = pd.DataFrame({"u": [5, 7, 5, 5, 7, 9]})
    >>> with dictionary_mode("on"):
    ...     once = HostPlan(plan).run(frame)  # 3 distinct values: 3 fingerprints, 3 saved
    >>> with dictionary_mode("off"):
    ...     rows = HostPlan(plan).run(frame)
    >>> once.columns["h"].data.tolist() == rows.columns["h"].data.tolist()
    True
    >>> (once.stats.hashes, once.stats.hashes_saved), (rows.stats.hashes, rows.stats.hashes_saved)
    ((3, 3), (6, 0))
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fbrapids.errors import UsageError
from fbrapids.kernels import types as T
from fbrapids.kernels.arrow_take import take_var_width
from fbrapids.kernels.columns import HostColumn, from_arrow, pack_validity, to_arrow
from fbrapids.kernels.plan import Node, Plan

#: below this many rows a partition stays on the row path (``auto`` mode)
MIN_ROWS = 16_384
#: the strided sample that screens a plain input: at least this many rows ...
SAMPLE_ROWS = 8_192
#: ... and at least this share of the partition's rows (a sample's distinct share falls
#: towards the column's as it grows: a fixed 8,192 rows of a 2M-row partition showed 0.64
#: for interests, whose full share is 0.08, and 0.87 for queries, 0.75)
SAMPLE_FRACTION = 1 / 16
#: a sample with more distinct values than this share of its rows: the row path at once,
#: before the whole column is coded.  On the canonical workload's 1/16 samples, queries
#: show 0.81-0.85 (full 0.75-0.79: the row path), titles and interests 0.30-0.40 (full
#: 0.05-0.08: the dictionary path), at 300k and 2M rows alike
SAMPLE_DISTINCT_MAX = 0.7
#: the dictionary path is kept where the distinct values (tuples) are at most this share of
#: the rows (``auto`` mode; a token list costs several fingerprints per row)
MAX_DISTINCT_SHARE = {"scalar": 0.3, "tokens": 0.5}
MODES = ("auto", "on", "off")

_override: list[str] = []
_lock = threading.Lock()


def mode() -> str:
    """The dictionary path's mode: :func:`dictionary_mode`'s, else ``$FBRAPIDS_DICTIONARY``
    (``auto``, the default; ``on``; ``off``).

    Example:
        >>> with dictionary_mode("off"):
        ...     mode()
        'off'
    """
    with _lock:
        if _override:
            return _override[-1]
    value = os.environ.get("FBRAPIDS_DICTIONARY", "auto").strip().lower() or "auto"
    if value not in MODES:
        raise UsageError(f"FBRAPIDS_DICTIONARY={value!r}: expected one of {', '.join(MODES)}")
    return value


@contextlib.contextmanager
def dictionary_mode(value: str) -> Iterator[None]:
    """Run the block with the dictionary path ``auto``, ``on`` (every capable operator of
    every partition) or ``off`` (the row path), in this process.

    Example:
        >>> with dictionary_mode("on"):
        ...     mode()
        'on'
    """
    if value not in MODES:
        raise UsageError(f"dictionary mode {value!r}: expected one of {', '.join(MODES)}")
    with _lock:
        _override.append(value)
    try:
        yield
    finally:
        with _lock:
            _override.pop()


@dataclass
class Coded:
    """A column as codes: ``values`` (one row per code) taken by ``codes`` (one per row)."""

    codes: np.ndarray  #: int32 / int64, in [0, len(values)); nulls have a code of their own
    values: HostColumn


def take(col: HostColumn, idx: np.ndarray) -> HostColumn:
    """The rows ``idx`` of ``col``: numpy for fixed widths; strings and lists of fixed-width
    values by the take kernel (:func:`~fbrapids.kernels.arrow_take.take_var_width`: output
    written once, OpenMP), Arrow ``take`` for the rest.

    Example:
        >>> c = HostColumn("i64", 3, data=np.array([4, 5, 6]))
        >>> take(c, np.array([2, 2, 0])).data.tolist()
        [6, 6, 4]
    """
    if col.type in T.FIXED_TYPES:
        assert col.data is not None  # (a fixed-width column: its data is set)
        valid = None if col.valid is None else pack_validity(col.validity_bool()[idx])
        return HostColumn(col.type, len(idx), valid=valid, data=col.data[: col.n][idx])
    arr = to_arrow(col)
    taken = take_var_width(arr, idx) if len(idx) else None
    return from_arrow(taken if taken is not None else arr.take(pa.array(idx)), "dictionary")


def encode(col: HostColumn) -> Coded:
    """``col`` dictionary-encoded (Arrow ``dictionary_encode``; a null is a value).

    Example:
        >>> import pandas as pd
        >>> from fbrapids.kernels.columns import from_series
        >>> c = encode(from_series(pd.Series(["b", None, "b", "a"])))
        >>> c.codes.tolist(), c.values.n
        ([0, 1, 0, 2], 3)
    """
    own = col.dictionary()
    if own is not None:  # an Arrow dictionary / categorical column: its own codes
        return Coded(*own)
    enc = pc.dictionary_encode(to_arrow(col), null_encoding="encode")
    return Coded(np.asarray(enc.indices), from_arrow(enc.dictionary, "dictionary"))


def encode_all(columns: dict[int, HostColumn]) -> dict[int, Coded]:
    """:func:`encode` of each column, the columns in parallel threads (Arrow's
    ``dictionary_encode`` is one thread per column and releases the GIL).

    Example:
        >>> import pandas as pd
        >>> from fbrapids.kernels.columns import from_series
        >>> out = encode_all({1: from_series(pd.Series(["x", "y", "x"])), 2: from_series(pd.Series(["z"]))})
        >>> out[1].codes.tolist(), out[2].values.n
        ([0, 1, 0], 1)
    """
    if len(columns) < 2:
        return {k: encode(c) for k, c in columns.items()}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(columns), thread_name_prefix="fbx-encode") as pool:
        futures = {k: pool.submit(encode, c) for k, c in columns.items()}
        return {k: f.result() for k, f in futures.items()}


def first_rows(codes: np.ndarray) -> np.ndarray:
    """The first row of each code, for codes numbered in order of first appearance.

    Example:
        >>> first_rows(np.array([0, 1, 0, 2, 1])).tolist()
        [0, 1, 3]
    """
    if not len(codes):
        return np.zeros(0, dtype=np.int64)
    seen = np.maximum.accumulate(codes)
    new = np.empty(len(codes), dtype=bool)
    new[0] = True
    new[1:] = codes[1:] > seen[:-1]
    return np.flatnonzero(new)


def _sample(n: int) -> np.ndarray:
    """Strided rows: ``max(SAMPLE_ROWS, n * SAMPLE_FRACTION)`` of them (all, for a short partition)."""
    size = max(SAMPLE_ROWS, int(n * SAMPLE_FRACTION))
    step = max(1, n // size)
    return np.arange(0, n, step, dtype=np.int64)[:size]


def _combine(codes: list[np.ndarray], sizes: list[int]) -> Coded | None:
    """One code per distinct tuple of the inputs' codes, renumbered in order of first
    appearance; ``values`` holds the first row of each (None when the tuple space passes int64)."""
    if math.prod(sizes) >= 2**62:
        return None
    combined = codes[0].astype(np.int64)
    for c, size in zip(codes[1:], sizes[1:]):
        combined = combined * size + c
    enc = pc.dictionary_encode(pa.array(combined))
    joint = np.asarray(enc.indices)
    rows = first_rows(joint)
    return Coded(joint, HostColumn("i64", len(rows), data=rows))


def _kind(node: Node) -> str:
    path = node.operator().dictionary
    return path.kind if path is not None else "scalar"


def choose(plan: Plan, node: Node, values: dict[int, HostColumn], coded: dict[int, Coded], n: int,
           how: str) -> str | None:
    """Why ``node`` may take the dictionary path on this partition, or None for the row path.

    ``coded`` holds the columns already coded (dictionary inputs, earlier operators'
    results).  Plain inputs are screened with a strided sample (:func:`_sample`): when most of it
    is distinct (more than :data:`SAMPLE_DISTINCT_MAX`), the row path;
    otherwise the inputs are coded and :func:`run_coded` keeps the dictionary path only when
    the exact distinct count is at most ``MAX_DISTINCT_SHARE`` of the rows.
    """
    if how == "off" or n == 0:
        return None
    args = node.args
    path = node.operator().dictionary
    if path is not None and path.coded_inputs_only and any(a not in coded for a in args):
        return None  # a token list has no dictionary of its own
    if how == "on":
        return "forced (dictionary mode on)"
    if n < MIN_ROWS:
        return None
    if all(a in coded for a in args):
        return "coded input(s)"
    if _kind(node) == "scalar":
        # coding a plain column costs about one fingerprint per row on the CPU: a scalar
        # operator gains only from inputs coded already (dictionary columns, shared codes)
        return None
    rows = _sample(n)
    sample_codes = []
    for a in args:
        sample_codes.append(coded[a].codes[rows] if a in coded else np.asarray(
            pc.dictionary_encode(to_arrow(take(values[a], rows)), null_encoding="encode").indices))
    sizes = [int(c.max()) + 1 for c in sample_codes]
    joint = _combine(sample_codes, sizes) if len(args) > 1 else Coded(sample_codes[0], HostColumn("i64", 0))
    if joint is None:
        return None
    distinct = int(joint.codes.max()) + 1 if len(joint.codes) else 0
    if distinct > SAMPLE_DISTINCT_MAX * len(rows):
        return None
    return f"{distinct:,} distinct in a sample of {len(rows):,} rows"


def run_coded(plan: Plan, node: Node, values: dict[int, HostColumn], coded: dict[int, Coded],
              run_distinct: Callable[[list[HostColumn]], HostColumn], how: str = "auto") -> Coded | None:
    """``node``'s result as codes: its operator run once per distinct input (tuple) by
    ``run_distinct`` (the operator's own plan over the distinct values); None (the row
    path) when the distinct values pass ``MAX_DISTINCT_SHARE`` of the rows (``auto``) or
    the tuple space is too large to code."""
    parts = [coded[a] if a in coded else encode(values[a]) for a in node.args]
    for a, c in zip(node.args, parts):
        coded.setdefault(a, c)
    n = len(parts[0].codes)
    limit = MAX_DISTINCT_SHARE[_kind(node)] * n if how == "auto" else float("inf")
    if len(parts) == 1:
        if parts[0].values.n > limit:
            return None
        return Coded(parts[0].codes, run_distinct([parts[0].values]))
    joint = _combine([p.codes for p in parts], [p.values.n for p in parts])
    if joint is None or joint.values.n > limit:
        return None
    rows = joint.values.data
    distinct = [take(p.values, p.codes[rows]) for p in parts]
    return Coded(joint.codes, run_distinct(distinct))


def hash_count(node: Node, col: HostColumn) -> int:
    """FarmHash fingerprints behind a hashing operator's result column (one per value or
    list element of an integer result; 0 for text results and other operators).

    Example:
        >>> from fbrapids import ops
        >>> from fbrapids.kernels.plan import build_plan
        >>> p = build_plan({"h": ops.hash_bucket("u", 8)}, {"u": "i64"})
        >>> hash_count(p.nodes[1], HostColumn("i64", 3, data=np.zeros(3, np.int64)))
        3
    """
    if node.op is None or not node.op.hashes:
        return 0
    if node.type in ("str", "list<str>"):
        return 0  # tokens, not their hashes
    if node.type in T.FIXED_TYPES:
        return col.n - col.null_count()
    assert col.offsets is not None  # (a string or list column: its offsets are set)
    return int(col.offsets[col.n] - col.offsets[0]) if col.n else 0


def describe(plan: Plan, inputs: dict[int, HostColumn] | None) -> dict[int, str]:
    """Per dictionary-capable node of ``plan``, the path a run over ``inputs`` (the input
    columns by node id; None for a dask frame's meta) takes, in words, for ``explain``.

    Example:
        >>> import pandas as pd
        >>> from fbrapids import ops
        >>> from fbrapids.kernels.plan import build_plan
        >>> from fbrapids.kernels.columns import from_series
        >>> p = build_plan({"t": ops.split("s", " ", buckets=8)}, {"s": "str"})
        >>> s = pd.Series(["a b", "c"] * 20_000)
        >>> describe(p, {0: from_series(s)})[1]
        'dictionary path: once per distinct value (2 distinct of 40,000 rows)'
    """
    how = mode()
    out: dict[int, str] = {}
    n = None if not inputs else next(iter(inputs.values())).n
    coded = {a: Coded(*own) for a, own in ((a, c.dictionary()) for a, c in (inputs or {}).items()) if own is not None}
    for node in plan.dictionary_nodes:
        if how == "off":
            out[node.id] = "row by row (dictionary path off)"
            continue
        if inputs is None or n is None or any(a not in inputs for a in node.args):
            out[node.id] = "dictionary-capable: the path is chosen per partition once its inputs are known"
            continue
        why = choose(plan, node, inputs, coded, n, how)
        res = None
        if why:
            res = run_coded(plan, node, inputs, coded, lambda cols: HostColumn("i64", cols[0].n), how)
        if res is not None:
            out[node.id] = f"dictionary path: once per distinct value ({res.values.n:,} distinct of {n:,} rows)"
        elif n < MIN_ROWS and how == "auto":
            out[node.id] = f"row by row (fewer than {MIN_ROWS:,} rows)"
        elif _kind(node) == "scalar" and how == "auto":
            out[node.id] = "row by row (plain input: coding it would cost about what fingerprinting it does)"
        else:
            out[node.id] = "row by row (too many distinct values)"
    return out


def flags(plan: Plan) -> np.ndarray:
    """A zeroed skip array for ``plan`` (one byte per dictionary-capable operator)."""
    return np.zeros(max(len(plan.dictionary_nodes), 1), dtype=np.uint8)
