"""Fitted operators: what each learns from the training frame, and how it applies it.

Each operator is a :class:`FittedSpec` with three steps:

* :meth:`~FittedSpec.stats`: lazy aggregates over the inputs frame (columns ``a0``, ``a1``,
  ... holding the operator's computed arguments).  On dask they stay lazy, so the
  orchestration computes every fitted operator's aggregates of one extraction in ONE
  ``dask.compute`` (one pass over the data); on pandas they are computed at once.
* :meth:`~FittedSpec.finish`: the computed aggregates -> a :class:`FittedState` (numpy
  tables + JSON metadata).  Every statistic is built from exact aggregates (value counts,
  integer label sums) sorted by value, so states are identical whatever the partitioning.
* :meth:`~FittedSpec.apply`: one pandas partition + the frozen state -> the output column.

Ids of ``categorify``: 0 padding (``pad``), 1 null, ``2 .. 1 + B`` out of vocabulary
(``B = max(oov_buckets, 1)``; with ``oov_buckets`` the value's FarmHash bucket picks one),
then the vocabulary by descending count (ties by value) from ``2 + B``.

Example:
    >>> import pandas as pd
    >>> spec = spec_of("categorify", {"min_freq": 2})
    >>> train = pd.DataFrame({"a0": ["a", "b", "a", None, "c", "c"], "a1": [0] * 6})
    >>> state = spec.finish({k: [v] for k, v in spec.stats(train).items()}, rows=6)
    >>> state.tables["values"].tolist()
    ['a', 'c']
    >>> spec.apply(pd.DataFrame({"a0": ["c", "a", "z", None], "a1": [0] * 4}), state).tolist()
    [4, 3, 2, 1]
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, ClassVar, Mapping, Sequence, TypedDict

import numpy as np
import pandas as pd
import pyarrow as pa

from fbrapids.errors import FeatureError, OperatorTypeError
from fbrapids.fitting.frame_op import FrameOperator
from fbrapids.fitting.params import as_float, as_int, labels_of
from fbrapids.fitting.rowops import flat_values
from fbrapids.fitting.state import FittedState
from fbrapids.frames import backend as _backend
from fbrapids.kernels import Call, Expr

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.frames.backend import DtypeObj, EagerFrame, EagerSeries, FrameLike, SeriesLike

PAD_ID, NULL_ID, OOV_ID = 0, 1, 2


def _host(obj: EagerSeries) -> pd.Series:
    """A cudf series as pandas; a pandas one as it is."""
    to_pandas = getattr(obj, "to_pandas", None)
    if to_pandas is not None and not isinstance(obj, (pd.Series, pd.DataFrame)):
        return to_pandas()
    return obj


def _host_frame(part: EagerFrame) -> pd.DataFrame:
    """A cudf frame as pandas; a pandas one as it is."""
    to_pandas = getattr(part, "to_pandas", None)
    if to_pandas is not None and not isinstance(part, (pd.Series, pd.DataFrame)):
        return to_pandas()
    return part


def _sum_counts(parts: Sequence[EagerSeries]) -> pd.Series:
    """Value counts (several, one per column sharing a vocabulary) summed, index = value."""
    series = [_host(p) for p in parts]
    series = [s for s in series if len(s)]
    if not series:
        return pd.Series([], dtype=np.int64)
    total = series[0] if len(series) == 1 else pd.concat(series).groupby(level=0).sum()
    return total.astype(np.int64)


def _sorted_counts(counts: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(values ascending, counts) of a value-count series, nulls dropped."""
    counts = counts[counts.index.notna()]
    values = np.asarray(counts.index.to_numpy())
    order = np.argsort(values, kind="mergesort")
    return values[order], np.asarray(counts.to_numpy(), dtype=np.int64)[order]


def _text_or_numbers(values: np.ndarray) -> np.ndarray:
    """Key values as a table: text as Python strings (numpy's fixed-width text would drop a
    trailing NUL, merging ``"a"`` and ``"a\\x00"``), integers exact (int64, else uint64 for
    ids up to 2^64 - 1, else Python ints), anything else as its text."""
    if values.dtype != object:
        return values
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    if all(isinstance(v, str) for v in values):
        return values
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in values):
        ints = [int(v) for v in values]
        lo, hi = min(ints), max(ints)
        if lo >= -(1 << 63) and hi < (1 << 63):
            return np.asarray(ints, dtype=np.int64)
        return np.asarray(ints, dtype=np.uint64) if lo >= 0 and hi < (1 << 64) else values
    return np.asarray([str(v) for v in values], dtype=object)


