"""Eager hash joins as one row selection: build a table on the right keys once, probe it.

A join here is two steps:

1. **Row maps.** :class:`JoinTable` hashes the right side's keys once (a pandas ``Index``,
   whose hash engine is built on first use and kept); :meth:`JoinTable.probe` maps every left
   row to its right row (``-1`` for a miss).  Null keys never match, on either side (SQL
   semantics), whatever pandas or cudf would do by default.
2. **One gather.** The left rows are selected once (nothing is copied for a left join
   against a dictionary), and each right column is taken through the row map.  Right
   integer and bool columns become nullable (``Int64``, ``boolean``) in a left join, so ids
   above 2^53 stay exact and the dtype is the same whether or not a partition has misses.

The left frame's index is kept, so a frame sorted by a key with known dask divisions stays
so after the join.  ``validate`` checks the join's cardinality as pandas' ``merge`` does;
duplicate right keys in a many-to-one join are an error naming the key and its row count.

cudf frames go through pylibcudf's hash join and gather (``NullEquality.UNEQUAL``,
``OutOfBoundsPolicy.NULLIFY``): integer payloads keep their dtype with a null mask.

Example:
    >>> import pandas as pd
    >>> left = pd.DataFrame({"k": [3, 1, None, 9]}, dtype="Int64")
    >>> right = pd.DataFrame({"k": [1, 3, None], "v": [10, 2**60 + 1, 7]}).astype({"k": "Int64"})
    >>> out = join_frames(left, right, ["k"], "left")
    >>> out["v"].tolist() == [2**60 + 1, 10, pd.NA, pd.NA], str(out["v"].dtype)
    (True, 'Int64')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence, overload

import numpy as np
import pandas as pd

from fbrapids.errors import JoinError
from fbrapids.frames import backend as _backend
from fbrapids.views.dtype_spec import ColumnDtype, as_numpy
from fbrapids.views.rows import take_array, take_rows

if TYPE_CHECKING:  # (annotations only: no import at run time)
    import cudf
    from pandas.api.extensions import ExtensionArray

    from fbrapids.frames.backend import EagerFrame, EagerSeries, FrameLike, SeriesLike

VALIDATE = {
    "one_to_one": "one_to_one", "1:1": "one_to_one",
    "one_to_many": "one_to_many", "1:m": "one_to_many",
    "many_to_one": "many_to_one", "m:1": "many_to_one",
    "many_to_many": "many_to_many", "m:m": "many_to_many",
}


def normalize_validate(validate: str | None) -> str | None:
    """pandas' ``validate`` spellings to one name (None: no check).

    Example:
        >>> normalize_validate("m:1")
        'many_to_one'
    """
    if validate is None:
        return None
    if validate not in VALIDATE:
        raise JoinError(f"validate={validate!r} is not one of {', '.join(sorted(VALIDATE))} or None")
    return VALIDATE[validate]


@overload
def key_values(frame: EagerFrame, key: str) -> EagerSeries: ...
@overload
def key_values(frame: FrameLike, key: str) -> SeriesLike: ...
def key_values(frame: FrameLike, key: str) -> SeriesLike:
    """Column ``key`` of ``frame``, or its index level of that name."""
    if key in frame.columns:
        return frame[key]
    return frame.index.get_level_values(key).to_series(index=frame.index)


def _valid_mask(values: pd.Series) -> np.ndarray:
    return ~np.asarray(values.isna(), dtype=bool)


def _plain_keys(values: pd.Series) -> np.ndarray:
    """Key values in a form a pandas Index hashes fast: numpy ints for (nullable) ints."""
    dtype = values.dtype
    kind = getattr(dtype, "kind", "O")
    if kind in "iu":
        return values.to_numpy(dtype=as_numpy(dtype), na_value=0)
    return values.to_numpy()


def duplicate_key_error(key_names: Sequence[str], value: object, count: int, side: str, validate: str) -> JoinError:
    """The error for a key that appears ``count`` times where ``validate`` allows one."""
    def plain(v: object) -> object:
        return v.item() if isinstance(v, np.generic) else v

    shown = plain(value) if not isinstance(value, tuple) else {k: plain(v) for k, v in zip(key_names, value)}
    return JoinError(
        f"join on {', '.join(key_names)}: key {shown!r} has {count} rows on the {side} side, but the join was "
        f"validated as {validate!r}; deduplicate that side, or pass validate=None to allow it"
    )


def _duplicate_error(key_names: Sequence[str], keys: pd.Index, side: str, validate: str) -> JoinError:
    dup = keys[keys.duplicated()][0]
    return duplicate_key_error(key_names, dup, int((keys == dup).sum()), side, validate)


@dataclass
class JoinTable:
    """The right side of a host join: its key hash table, valid row positions and payload.

    Built once per join and shared by every left partition that probes it.
    """

    keys: list[str]
    index: pd.Index
    positions: np.ndarray  # right row of each index entry (rows with a null key are left out)
    payload: pd.DataFrame
    unique: bool
    key_dtypes: dict[str, ColumnDtype] = field(default_factory=dict)
    _nullable: dict[str, ExtensionArray] = field(default_factory=dict, repr=False)
    _sorted: np.ndarray | None = field(default=None, repr=False)  # the keys when sorted ints (see _sorted_lookup)

    def take(self, column: str, rows: np.ndarray, fill: bool) -> ExtensionArray:
        """Payload ``column`` at ``rows``; with ``fill``, ``-1`` rows are nulls and an int /
        bool column is taken from its nullable form (converted once per table, not per probe)."""
        values = self.payload[column]
        if not fill:
            return take_array(values.array, rows)
        arr = self._nullable.get(column)
        if arr is None:
            want = nullable_dtype(values.dtype)
            # (pandas-stubs 3.1 names each extension dtype pd.array takes; any one is taken at run time)
            arr = values.array if want is values.dtype else pd.array(values.to_numpy(), dtype=want)  # type: ignore[arg-type]
            self._nullable[column] = arr
        return take_array(arr, rows, fill=True)

    @classmethod
    def build(cls, right: pd.DataFrame, keys: Sequence[str], validate: str | None = None) -> "JoinTable":
        """Hash ``right``'s keys; raises for duplicate keys under a ``*_to_one`` validation."""
        keys = list(keys)
        cols = [key_values(right, k) for k in keys]
        valid = np.ones(len(right), dtype=bool)
        for c in cols:
            valid &= _valid_mask(c)
        positions = np.flatnonzero(valid)
        plain = [_plain_keys(c)[valid] for c in cols]
        index = pd.Index(plain[0]) if len(keys) == 1 else pd.MultiIndex.from_arrays(plain)
        unique = bool(index.is_unique)
        if not unique and validate in ("many_to_one", "one_to_one"):
            raise _duplicate_error(keys, index, "right", validate)
        payload = right[[c for c in right.columns if c not in keys]]
        return cls(keys, index, positions, payload, unique, {k: c.dtype for k, c in zip(keys, cols)})

    def _sorted_lookup(self, probe: np.ndarray) -> np.ndarray | None:
        """``get_indexer`` by binary search when the right keys are integers in increasing
        order (ids written in order, as a log's basic features are) and the probe's are of
        the same dtype; None otherwise.  No hash table is built."""
        keys = self._sorted
        if keys is None:
            values = np.asarray(self.index) if not isinstance(self.index, pd.MultiIndex) else None
            ok = (values is not None and values.dtype.kind in "iu" and len(values) > 0
                  and bool(self.index.is_monotonic_increasing))
            keys = self._sorted = values if ok and values is not None else np.zeros(0)
        if not len(keys) or not isinstance(probe, np.ndarray) or probe.dtype != keys.dtype:
            return None
        pos = np.minimum(np.searchsorted(keys, probe), len(keys) - 1)
        return np.where(keys[pos] == probe, pos, -1)

    def probe(self, left: pd.DataFrame, how: str, validate: str | None = None) -> tuple[np.ndarray | None, np.ndarray]:
        """``(left_rows, right_rows)``: the row maps of the join (``left_rows`` None: every left row once)."""
        cols = [key_values(left, k) for k in self.keys]
        valid = np.ones(len(left), dtype=bool)
        for c in cols:
            valid &= _valid_mask(c)
        plain = [_plain_keys(c) for c in cols]
        if validate in ("one_to_one", "one_to_many"):
            lkeys = pd.Index(plain[0][valid]) if len(plain) == 1 else pd.MultiIndex.from_arrays([p[valid] for p in plain])
            if not lkeys.is_unique:
                raise _duplicate_error(self.keys, lkeys, "left", validate)
        if self.unique:
            hit = self._sorted_lookup(plain[0]) if len(plain) == 1 else None
            if hit is None:
                probe = pd.Index(plain[0]) if len(plain) == 1 else pd.MultiIndex.from_arrays(plain)
                hit = self.index.get_indexer(probe)
            hit[~valid] = -1
            # an empty right side (a shuffle's empty bucket): every row misses
            right_rows = (np.where(hit >= 0, self.positions[np.maximum(hit, 0)], -1) if len(self.positions)
                          else np.full(len(hit), -1, dtype=np.int64))
            if how == "inner":
                keep = right_rows >= 0
                if keep.all():
                    return None, right_rows
                return np.flatnonzero(keep), right_rows[keep]
            return None, right_rows
        # duplicate right keys (validate allowed them): pairs of positions through pandas' merge
        lpos = np.flatnonzero(valid)
        lframe = pd.DataFrame({f"k{i}": p[valid] for i, p in enumerate(plain)} | {"_l": lpos})
        levels = [self.index] if len(self.keys) == 1 else [self.index.get_level_values(i) for i in range(len(self.keys))]
        rframe = pd.DataFrame({f"k{i}": np.asarray(lv) for i, lv in enumerate(levels)} | {"_r": self.positions})
        pairs = lframe.merge(rframe, on=[f"k{i}" for i in range(len(self.keys))], how="inner", sort=False)
        if how == "inner":
            order = np.argsort(pairs["_l"].to_numpy(), kind="stable")
            return pairs["_l"].to_numpy()[order], pairs["_r"].to_numpy()[order]
        matched = pairs[["_l", "_r"]]
        unmatched = pd.DataFrame({"_l": np.setdiff1d(np.arange(len(left)), matched["_l"].to_numpy()), "_r": -1})
        both = pd.concat([matched, unmatched], ignore_index=True)
        order = np.argsort(both["_l"].to_numpy(), kind="stable")
        return both["_l"].to_numpy()[order], both["_r"].to_numpy()[order].astype(np.int64)