def _flat(series: pd.Series) -> tuple[np.ndarray | None, pd.Series, np.ndarray | None]:
    """A list column as (offsets, flattened values, list validity); a scalar column as (None, itself, None)."""
    if not _is_list(series):
        return None, series, None
    arr = pa.array(series.array)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    values = flat_values(arr)
    valid = None if arr.null_count == 0 else np.asarray(arr.is_valid().to_numpy(zero_copy_only=False))
    return offsets - offsets[0], pd.Series(values.to_pandas(types_mapper=pd.ArrowDtype)), valid


def _unflat(offsets: np.ndarray | None, ids: np.ndarray, valid: np.ndarray | None, index: pd.Index,
            name: str | None = None) -> pd.Series:
    if offsets is None:
        return pd.Series(ids, index=index, name=name)
    mask = None if valid is None else pa.array(~valid)
    arr = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(ids), mask=mask)
    return pd.Series(pd.arrays.ArrowExtensionArray(arr), index=index, name=name)


def _probe(col: pd.Series) -> np.ndarray:
    """A key column's values for a lookup, exactly: numbers in their own numpy type (a
    nullable or Arrow integer column with nulls would come out as float64, where 2^53 + 1
    is 2^53; nulls become 0 here and are masked by the caller), text and categories as
    Python objects."""
    dtype = col.dtype
    if isinstance(dtype, np.dtype):
        return col.to_numpy()
    numpy_dtype = getattr(dtype, "numpy_dtype", None)
    if not isinstance(dtype, pd.CategoricalDtype) and numpy_dtype is not None and np.dtype(numpy_dtype).kind in "iufb":
        fill = {"f": np.nan, "b": False}.get(np.dtype(numpy_dtype).kind, 0)
        return col.to_numpy(dtype=numpy_dtype, na_value=fill)
    # (pandas takes na_value=None; pandas-stubs 3.1 types na_value as a scalar without None)
    return col.to_numpy(dtype=object, na_value=None)  # type: ignore[call-overload]


_KINDS = {"string": "text", "integer": "int", "floating": "float", "mixed-integer-float": "float",
          "boolean": "bool", "empty": None, "decimal": "float"}


def _kind(values: np.ndarray) -> str | None:
    """``"text"``, ``"int"``, ``"float"``, ``"bool"`` or another inferred kind of an array's
    values (None for no values)."""
    if not len(values):
        return None
    kind = values.dtype.kind
    if kind in "iu":
        return "int"
    if kind in "fb":
        return {"f": "float", "b": "bool"}[kind]
    if kind == "U":
        return "text"
    inferred = pd.api.types.infer_dtype(values, skipna=True)
    return _KINDS.get(inferred, inferred)


def _lookup(state: FittedState, names: list[str], columns: list[pd.Series], labels: tuple = ()) -> np.ndarray:
    """Row -> position of its key tuple among the state's key tables ``names`` (-1 when
    absent or any key null).  Keys compare by value, exactly: integers of two types and
    integers against floats as Python numbers (2^53 + 1 never equals the float 2^53;
    2^64 - 1 never equals -1).

    Raises:
        OperatorTypeError: text keys where the state holds numbers, or numbers where it holds
            text (ids read as strings would silently all be out of vocabulary); names the
            column and both types.
    """
    n = len(columns[0])
    probes = [_probe(c) for c in columns]
    tables = [state.tables[name] for name in names]
    as_object = []
    for i, (table, probe, col) in enumerate(zip(tables, probes, columns)):
        kinds = state.cache.kinds
        tk = kinds[names[i]] if names[i] in kinds else kinds.setdefault(names[i], _kind(table))
        pk = _kind(probe[~col.isna().to_numpy()]) if probe.dtype == object else _kind(probe)
        if tk is not None and pk is not None and (tk == "text") != (pk == "text"):
            label = labels[i] if i < len(labels) else names[i]
            raise OperatorTypeError(
                f"{state.op}: column {label!r} holds {pk} values ({col.dtype}) but the state was fitted on {tk} "
                f"values ({table.dtype}); no key would match: cast the column to the fitted type first")
        as_object.append(table.dtype != probe.dtype and not (table.dtype.kind == probe.dtype.kind
                                                             and table.dtype.kind in "iu"))
    if n == 0 or not len(tables[0]):
        return np.full(n, -1, dtype=np.int64)
    key = ",".join(f"{name}{'/o' if o else ''}" for name, o in zip(names, as_object))
    idx = state.cache.indexes.get(key)
    if idx is None:
        arrays = [t.astype(object) if o else t for t, o in zip(tables, as_object)]
        idx = pd.Index(arrays[0], dtype=arrays[0].dtype) if len(arrays) == 1 else pd.MultiIndex.from_arrays(arrays)
        state.cache.indexes[key] = idx
    probes = [p.astype(object) if o else p for p, o in zip(probes, as_object)]
    pos = idx.get_indexer(pd.Index(probes[0]) if len(probes) == 1 else pd.MultiIndex.from_arrays(probes))
    null = np.zeros(n, dtype=bool)
    for c in columns:
        null |= c.isna().to_numpy()
    pos = np.asarray(pos, dtype=np.int64)
    pos[null] = -1
    return pos


#: the fold rule of :func:`fold_of`, recorded in target_encode states (an older state's folds differ)
FOLD_HASH = "fingerprint64-splitmix64"


def fold_of(fingerprints: EagerSeries | None, n: int, folds: int, seed: int) -> np.ndarray:
    """Each row's fold in ``[0, folds)``: ``splitmix64(h + 0x9E3779B97F4A7C15 * (seed + 1))
    % folds`` (arithmetic mod 2^64), ``h`` the row's ``fold_by`` fingerprint (FarmHash
    Fingerprint64 of its text / an integer's decimal text, as ``ops.hash`` gives; 0 for a
    null) or, without ``fold_by``, the row's position ``0 .. n - 1``.  ``splitmix64(z)``:
    ``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
    z ^= z >> 31``.

    Example:
        >>> fold_of(None, 4, 3, seed=0).tolist()
        [1, 2, 1, 0]
        >>> fold_of(pd.Series([0, 1, 2, None], dtype="UInt64"), 4, 3, seed=0).tolist()
        [1, 2, 1, 1]
    """
    if fingerprints is None:
        base = np.arange(n, dtype=np.uint64)
    else:
        base = np.asarray(_host(fingerprints).to_numpy(dtype=np.uint64, na_value=0), dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = base + np.uint64((0x9E3779B97F4A7C15 * (seed + 1)) & 0xFFFFFFFFFFFFFFFF)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(folds)).astype(np.int64)


class Declares(TypedDict, total=False):
    """The properties of a fitted operator's :class:`~fbrapids.fitting.frame_op.FrameOperator`
    that its :class:`FittedSpec` declares (beside its name, output type and itself)."""

    inputs: Callable[[Call, bool], list[Expr]]
    out_dtype: Callable[[Mapping[str, str], EagerFrame], DtypeObj]
    shared_state: str
    uses_labels: bool


class FittedSpec:
    """One fitted operator with its parameters (see the module doc for the three steps).

    :meth:`stats` gives lazy aggregates (dask series on a dask frame); :meth:`finish` takes
    them computed (eager series), a list per aggregate (one per call sharing the state).
    """

    op = ""
    out_type = "f64"
    #: its :class:`~fbrapids.fitting.frame_op.FrameOperator`'s other properties
    declares: ClassVar[Declares] = {}

    def __init__(self, params: Mapping[str, object]) -> None:
        self.params = dict(params)

    def stats(self, inp: FrameLike) -> dict[str, SeriesLike]:
        raise NotImplementedError

    def finish(self, parts: Mapping[str, Sequence[EagerSeries]], rows: int) -> FittedState:
        raise NotImplementedError

    def apply(self, part: pd.DataFrame, state: FittedState, training: bool = False) -> pd.Series:
        raise NotImplementedError


# -- categorify --------------------------------------------------------------------------
def _categorify_inputs(call: Call, training: bool) -> list[Expr]:
    """The values, and their OOV buckets when there are several (one bucket needs no hash,
    so any column it can count works)."""
    width = max(int(call.param_dict().get("oov_buckets", 0) or 0), 1)
    return [call.args[0]] + ([Call("hash_bucket", (call.args[0],), (("buckets", width),))] if width > 1 else [])