def nullable_dtype(dtype: ColumnDtype) -> ColumnDtype:
    """The nullable pandas dtype an int / uint / bool column takes in a left join; others unchanged.

    Example:
        >>> import numpy as np
        >>> str(nullable_dtype(np.dtype("int32"))), str(nullable_dtype(np.dtype("float32")))
        ('Int32', 'float32')
    """
    if isinstance(dtype, pd.api.extensions.ExtensionDtype) or getattr(dtype, "kind", "O") not in "iub":
        return dtype
    name = {"b": "boolean", "i": dtype.name.capitalize(), "u": "U" + dtype.name[1:].capitalize()}[dtype.kind]
    return pd.api.types.pandas_dtype(name)




def output_names(left_cols: Sequence[str], payload_cols: Sequence[str], keys: Sequence[str],
                 suffixes: tuple[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Names of the left and right columns in the result (pandas' suffix rules)."""
    clash = set(left_cols) & set(payload_cols) - set(keys)
    lnames = {c: (c + suffixes[0] if c in clash else c) for c in left_cols}
    rnames = {c: (c + suffixes[1] if c in clash else c) for c in payload_cols}
    names = list(lnames.values()) + list(rnames.values())
    if len(set(names)) != len(names):
        raise JoinError(f"suffixes {suffixes!r} leave duplicate column names for {sorted(clash)}")
    return lnames, rnames


def assemble(left: pd.DataFrame, table: JoinTable, left_rows: np.ndarray | None, right_rows: np.ndarray, how: str,
             suffixes: tuple[str, str]) -> pd.DataFrame:
    """The joined frame from the row maps: one selection of left rows, one take per right column."""
    out = left if left_rows is None else take_rows(left, left_rows)
    lnames, rnames = output_names(list(left.columns), list(table.payload.columns), table.keys, suffixes)
    if any(k != v for k, v in lnames.items()):
        out = out.rename(columns=lnames)
    fill = how == "left"
    # arrays, not Series: no per-column copies of the frames' attrs; concat keeps the left columns as they are
    if fill:
        payload = pd.DataFrame({rnames[c]: table.take(c, right_rows, fill) for c in table.payload.columns},
                               index=out.index, copy=False)
    else:  # every row matched: one take per block of like-typed columns
        payload = take_rows(table.payload, right_rows).rename(columns=rnames)
        payload.index = out.index
    return pd.concat([out, payload], axis=1)


def host_join(left: pd.DataFrame, right: "pd.DataFrame | JoinTable", keys: Sequence[str], how: str,
              suffixes: tuple[str, str] = ("", "_right"), validate: str | None = None) -> pd.DataFrame:
    """Join two pandas frames (or a frame and a prebuilt :class:`JoinTable`)."""
    table = right if isinstance(right, JoinTable) else JoinTable.build(right, keys, validate)
    left_rows, right_rows = table.probe(left, how, validate)
    return assemble(left, table, left_rows, right_rows, how, suffixes)


def device_join(left: cudf.DataFrame, right: cudf.DataFrame, keys: Sequence[str], how: str,
                suffixes: tuple[str, str] = ("", "_right"), validate: str | None = None) -> cudf.DataFrame:
    """Join two cudf frames with pylibcudf's hash join; left order and index kept, ints stay ints.

    Unverified on a device (no GPU where this was written): it follows cudf 26.10's pylibcudf
    signatures (``plc.join.left_join`` / ``inner_join`` with ``NullEquality.UNEQUAL``, a stable
    sort of the maps by left row, ``plc.copying.gather`` with ``NULLIFY`` for the misses).
    """
    import pylibcudf as plc

    cudf = _backend.cudf_module()
    keys = list(keys)
    lk = cudf.DataFrame({k: key_values(left, k) for k in keys}).reset_index(drop=True)
    rk = cudf.DataFrame({k: key_values(right, k) for k in keys}).reset_index(drop=True)
    if validate in ("many_to_one", "one_to_one"):
        _check_device_unique(rk, keys, "right", validate)
    if validate in ("one_to_one", "one_to_many"):
        _check_device_unique(lk, keys, "left", validate)
    lt, _ = lk.to_pylibcudf()
    rt, _ = rk.to_pylibcudf()
    joiner = plc.join.left_join if how == "left" else plc.join.inner_join
    lmap, rmap = joiner(lt, rt, plc.types.NullEquality.UNEQUAL)
    maps = plc.sorting.stable_sort_by_key(plc.Table([lmap, rmap]), plc.Table([lmap]), [plc.types.Order.ASCENDING],
                                          [plc.types.NullOrder.AFTER])
    lmap, rmap = maps.columns()
    out = left.take(cudf.Series.from_pylibcudf(lmap))
    payload_cols = [c for c in right.columns if c not in keys]
    lnames, rnames = output_names(list(left.columns), payload_cols, keys, suffixes)
    ptab, _ = right[payload_cols].reset_index(drop=True).to_pylibcudf()
    gathered = plc.copying.gather(ptab, rmap, plc.copying.OutOfBoundsPolicy.NULLIFY)
    result = out.rename(columns=lnames)
    for c, col in zip(payload_cols, gathered.columns()):  # each typed as the right side's column was
        result[rnames[c]] = _backend.cudf_series_of(col, right[c].dtype, name=rnames[c], index=out.index)
    return result


def _check_device_unique(keys_frame: cudf.DataFrame, keys: list[str], side: str, validate: str) -> None:
    valid = keys_frame.dropna()
    dup = valid[valid.duplicated()]
    if len(dup):
        first = dup.iloc[:1]
        count = len(valid.merge(first, on=keys, how="inner"))
        value = tuple(first.to_pandas().iloc[0])
        raise duplicate_key_error(keys, value[0] if len(keys) == 1 else value, count, side, validate)


def check_unique_keys(frame: EagerFrame, keys: Sequence[str], side: str, validate: str) -> None:
    """Raise the duplicate-key error when a non-null key of ``frame`` (pandas or cudf)
    appears twice; used on a dask frame's hash buckets, so the count is the whole frame's.

    Example:
        >>> import pandas as pd
        >>> check_unique_keys(pd.DataFrame({"k": [1, None, None]}), ["k"], "left", "one_to_one")
        >>> check_unique_keys(pd.DataFrame({"k": [1, 1]}), ["k"], "left", "one_to_one")
        Traceback (most recent call last):
        ...
        fbrapids.errors.JoinError: join on k: key 1 has 2 rows on the left side, but the join was validated as 'one_to_one'; deduplicate that side, or pass validate=None to allow it
    """
    keys = list(keys)
    if _backend.is_gpu_object(frame):
        cudf = _backend.cudf_module()
        _check_device_unique(cudf.DataFrame({k: key_values(frame, k) for k in keys}).reset_index(drop=True),
                             keys, side, validate)
        return
    cols = [key_values(frame, k) for k in keys]
    valid = np.ones(len(frame), dtype=bool)
    for c in cols:
        valid &= _valid_mask(c)
    plain = [_plain_keys(c)[valid] for c in cols]
    index = pd.Index(plain[0]) if len(keys) == 1 else pd.MultiIndex.from_arrays(plain)
    if not index.is_unique:
        raise _duplicate_error(keys, index, side, validate)


def join_frames(left: EagerFrame, right: EagerFrame, keys: Sequence[str], how: str,
                suffixes: tuple[str, str] = ("", "_right"), validate: str | None = None) -> EagerFrame:
    """Join two eager frames of one backend (pandas, or cudf on the device).

    Example:
        >>> import pandas as pd
        >>> a = pd.DataFrame({"k": [1, 2, 2]}); b = pd.DataFrame({"k": [2, 2], "v": [5, 6]})
        >>> join_frames(a, b, ["k"], "inner")["v"].tolist()
        [5, 6, 5, 6]
    """
    if _backend.is_gpu_object(left):
        return device_join(left, right, keys, how, suffixes, validate)
    return host_join(left, right, keys, how, suffixes, validate)