def _ids_of_values(cols: Mapping[str, str], meta: EagerFrame) -> DtypeObj:
    """``categorify``'s output dtype: int64 ids, element-wise (a list of them) for a list."""
    a0 = meta[cols["a0"]]
    if isinstance(a0.dtype, pd.ArrowDtype) and pa.types.is_list(a0.dtype.pyarrow_dtype):
        return pd.ArrowDtype(pa.list_(pa.int64()))
    return np.dtype(np.int64)


class Categorify(FittedSpec):
    """Inputs: ``a0`` the values (scalar or list) and, with ``oov_buckets > 1``, ``a1``
    their FarmHash buckets mod ``oov_buckets`` (computed by the kernels, so every backend
    agrees)."""

    op = "categorify"
    out_type = "i64"
    declares: ClassVar[Declares] = {"inputs": _categorify_inputs, "out_dtype": _ids_of_values, "shared_state": "vocab"}

    @property
    def oov_width(self) -> int:
        return max(as_int(self.params.get("oov_buckets", 0) or 0, "oov_buckets"), 1)

    def stats(self, inp: FrameLike) -> dict[str, SeriesLike]:
        values = inp["a0"]
        if _is_list(values):
            values = values.explode()
        return {"counts": values.value_counts(dropna=True)}

    def finish(self, parts: Mapping[str, Sequence[EagerSeries]], rows: int) -> FittedState:
        counts = _sum_counts(parts["counts"])
        values, n = _sorted_counts(counts)
        values = _text_or_numbers(values)
        min_freq = as_int(self.params.get("min_freq", 1) or 1, "min_freq")
        keep = n >= min_freq
        values, n = values[keep], n[keep]
        order = np.lexsort((values, -n))  # descending count, ties by value
        max_size = self.params.get("max_size")
        if max_size is not None:
            order = order[: as_int(max_size, "max_size")]
        return FittedState(self.op, self.params, {"values": values[order], "counts": n[order]},
                           {"rows": rows, "kept": int(len(order)), "seen": int(len(counts))})

    def apply(self, part: pd.DataFrame, state: FittedState, training: bool = False) -> pd.Series:
        offsets, flat, valid = _flat(part["a0"])
        pos = _lookup(state, ["values"], [flat], labels_of(self.params))
        first = OOV_ID + self.oov_width
        oov = np.full(len(flat), OOV_ID, dtype=np.int64)
        if self.oov_width > 1:
            buckets = _flat(part["a1"])[1]
            oov += np.asarray(buckets.fillna(0).to_numpy(), dtype=np.int64) % self.oov_width
        ids = np.where(pos >= 0, first + pos, np.where(flat.isna().to_numpy(), NULL_ID, oov)).astype(np.int64)
        return _unflat(offsets, ids, valid, part.index)


def _is_list(s: SeriesLike) -> bool:
    return _backend.is_list_dtype(getattr(s, "dtype", None))  # cudf's ListDtype too


# -- count / target encoding -------------------------------------------------------------
class CountEncode(FittedSpec):
    """Rows per key tuple in the fitted frame (0 for an unseen or null key)."""

    op = "count_encode"
    out_type = "i64"

    def keys(self, inp: FrameLike) -> list[str]:
        return [f"a{i}" for i in range(as_int(self.params.get("n_keys", 1), "n_keys"))]

    def stats(self, inp: FrameLike) -> dict[str, SeriesLike]:
        keys = self.keys(inp)
        return {"counts": inp[keys].groupby(keys, dropna=True).size()}

    def finish(self, parts: Mapping[str, Sequence[EagerSeries]], rows: int) -> FittedState:
        counts = _host(parts["counts"][0])
        tables = _key_tables(counts.index, len(self.keys(None)))
        tables["count"] = np.asarray(counts.to_numpy(), dtype=np.int64)
        return FittedState(self.op, self.params, _sort_tables(tables, len(self.keys(None))),
                           {"rows": rows, "seen": int(len(counts))})

    def apply(self, part: pd.DataFrame, state: FittedState, training: bool = False) -> pd.Series:
        n = len(self.keys(None))
        pos = _lookup(state, [f"k{i}" for i in range(n)], [part[f"a{i}"] for i in range(n)], labels_of(self.params))
        count = state.tables["count"]
        out = np.where(pos >= 0, count[np.maximum(pos, 0)] if len(count) else 0, 0)
        return pd.Series(out.astype(np.int64), index=part.index)


def _key_tables(index: pd.Index, n_keys: int) -> dict[str, np.ndarray]:
    """The first ``n_keys`` levels of ``index`` as key tables ``k0``, ``k1``, ..."""
    if n_keys == 1 and not isinstance(index, pd.MultiIndex):
        return {"k0": _text_or_numbers(np.asarray(index.to_numpy()))}
    return {f"k{i}": _text_or_numbers(np.asarray(index.get_level_values(i).to_numpy())) for i in range(n_keys)}


def _sort_tables(tables: dict[str, np.ndarray], n_keys: int) -> dict[str, np.ndarray]:
    """Tables sorted by their key columns (so a state does not depend on partitioning)."""
    if not len(tables["k0"]):
        return tables
    order = np.lexsort([tables[f"k{i}"] for i in reversed(range(n_keys))])
    return {k: v[order] for k, v in tables.items()}


def _target_inputs(call: Call, training: bool) -> list[Expr]:
    """Applied with frozen statistics (``training=False``): only the keys, never the label or
    ``fold_by`` (a serving frame has no label); with its label, ``fold_by``'s FarmHash
    fingerprint (``hash``), which seeds the folds."""
    n = int(call.param_dict()["n_keys"])
    if not training:
        return list(call.args[:n])
    return list(call.args[: n + 1]) + [Call("hash", (a,), ()) for a in call.args[n + 1:]]


class TargetEncode(CountEncode):
    """Smoothed mean label per key tuple: ``(sum + s * prior) / (count + s)``.

    Inputs: ``a0 .. a{n-1}`` the keys, ``a{n}`` the label, and (with ``fold_by``) ``a{n+1}``
    the FarmHash fingerprint of the row id that seeds the folds (:func:`fold_of`).  On the frame it was fitted on (``training=True``)
    each row gets out-of-fold statistics: the key's and the prior's sums over the other
    ``folds - 1`` folds only, so a row's own label never enters its own encoding.
    Elsewhere the frozen statistics over all training rows apply.  Rows with a null label
    count in neither.
    """

    op = "target_encode"
    out_type = "f64"  # not CountEncode's i64: the dask meta said int64 for float64 encodings
    declares: ClassVar[Declares] = {"inputs": _target_inputs, "uses_labels": True}

    def _with_fold(self, inp: FrameLike) -> FrameLike:
        n = as_int(self.params["n_keys"], "n_keys")
        folds, seed = as_int(self.params.get("folds", 5), "folds"), as_int(self.params.get("seed", 0), "seed")
        has_id = bool(self.params.get("fold_by"))

        def add_fold(part: FrameLike) -> FrameLike:
            host = _host_frame(part)  # the fold hash runs on the host; the frame keeps its backend
            fid = host[f"a{n + 1}"] if has_id else None
            # labels summed as float64: an integer label sum would wrap (uint64 labels); exact
            # for 0/1 labels up to 2^53 rows
            part = part.assign(fold=fold_of(fid, len(host), folds, seed), **{f"a{n}": part[f"a{n}"].astype("float64")})
            return part[~part[f"a{n}"].isna()]  # labelled rows only, filtered inside the partition

        if _backend.is_dask(inp):
            if not has_id:
                raise FeatureError("target_encode on a dask frame needs fold_by= (a column that identifies a row, "
                                   "e.g. 'instance_id'): out-of-fold folds must not depend on the partitioning")
            meta = inp._meta.assign(fold=np.zeros(0, dtype=np.int64), **{f"a{n}": inp._meta[f"a{n}"].astype("float64")})
            frame = inp.map_partitions(add_fold, meta=meta)
        else:
            frame = add_fold(inp)
        return frame

    def stats(self, inp: FrameLike) -> dict[str, SeriesLike]:
        n = as_int(self.params["n_keys"], "n_keys")
        keys = [f"a{i}" for i in range(n)]
        frame = self._with_fold(inp)
        lab = f"a{n}"
        grouped = frame[keys + ["fold", lab]].groupby(keys + ["fold"], dropna=True)[lab]
        prior = frame[["fold", lab]].groupby("fold")[lab]
        return {"sum": grouped.sum(), "count": grouped.count(), "prior_sum": prior.sum(),
                "prior_count": prior.count()}

    def finish(self, parts: Mapping[str, Sequence[EagerSeries]], rows: int) -> FittedState:
        n = as_int(self.params["n_keys"], "n_keys")
        s, c = _host(parts["sum"][0]), _host(parts["count"][0])
        c = c.reindex(s.index)
        tables = _key_tables(s.index, n)  # its first n levels: the keys (level n is the fold)
        tables["fold"] = np.asarray(s.index.get_level_values(n).to_numpy(), dtype=np.int64)
        tables["sum"] = np.asarray(s.to_numpy(), dtype=np.float64)
        tables["count"] = np.asarray(c.to_numpy(), dtype=np.int64)
        order = np.lexsort([tables["fold"]] + [tables[f"k{i}"] for i in reversed(range(n))])
        tables = {k: v[order] for k, v in tables.items()}
        ps, pc = _host(parts["prior_sum"][0]), _host(parts["prior_count"][0])
        folds = as_int(self.params.get("folds", 5), "folds")
        fold_sum = np.zeros(folds)
        fold_count = np.zeros(folds, dtype=np.int64)
        fold_sum[np.asarray(ps.index, dtype=np.int64)] = ps.to_numpy(dtype=np.float64)
        fold_count[np.asarray(pc.index, dtype=np.int64)] = pc.to_numpy(dtype=np.int64)
        tables["fold_sum"], tables["fold_count"] = fold_sum, fold_count
        # frozen per-key totals (what other frames and serving read)
        keys_only = {f"k{i}": tables[f"k{i}"] for i in range(n)}
        frame = pd.DataFrame({**keys_only, "sum": tables["sum"], "count": tables["count"]})
        total = frame.groupby([f"k{i}" for i in range(n)], sort=True)[["sum", "count"]].sum()
        totals = _key_tables(total.index, n)
        tables.update({f"total_{k}": v for k, v in totals.items()})
        tables["total_sum"] = total["sum"].to_numpy(dtype=np.float64)
        tables["total_count"] = total["count"].to_numpy(dtype=np.int64)
        prior = float(fold_sum.sum() / fold_count.sum()) if fold_count.sum() else 0.0
        return FittedState(self.op, self.params, tables,
                           {"rows": rows, "labelled": int(fold_count.sum()), "prior": prior, "folds": folds,
                            "seen": int(len(total)), "fold_hash": FOLD_HASH})

    @staticmethod
    def _by_fold(state: FittedState, n: int, folds: int) -> tuple[np.ndarray, np.ndarray]:
        """(label sums, counts) per (key tuple of the totals, fold): built once per state."""
        cached = state.cache.by_fold
        if cached is None:
            t = state.tables
            sums = np.zeros((len(t["total_sum"]), folds))
            counts = np.zeros((len(t["total_sum"]), folds), dtype=np.int64)
            if len(t["sum"]):
                at = _lookup(state, [f"total_k{i}" for i in range(n)], [pd.Series(t[f"k{i}"]) for i in range(n)])
                sums[at, t["fold"]] = t["sum"]
                counts[at, t["fold"]] = t["count"]
            cached = state.cache.by_fold = (sums, counts)
        return cached

    def apply(self, part: pd.DataFrame, state: FittedState, training: bool = False) -> pd.Series:
        n = as_int(self.params["n_keys"], "n_keys")
        smoothing = as_float(self.params.get("smoothing", 20.0), "smoothing")
        keys = [part[f"a{i}"] for i in range(n)]
        t = state.tables
        labels = labels_of(self.params)[:n]
        pos = _lookup(state, [f"total_k{i}" for i in range(n)], keys, labels)
        hit = pos >= 0
        p = np.maximum(pos, 0)
        s = np.where(hit, t["total_sum"][p] if len(t["total_sum"]) else 0.0, 0.0)
        c = np.where(hit, t["total_count"][p] if len(t["total_count"]) else 0, 0).astype(np.float64)
        prior_s = np.full(len(part), t["fold_sum"].sum())
        prior_c = np.full(len(part), float(t["fold_count"].sum()))
        if training:
            if state.meta.get("fold_hash") != FOLD_HASH:
                raise FeatureError(f"{self.op} state {state.meta.get('fold_hash') or 'without a fold hash'}: "
                                   "fitted by an older fbrapids whose folds differ (out-of-fold encodings would "
                                   "leak labels); refit it")
            folds, seed = as_int(self.params.get("folds", 5), "folds"), as_int(self.params.get("seed", 0), "seed")
            fid = part[f"a{n + 1}"] if self.params.get("fold_by") else None
            fold = fold_of(fid, len(part), folds, seed)
            own = np.zeros((len(part), folds), dtype=bool)
            own[np.arange(len(part)), fold] = True
            # the other folds' sums added up, never the total minus the row's own fold: a large
            # label in the row's fold would cancel the others' small ones (131072.99 - 131072)
            sums, counts = self._by_fold(state, n, folds)
            s = np.where(hit, np.where(own, 0.0, sums[p]).sum(axis=1), 0.0) if len(sums) else np.zeros(len(part))
            c = np.where(hit, np.where(own, 0, counts[p]).sum(axis=1), 0).astype(np.float64) if len(sums) else s
            prior_s = np.where(own, 0.0, t["fold_sum"][None, :]).sum(axis=1)
            prior_c = np.where(own, 0, t["fold_count"][None, :]).sum(axis=1).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            prior = np.where(prior_c > 0, prior_s / np.maximum(prior_c, 1), 0.0)
            enc = (s + smoothing * prior) / (c + smoothing) if smoothing > 0 else np.where(c > 0, s / np.maximum(c, 1),
                                                                                              prior)
        return pd.Series(enc.astype(np.float64), index=part.index)


# -- numeric statistics --------------------------------------------------------------------
class _NumericStats(FittedSpec):
    """Statistics of one numeric column built from its exact value counts."""

    def stats(self, inp: FrameLike) -> dict[str, SeriesLike]:
        return {"counts": inp["a0"].value_counts(dropna=True)}

    def summary(self, parts: Mapping[str, Sequence[EagerSeries]], rows: int
                ) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
        """(distinct values ascending in their own type, counts, meta): integers stay exact
        (ids past 2^53 are neither merged nor rounded before the statistics)."""
        values, n = _sorted_counts(_sum_counts(parts["counts"]))
        values = _text_or_numbers(values) if values.dtype == object else values
        if values.dtype.kind not in "iuf":
            values = values.astype(np.float64)
        meta: dict[str, object] = {"rows": rows, "non_null": int(n.sum())}
        if n.sum():
            total = int(n.sum())
            exact = values.tolist()  # Python ints (exact) or floats
            if values.dtype.kind in "iu":
                mean = sum(v * int(c) for v, c in zip(exact, n.tolist())) / total
            else:
                with np.errstate(all="ignore"):
                    finite = bool(np.isfinite(values).all())
                mean = math.fsum(v * int(c) for v, c in zip(exact, n.tolist())) / total if finite else \
                    float(np.sum(values * n))  # inf / nan as numpy gives them (fsum raises on inf - inf)
            with np.errstate(all="ignore"):
                var = math.fsum(int(c) * (v - mean) ** 2 for v, c in zip(exact, n.tolist())) / total \
                    if math.isfinite(mean) else float("nan")
            cum = np.cumsum(n)
            lo = exact[int(np.searchsorted(cum, (total - 1) // 2, side="right"))]
            hi = exact[int(np.searchsorted(cum, total // 2, side="right"))]
            meta.update(mean=float(mean), std=math.sqrt(var) if var == var else float("nan"), min=float(exact[0]),
                        max=float(exact[-1]), median=float((lo + hi) / 2))
        return values, n, meta


class QuantileBucketize(_NumericStats):
    """``n`` quantile buckets: boundary ``i`` is the value at position ``i * N // n`` of the
    sorted non-null values (exact, from value counts; repeats and the minimum dropped);
    output 1 + the number of boundaries ``<= x``; null -> 0 (its own bucket)."""

    op = "quantile_bucketize"
    out_type = "i32"

    def finish(self, parts: Mapping[str, Sequence[EagerSeries]], rows: int) -> FittedState:
        values, n, meta = self.summary(parts, rows)
        buckets = as_int(self.params["n"], "n")
        bounds: list[float] = []
        if len(values):
            cum = np.cumsum(n)
            total = int(cum[-1])
            for i in range(1, buckets):
                b = values[np.searchsorted(cum, i * total // buckets, side="right")]  # sorted[i*N//n]
                if b > values[0] and (not bounds or b > bounds[-1]):
                    bounds.append(b)
        table = np.asarray(bounds, dtype=values.dtype if len(values) else np.float64)  # exact: ints stay ints
        return FittedState(self.op, self.params, {"boundaries": table}, meta)

    def apply(self, part: pd.DataFrame, state: FittedState, training: bool = False) -> pd.Series:
        bounds = state.tables["boundaries"]
        col = part["a0"]
        x = _probe(col)
        null = col.isna().to_numpy()
        if x.dtype != bounds.dtype and not (x.dtype.kind == bounds.dtype.kind == "f"):
            # exact comparisons across types (int64 vs uint64, floats vs ids past 2^53): Python numbers
            x = np.where(null, 0, x).astype(object) if x.dtype.kind in "iufb" else np.where(null, 0, x)
            bounds = bounds.astype(object)
        out = 1 + np.searchsorted(bounds, x, side="right") if len(x) else np.zeros(0, dtype=np.int64)
        out[null] = 0
        return pd.Series(out.astype(np.int32), index=part.index)


class Normalize(_NumericStats):
    """``(x - mean) / std`` (population std; 1 when it is 0). Null in, null out; fitted on
    no values, every output is null."""

    op = "normalize"

    def finish(self, parts: Mapping[str, Sequence[EagerSeries]], rows: int) -> FittedState:
        return FittedState(self.op, self.params, {}, self.summary(parts, rows)[2])

    def apply(self, part: pd.DataFrame, state: FittedState, training: bool = False) -> pd.Series:
        x = part["a0"].to_numpy(dtype=np.float64, na_value=np.nan)
        if "mean" not in state.meta:  # fitted on no values: no statistics, null out (not x unchanged)
            return pd.Series(np.full(len(x), np.nan), index=part.index)
        std = as_float(state.meta.get("std") or 1.0, "std")
        return pd.Series((x - as_float(state.meta["mean"], "mean")) / std, index=part.index)


class MinMax(Normalize):
    """``(x - min) / (max - min)`` with the fitted min and max (values outside them map
    outside [0, 1]; a constant column maps to 0). Null in, null out; fitted on no values,
    every output is null."""

    op = "minmax"

    def apply(self, part: pd.DataFrame, state: FittedState, training: bool = False) -> pd.Series:
        x = part["a0"].to_numpy(dtype=np.float64, na_value=np.nan)
        if "min" not in state.meta:  # fitted on no values: null out (not x unchanged)
            return pd.Series(np.full(len(x), np.nan), index=part.index)
        lo, hi = as_float(state.meta["min"], "min"), as_float(state.meta["max"], "max")
        return pd.Series((x - lo) / ((hi - lo) or 1.0), index=part.index)


class FillNullFitted(Normalize):
    """Nulls replaced by the fitted ``mean`` or ``median`` (float64)."""

    op = "fill_null_fitted"

    def apply(self, part: pd.DataFrame, state: FittedState, training: bool = False) -> pd.Series:
        x = part["a0"].to_numpy(dtype=np.float64, na_value=np.nan)
        stat = str(self.params.get("stat", "mean"))
        held = state.meta.get(stat)
        value = np.nan if held is None else as_float(held, stat)
        return pd.Series(np.where(np.isnan(x), value, x), index=part.index)


SPECS: dict[str, type[FittedSpec]] = {
    s.op: s for s in (Categorify, CountEncode, TargetEncode, QuantileBucketize, Normalize, MinMax, FillNullFitted)
}


#: the fitted operators, as the frame-level stage runs them
FRAME_OPERATORS = {op: FrameOperator(op, spec.out_type, spec=spec, **spec.declares) for op, spec in SPECS.items()}


def spec_of(op: str, params: Mapping[str, object]) -> FittedSpec:
    """The fitted operator ``op`` with ``params``.

    Example:
        >>> spec_of("normalize", {}).op
        'normalize'
    """
    return SPECS[op](params)
