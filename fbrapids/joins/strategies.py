"""Hash joins of views with dictionaries and with each other, in O(rows) total.

Engines: one row selection per join (:mod:`fbrapids.joins.hash_join`): pandas' hash index on
the host, pylibcudf's hash join on the GPU.  For dask frames the strategy is chosen from the
sizes and the partitioning (shown in :func:`join_decisions`, ``explain`` and the demo):

* ``broadcast``: the other side is small (a dictionary: users, ads) or eager.  Its hash
  table is built by ONE task, shared by every partition of the view (never once per
  partition); each partition probes it.
* ``partitioned``: both sides are sorted by the key with known divisions (the key is their
  index, e.g. ``instance_id``).  The other side is cut at the view's divisions (widened to
  its own key range; each slice reads only the partitions overlapping it) and each output
  partition joins only its own slice.  No shuffle.
* ``shuffle``: neither: both sides are hash-partitioned once by dask's own shuffle (P2P on a
  distributed cluster) and joined partition by partition.

Semantics, the same on both backends:

* **Null keys never match** (SQL), whatever pandas or cudf would do by default.
* ``validate`` as in pandas' ``merge``; for ``how="left"`` the default is ``"many_to_one"``:
  duplicate keys on the right are an error naming the key and its row count.
  ``validate=None`` opts out.
* **Exact integers.** In a left join, the other side's int / bool columns become nullable
  (``Int64``...) on pandas, and keep their dtype with a null mask on cudf, so ids above 2^53
  keep their values (pandas' and cudf's own merges turn them into float64).
* The view's index is kept, so divisions stay known through a chain of joins (pandas'
  ``merge`` resets it to 0..n-1).
* **Row order.** Eager, broadcast and partitioned joins keep the view's row order; a view
  row matching several right rows (``validate`` allowing it) gives them in the right side's
  order, as pandas' ``merge``.  A **shuffle** join returns rows grouped by hash bucket of
  the key (dask's shuffle moves them); sort by the index, or a row id, for the view's order.
* ``validate`` holds over the whole frames on dask, whatever the strategy (a key repeated
  in two partitions of the view breaks ``one_to_one`` as it does eagerly).

Placement (DESIGN.md, "Joins"): when the build side is estimated larger than ``fraction`` of
the free device memory, the join runs on the host and its result is copied to the device.
The estimate is the build side's bytes times ``HASH_TABLE_OVERHEAD``.  On the CPU backend
there is no device, unless ``device_budget`` is given.

Keys must have compatible dtypes: integers with integers (the narrower side is widened,
int32 -> int64, never the wider one narrowed; uint8/16/32 with a signed key both to the
signed type holding both), strings with strings.  An int key against a string key, or a
signed key against uint64, is an error rather than a silently empty or wrong join.
A pandas Categorical key (dictionary-encoded strings, ``astype("category")``, dask
categoricals of known or unknown categories) is matched by its values and comes out decoded
(:func:`check_keys`); a dask categorical whose categories turn out to be of another kind is
an error naming the key when its partition is computed.

Example:
    >>> import pandas as pd
    >>> views = pd.DataFrame({"user_id": [1, 2, 3, None]}, dtype="Int64")
    >>> users = pd.DataFrame({"user_id": [1, 3, None], "age": [20, 30, 99]}).astype({"user_id": "Int64"})
    >>> join(views, users, on="user_id")["age"].tolist()
    [20, <NA>, 30, <NA>]
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Hashable, Sequence, TypeVar, overload

import pandas as pd

from fbrapids.errors import JoinError
from fbrapids.frames import backend as _backend
from fbrapids.frames.backend import EagerFrame, FrameLike, is_eager_frame
from fbrapids.joins.hash_join import (
    JoinTable,
    check_unique_keys,
    device_join,
    host_join,
    join_frames,
    key_values,
    normalize_validate,
    nullable_dtype,
)
from fbrapids.views.dtype_spec import ColumnDtype, DtypeSpec, as_numpy
from fbrapids.views.rows import filter_rows

if TYPE_CHECKING:
    import cudf
    import dask.dataframe as dd
    from dask.delayed import Delayed

T = TypeVar("T")

log = logging.getLogger(__name__)

HASH_TABLE_OVERHEAD = 2.0
DEFAULT_DEVICE_FRACTION = float(os.environ.get("FBRAPIDS_JOIN_DEVICE_FRACTION", "0.5"))
BROADCAST_BYTES = int(os.environ.get("FBRAPIDS_BROADCAST_BYTES", str(256 * 2**20)))
_HOWS = ("left", "inner")
HISTORY_ATTR = "fbrapids.joins"


@dataclass(frozen=True)
class JoinDecision:
    """Where one join ran, and the sizes behind the choice."""

    on: tuple[str, ...]
    how: str
    placement: str  # "device" | "host"
    strategy: str  # "eager" | "broadcast" | "shuffle"
    build_bytes: int
    budget_bytes: int | None
    reason: str

    def __str__(self) -> str:
        budget = "n/a" if self.budget_bytes is None else f"{self.budget_bytes:,} B"
        return (f"join on {', '.join(self.on)} ({self.how}, {self.strategy}): {self.placement} — {self.reason} "
                f"[build side ~{self.build_bytes:,} B, device budget {budget}]")


_DECISIONS: collections.deque[JoinDecision] = collections.deque(maxlen=256)
_recorded = 0  # decisions recorded in this process, the ones the deque has dropped included
_decisions_lock = threading.Lock()


def join_decision_mark() -> int:
    """How many join decisions this process has recorded so far: pass it to
    :func:`join_decisions` later to get only the joins planned since.

    Example:
        >>> join_decision_mark() >= 0
        True
    """
    return _recorded


def join_decisions(since: int | None = None) -> list[JoinDecision]:
    """The placement decisions of the joins planned in this process, oldest first (the last
    256 are kept); ``since``: a :func:`join_decision_mark`, for only the joins planned after it.

    Example:
        >>> import pandas as pd, fbrapids
        >>> mark = join_decision_mark()
        >>> _ = pd.DataFrame({"k": [1]}).fbx.join(pd.DataFrame({"k": [1], "v": [2]}), on="k")
        >>> [d.strategy for d in join_decisions(since=mark)]
        ['eager']
    """
    with _decisions_lock:
        kept = list(_DECISIONS)
        new = len(kept) if since is None else max(0, min(len(kept), _recorded - since))
    return kept[len(kept) - new:]


def _frame_bytes(frame: FrameLike) -> int:
    if not is_eager_frame(frame):
        return int(frame.memory_usage(deep=True, index=False).sum().compute())
    if isinstance(frame, pd.DataFrame):  # Arrow-backed columns know their buffer sizes: no pass over strings
        return int(sum(frame[c].array.nbytes if isinstance(frame[c].dtype, pd.api.extensions.ExtensionDtype)
                       else frame[c].memory_usage(deep=True, index=False) for c in frame.columns))
    return int(frame.memory_usage(deep=True, index=False).sum())


def _key_kind(dtype: DtypeSpec) -> str:
    text = str(dtype).lower()
    if text in ("str", "string", "object", "large_string[pyarrow]", "string[pyarrow]") or "string" in text:
        return "str"
    try:
        kind = pd.api.types.pandas_dtype(dtype).kind
    except TypeError:
        kind = getattr(dtype, "kind", "O")
    return {"i": "int", "u": "uint", "f": "float", "b": "bool", "O": "str", "U": "str"}.get(kind, text)


def _index_names(frame: FrameLike) -> list[Hashable]:
    return list(getattr(frame.index, "names", [frame.index.name]))


def _key_dtype(frame: FrameLike, key: str) -> ColumnDtype:
    if key in frame.columns:
        return frame[key].dtype
    return frame.index.dtype if frame.index.name == key else key_values(frame, key).dtype


def _categories(dtype: ColumnDtype) -> pd.Index | cudf.Index | None:
    """A categorical's categories (pandas' or cudf's dtype); None for any other dtype."""
    return getattr(dtype, "categories", None) if str(dtype) == "category" else None


def _value_dtype(frame: FrameLike, key: str) -> ColumnDtype | None:
    """The dtype of ``key``'s values: a categorical's categories dtype; None for a dask
    categorical whose categories are unknown (``astype("category")`` on a dask column) or
    for a categorical of no categories (all null)."""
    dtype = _key_dtype(frame, key)
    categories = _categories(dtype)
    if categories is None:
        return dtype
    if len(categories) == 0:  # an all-null categorical: no values to type it, the other side's decides
        return None
    if not is_eager_frame(frame):
        from dask.dataframe.utils import has_known_categories

        meta = frame._meta[key] if key in frame.columns else frame._meta.index
        if not has_known_categories(meta):
            return None
    return categories.dtype


def _widened(dtype: ColumnDtype, width: int) -> ColumnDtype:
    """``dtype`` (an int / uint, numpy or nullable) at ``width`` bytes, keeping its nullability."""
    wide = pd.api.types.pandas_dtype(f"{as_numpy(dtype).kind}{width}")
    return nullable_dtype(wide) if isinstance(dtype, pd.api.extensions.ExtensionDtype) else wide


def _signed_for_both(dtype: ColumnDtype, other: ColumnDtype) -> ColumnDtype | None:
    """The signed integer dtype (``dtype``'s flavour) that holds every value of an int and
    a uint key below 64 bits (uint32 with int16 -> int64); None for uint64 with a signed key.

    Example:
        >>> import numpy as np
        >>> str(_signed_for_both(np.dtype("uint8"), np.dtype("int8"))), _signed_for_both(np.dtype("uint64"), np.dtype("int64"))
        ('int16', None)
    """
    sizes = {as_numpy(t).kind: as_numpy(t).itemsize for t in (dtype, other)}
    width = max(sizes["i"], 2 * sizes["u"])
    if width > 8:
        return None
    wide = pd.api.types.pandas_dtype(f"i{width}")
    return nullable_dtype(wide) if isinstance(dtype, pd.api.extensions.ExtensionDtype) else wide


def check_keys(left: FrameLike, right: FrameLike, on: Sequence[str]) -> tuple[dict[str, DtypeSpec], dict[str, DtypeSpec]]:
    """Validate join keys; returns the casts (key -> dtype) of the left and of the right side
    that make both sides' keys hash alike.

    * A categorical key is compared by its values: it is decoded to its categories' dtype
      (for a dask categorical of unknown categories, to the other side's key dtype, or to
      strings when both are unknown; a partition whose categories turn out to be of another
      kind is a :class:`~fbrapids.errors.JoinError` naming the key).
    * Integers of two widths: the narrower side is widened (int32 -> int64), never the wider
      one narrowed (which would wrap values into false matches); nullability is kept.  A
      signed key with an unsigned one below 64 bits: both become the signed type that holds
      both (uint8 with int8 -> int16); uint64 with a signed key is an error.  Two
      flavours of one width (int64, Int64, int64[pyarrow]) hash alike and are left as they are.
    * Other differing flavours (object / str / Arrow strings): the right side takes the left's.

    Raises:
        JoinError: a key is missing, or the key dtypes cannot match (int vs str,
            int64 vs uint64, float keys).

    Example:
        >>> import numpy as np, pandas as pd
        >>> a = pd.DataFrame({"k": np.array([5], dtype="int32")})
        >>> b = pd.DataFrame({"k": pd.Series([5], dtype="category"), "v": [1]})
        >>> check_keys(a, b, ["k"])
        ({'k': dtype('int64')}, {'k': dtype('int64')})
    """
    lcasts: dict[str, DtypeSpec] = {}
    rcasts: dict[str, DtypeSpec] = {}
    for key in on:
        for side, frame in (("left", left), ("right", right)):
            if key not in frame.columns and key not in _index_names(frame):
                raise JoinError(f"join key {key!r} not in the {side} frame; its columns: {', '.join(map(str, frame.columns))}")
        lraw, rraw = _key_dtype(left, key), _key_dtype(right, key)
        lt, rt = _value_dtype(left, key), _value_dtype(right, key)
        if lt is None:  # unknown categories: the other side's type, strings when both are unknown (checked per partition)
            lt = rt if rt is not None else pd.api.types.pandas_dtype("str")
        if rt is None:
            rt = lt
        lk, rk = _key_kind(lt), _key_kind(rt)
        if {lk, rk} == {"int", "uint"}:
            lsigned, rsigned = _signed_for_both(lt, rt), _signed_for_both(rt, lt)
            if lsigned is not None and rsigned is not None:  # uint8/16/32 with a signed key
                lt, rt = lsigned, rsigned
                lk = rk = "int"
        if "float" in (lk, rk):
            raise JoinError(f"join key {key!r} is floating point ({lt} vs {rt}); cast it to an integer or string first")
        if lk != rk:
            hint = ("ids above 2^63 need uint64 on both sides" if {lk, rk} == {"int", "uint"}
                    else "cast one side explicitly")
            raise JoinError(f"join key {key!r} has dtype {lraw} on the left but {rraw} on the right; {hint}")
        if lk in ("int", "uint"):  # same width, other flavour (int64 / Int64 / int64[pyarrow]): hashed alike
            lw, rw = as_numpy(lt).itemsize, as_numpy(rt).itemsize
            lt, rt = (_widened(lt, rw) if lw < rw else lt), (_widened(rt, lw) if rw < lw else rt)
        elif str(lt) != str(rt):
            rt = lt
        for casts, raw, target in ((lcasts, lraw, lt), (rcasts, rraw, rt)):
            if str(raw) != str(target):
                casts[key] = target
    return lcasts, rcasts


def decide_placement(be: _backend.Backend, build_bytes: int, device_budget: int | None, fraction: float) -> tuple[str, int | None, str]:
    """``(placement, budget, reason)`` for a build side of ``build_bytes``.

    Example:
        >>> from fbrapids.frames.backend import get_backend
        >>> decide_placement(get_backend("cpu"), 10**9, 10**6, 0.5)[0]
        'host'
    """
    need = int(build_bytes * HASH_TABLE_OVERHEAD)
    if device_budget is None:
        free = be.free_device_memory()
        if free is None:
            return "host", None, "CPU backend: no device"
        device_budget = int(free * fraction)
        source = f"{fraction:.0%} of {free:,} B free device memory"
    else:
        source = "the given device budget"
    if need > device_budget:
        return "host", device_budget, f"build side x{HASH_TABLE_OVERHEAD:g} = {need:,} B exceeds {source}"
    return "device", device_budget, f"build side x{HASH_TABLE_OVERHEAD:g} = {need:,} B fits {source}"


def _record(decision: JoinDecision) -> None:
    global _recorded
    with _decisions_lock:
        _DECISIONS.append(decision)
        _recorded += 1
    log.info("%s", decision)


_AUTO = "auto"


def _estimated_bytes(frame: FrameLike) -> tuple[int, dd.DataFrame | None]:
    """``(bytes, first)``: the in-memory bytes of ``frame`` and, for a dask frame, its first
    partition persisted (None for an eager frame).  A dask frame of several partitions is
    sized as its first partition times the partition count (reading the whole side just to
    size it would be one more pass over it).  The partition stays where it was computed (a
    worker's memory on a cluster: only its size comes back), and a broadcast join builds its
    table from it and the other partitions, so partition 0 is read and cleaned once."""
    if is_eager_frame(frame):
        return _frame_bytes(frame), None
    first = frame.partitions[0].persist()
    return _frame_bytes(first) * frame.npartitions, first


def _key_is_sorted_index(frame: FrameLike, keys: Sequence[str]) -> bool:
    return (not is_eager_frame(frame) and len(keys) == 1 and frame.index.name == keys[0]
            and keys[0] not in frame.columns and bool(frame.known_divisions))


def build_side(right: EagerFrame, keys: Sequence[str], validate: str | None, on_host: bool,
               rest: Sequence[EagerFrame] = ()) -> JoinTable | cudf.DataFrame:
    """The build side of a partitioned join, made once: a host :class:`JoinTable`, or the
    validated cudf frame on the device.  ``rest``: more partitions of the same side, after
    ``right`` (a dask build side whose first partition was computed at planning).

    Example:
        >>> import pandas as pd
        >>> t = build_side(pd.DataFrame({"k": [1]}), ["k"], None, True, rest=[pd.DataFrame({"k": [2]})])
        >>> t.index.tolist()
        [1, 2]
    """
    if len(rest):
        right = _backend.backend_of(right).xdf.concat([right, *rest])
    if on_host or not _backend.is_gpu_object(right):
        return JoinTable.build(_backend.to_host(right), keys, validate)
    if validate in ("many_to_one", "one_to_one"):
        device_join(right.iloc[:0], right, keys, "inner", validate=validate)
    return right


def probe_partition(part: EagerFrame, table: JoinTable | cudf.DataFrame, keys: Sequence[str], how: str,
                    suffixes: tuple[str, str], validate: str | None) -> EagerFrame:
    """Join one partition of the view with a build side made by :func:`build_side`."""
    left_validate = validate if validate in ("one_to_one", "one_to_many") else None
    if isinstance(table, JoinTable):
        if _backend.is_gpu_object(part):  # a dictionary too large for the device: join on the host
            be = _backend.backend_of(part)
            return _backend.to_backend(host_join(_backend.to_host(part), table, keys, how, suffixes, left_validate), be)
        return host_join(part, table, keys, how, suffixes, left_validate)
    return device_join(part, table, keys, how, suffixes, left_validate)


def join_partitions(left: EagerFrame, right: EagerFrame, keys: Sequence[str], how: str, suffixes: tuple[str, str],
                    validate: str | None, on_host: bool) -> EagerFrame:
    """Join two co-partitioned partitions (same key range or same hash bucket)."""
    return probe_partition(left, build_side(right, keys, validate, on_host), keys, how, suffixes, validate)


def join(
    left: FrameLike,
    other: FrameLike,
    on: str | Sequence[str],
    how: str = "left",
    *,
    validate: str | None = _AUTO,
    suffixes: tuple[str, str] = ("", "_right"),
    broadcast: bool | None = None,
    device_budget: int | None = None,
    fraction: float = DEFAULT_DEVICE_FRACTION,
) -> FrameLike:
    """Hash join ``left`` (a view) with ``other`` (a dictionary, or another view) on ``on``.

    Args:
        left: pandas, cudf or dask frame.
        other: frame of any of those kinds.
        on: key column(s) (or index level names), present on both sides.
        how: ``"left"`` or ``"inner"``.
        validate: ``"one_to_one"``, ``"one_to_many"``, ``"many_to_one"``, ``"many_to_many"``
            (or pandas' ``"1:1"``...) or None.  Default: ``"many_to_one"`` for a left join,
            None for an inner join.
        suffixes: added to clashing non-key column names, left and right.
        broadcast: for dask frames, force (True) or forbid (False) a broadcast join;
            default: broadcast when ``other`` is eager or under ``FBRAPIDS_BROADCAST_BYTES``.
        device_budget: device bytes the build side may use (default: ``fraction`` of
            the free device memory).  Above it the join runs on the host.
        fraction: share of free device memory a build side may use.

    Raises:
        JoinError: bad ``how`` or ``validate``, missing keys, key dtypes that cannot match,
            or a key that breaks ``validate`` (named, with its row count).

    Example:
        >>> import pandas as pd
        >>> a = pd.DataFrame({"k": [1, 2]}); b = pd.DataFrame({"k": [2], "v": ["x"]})
        >>> join(a, b, on="k", how="inner").to_dict("list")
        {'k': [2], 'v': ['x']}
        >>> join(a, pd.DataFrame({"k": [1, 1], "v": [5, 6]}), on="k")
        Traceback (most recent call last):
        ...
        fbrapids.errors.JoinError: join on k: key 1 has 2 rows on the right side, but the join was validated as 'many_to_one'; deduplicate that side, or pass validate=None to allow it
    """
    keys, validate = _join_arguments(on, how, validate)
    left_casts, right_casts = check_keys(left, other, keys)
    be = _backend.backend_of(left)
    build_bytes, first = _estimated_bytes(other)
    if first is not None:
        first = _cast_keys(first, right_casts)
    left, other = _cast_keys(left, left_casts), _cast_keys(other, right_casts)
    placement, budget, reason = decide_placement(be, build_bytes, device_budget, fraction)
    plan = _JoinPlan(tuple(keys), how, suffixes, validate, placement == "host", be)
    if is_eager_frame(left):
        return _eager_join(left, other, first, plan, JoinDecision(plan.keys, how, placement, "eager", build_bytes,
                                                                  budget, reason))
    strategy, reason = _dask_strategy(left, other, plan.keys, build_bytes, broadcast, reason)
    decision = JoinDecision(plan.keys, how, placement, strategy, build_bytes, budget, reason)
    _record(decision)
    meta_table = build_side(_meta_of(other), keys, None, plan.on_host)
    meta = _with_history(probe_partition(left._meta, meta_table, *plan.args), left._meta, decision)
    if strategy == "broadcast":
        return _broadcast_join(left, other, first, plan, meta)
    if is_eager_frame(other):
        other = _backend.dask_dataframe().from_pandas(_backend.to_backend(other, be), npartitions=1)
    if strategy == "partitioned":
        return _partitioned_join(left, other, plan, meta)
    return _shuffle_join(left, other, plan, decision)


@dataclass(frozen=True)
class _JoinPlan:
    """One join's settled arguments (:func:`join`): the keys, ``how``, the suffixes, the
    normalized ``validate``, whether the build side is placed on the host, and the backend."""

    keys: tuple[str, ...]
    how: str
    suffixes: tuple[str, str]
    validate: str | None
    on_host: bool
    be: _backend.Backend

    @property
    def args(self) -> tuple[list[str], str, tuple[str, str], str | None]:
        """``(keys, how, suffixes, validate)``: :func:`probe_partition`'s and
        :func:`join_partitions`' arguments after the frames."""
        return list(self.keys), self.how, self.suffixes, self.validate


def _join_arguments(on: str | Sequence[str], how: str, validate: str | None) -> tuple[list[str], str | None]:
    """The key list and the normalized ``validate`` of a :func:`join` (``"auto"``:
    ``"many_to_one"`` for a left join, None for an inner one); a bad ``how`` or ``validate``
    is a :class:`~fbrapids.errors.JoinError`.

    Example:
        >>> _join_arguments("k", "left", "auto"), _join_arguments(["a", "b"], "inner", "auto")
        ((['k'], 'many_to_one'), (['a', 'b'], None))
    """
    if how not in _HOWS:
        raise JoinError(f"how={how!r} is not supported; use one of {', '.join(_HOWS)}")
    if validate == _AUTO:
        validate = "many_to_one" if how == "left" else None
    return ([on] if isinstance(on, str) else list(on)), normalize_validate(validate)


def _eager_join(left: EagerFrame, other: FrameLike, first: dd.DataFrame | None,
                plan: _JoinPlan, decision: JoinDecision) -> EagerFrame:
    """:func:`join` of an eager view: a dask ``other`` computed (its first partition as
    computed to size it), the join run on the host when the build side does not fit the
    device (the result moved back), else on the view's backend."""
    if not is_eager_frame(other):
        assert first is not None  # (_estimated_bytes persisted a dask side's first partition)
        other = (first.compute() if other.npartitions == 1 else
                 _backend.dask_dataframe().concat([first, other.partitions[1:]]).compute())
    _record(decision)
    keys, how, suffixes, validate = plan.args
    if plan.on_host and plan.be.is_gpu:
        result = host_join(_backend.to_host(left), _backend.to_host(other), keys, how, suffixes, validate)
        result = _backend.to_backend(result, plan.be)
    else:
        result = join_frames(left, _backend.to_backend(other, plan.be), keys, how, suffixes, validate)
    return _with_history(result, left, decision)


def _dask_strategy(left: dd.DataFrame, other: FrameLike, keys: Sequence[str], build_bytes: int,
                   broadcast: bool | None, reason: str) -> tuple[str, str]:
    """``(strategy, reason)`` of a join of a dask view: ``broadcast`` when ``other`` is eager or
    small (``BROADCAST_BYTES``) and the sides are not both sorted by the key, ``partitioned``
    when they are, else ``shuffle``; ``broadcast`` forces or forbids the first (a broadcast
    forced over a large side is said in the reason)."""
    aligned = _key_is_sorted_index(left, keys) and _key_is_sorted_index(other, keys)
    limit = broadcast_limit()
    small = not _backend.is_dask(other) or build_bytes <= limit
    if broadcast is None:
        strategy = "broadcast" if small and not aligned else ("partitioned" if aligned else "shuffle")
    else:
        strategy = "broadcast" if broadcast else ("partitioned" if aligned else "shuffle")
    if strategy == "broadcast" and _backend.is_dask(other) and not small:
        reason += "; broadcast forced over a large side"
    elif strategy == "shuffle" and _backend.is_dask(other) and not small:
        reason += f"; the other side is over the broadcast limit of {limit:,} B"
    return strategy, reason


def broadcast_limit() -> int:
    """The most bytes of a dask ``other`` side that :func:`join` broadcasts: dask config
    ``fbrapids.broadcast-bytes`` (a run sets it from its memory budget:
    :mod:`fbrapids.runs.memory_budget`), else ``$FBRAPIDS_BROADCAST_BYTES`` (default 256 MiB).

    Example:
        >>> import dask
        >>> with dask.config.set({"fbrapids.broadcast-bytes": 1000}):
        ...     broadcast_limit()
        1000
    """
    import dask

    value = dask.config.get("fbrapids.broadcast-bytes", None)
    return BROADCAST_BYTES if value is None else int(value)


def _broadcast_join(left: dd.DataFrame, other: FrameLike, first: dd.DataFrame | None,
                    plan: _JoinPlan, meta: EagerFrame) -> dd.DataFrame:
    """The ``broadcast`` strategy: ``other``'s table built by one task, shared by every
    partition of ``left``, each partition probing it (the left keys' uniqueness checked over
    the whole frame first when ``validate`` asks for it)."""
    import dask

    keys, validate, on_host = list(plan.keys), plan.validate, plan.on_host
    name = f"join-build-{dask.base.tokenize(other, *plan.args, on_host)}"
    if is_eager_frame(other):
        table = dask.delayed(build_side, pure=True, name=name)(_backend.to_backend(other, plan.be), keys, validate,
                                                               on_host)
    else:  # partition 0 as computed to size this side; the others read here
        assert first is not None  # (_estimated_bytes persisted a dask side's first partition)
        table = dask.delayed(build_side, pure=True, name=name)(first.to_delayed()[0], keys, validate, on_host,
                                                               other.to_delayed()[1:])
    if validate in ("one_to_one", "one_to_many") and left.npartitions > 1:
        # each partition sees only its own rows: the left keys' uniqueness is checked over the whole frame
        table = dask.delayed(_after, pure=True)(table, _left_keys_unique(left, keys, validate))
    return left.map_partitions(probe_partition, table, *plan.args, meta=meta)


def _partitioned_join(left: dd.DataFrame, other: dd.DataFrame, plan: _JoinPlan,
                      meta: EagerFrame) -> dd.DataFrame:
    """The ``partitioned`` strategy: both sides sorted by the key (their index, known
    divisions); ``other`` cut at the view's divisions and each partition joined with its slice."""
    # the right side cut at the view's divisions; its keys beyond the view's range land in the first / last
    # partition (they match nothing there, but are still validated, as in an eager join)
    right = _cut_at(other, _covering(left.divisions, other.divisions))
    return _backend.dask_dataframe().map_partitions(join_partitions, left, right, *plan.args, plan.on_host,
                                                    meta=meta, align_dataframes=False)


def _shuffle_join(left: dd.DataFrame, other: dd.DataFrame, plan: _JoinPlan,
                  decision: JoinDecision) -> dd.DataFrame:
    """The ``shuffle`` strategy: both sides hash-partitioned by the key (dask's shuffle) into
    the larger partition count, then joined bucket by bucket."""
    keys, n = list(plan.keys), max(left.npartitions, other.npartitions)
    left_s = _with_key_columns(left, keys)
    left_s = left_s.shuffle(on=keys, npartitions=n, shuffle_method=shuffle_method(left_s))
    right_s = _with_key_columns(other, keys)
    right_s = right_s.shuffle(on=keys, npartitions=n, shuffle_method=shuffle_method(right_s))
    meta = _with_history(probe_partition(left_s._meta, build_side(right_s._meta, keys, None, plan.on_host),
                                         *plan.args), left._meta, decision)
    return _backend.dask_dataframe().map_partitions(join_partitions, left_s, right_s, *plan.args, plan.on_host,
                                                    meta=meta, align_dataframes=False)


def shuffle_method(frame: dd.DataFrame) -> str | None:
    """The shuffle method for dask ``frame``: None (dask's default: its disk shuffle on the
    local scheduler, P2P on a distributed cluster), except ``"tasks"`` where the default is
    P2P and the frame has an Arrow list or struct column: P2P fails on them ("failed during
    transfer phase", dask 2026.8), while the task shuffle's pieces are the workers' results,
    spilled to disk past their memory limit like any other.

    Example:
        >>> import pandas as pd, pyarrow as pa, dask.dataframe as dd
        >>> lists = pd.DataFrame({"l": pd.Series([[1]], dtype=pd.ArrowDtype(pa.list_(pa.int64())))})
        >>> shuffle_method(dd.from_pandas(lists, npartitions=1)) is None  # no cluster: the disk shuffle
        True
    """
    import pyarrow as pa
    from dask.utils import get_default_shuffle_method

    if get_default_shuffle_method() != "p2p":
        return None
    nested = [d for d in frame._meta.dtypes if isinstance(d, pd.ArrowDtype) and pa.types.is_nested(d.pyarrow_dtype)]
    return "tasks" if nested else None


def _covering(left: Sequence[Any], right: Sequence[Any]) -> tuple[Any, ...]:
    """The view's divisions, widened at both ends to take in the other side's key range.

    Example:
        >>> _covering((1, 4, 6), (0, 5, 11))
        (0, 4, 11)
    """
    return (min(left[0], right[0]), *left[1:-1], max(left[-1], right[-1]))


def _cut_at(frame: dd.DataFrame, divisions: Sequence[Any]) -> dd.DataFrame:
    """``frame`` (sorted by its index, known divisions inside ``divisions``) cut at
    ``divisions``: partition ``i`` holds the keys in ``[divisions[i], divisions[i + 1])``, the
    last one its upper end too.  Not dask's ``repartition(divisions=, force=True)``: it drops
    every row of a one-key frame (divisions ``(a, a)``) when the new divisions end in
    ``(..., a, a)`` (a partitioned inner join then found nothing)."""
    import dask

    src, parts = frame.divisions, frame.to_delayed()
    out = []
    for i in range(len(divisions) - 1):
        lo, hi = divisions[i], divisions[i + 1]
        take = [parts[j] for j in range(len(parts)) if src[j] <= hi and src[j + 1] >= lo]
        last = i == len(divisions) - 2
        out.append(dask.delayed(_key_range, pure=True)(frame._meta, lo, hi, last, *take))
    return _backend.dask_dataframe().from_delayed(out, meta=frame._meta, divisions=tuple(divisions),
                                                  verify_meta=False)


def _key_range(meta: EagerFrame, lo: Any, hi: Any, last: bool, *parts: EagerFrame) -> EagerFrame:
    """The rows of ``parts`` (sorted frames) whose index lies in ``[lo, hi)`` (``[lo, hi]``
    when ``last``), as one frame of ``meta``'s columns."""
    whole = _backend.backend_of(meta).xdf.concat(list(parts)) if len(parts) > 1 else parts[0] if parts else meta
    idx = whole.index
    keep = (idx >= lo) & ((idx <= hi) if last else (idx < hi))
    return filter_rows(whole, keep)  # one part whose rows all lie in the range: not copied


def _after(value: T, _check: object) -> T:
    """``value``, once the check it is given has passed (a dask task dependency)."""
    return value


def _left_keys_unique(left: dd.DataFrame, keys: Sequence[str], validate: str) -> Delayed:
    """A delayed check that no non-null key repeats anywhere in the dask frame ``left``:
    its keys are hash-partitioned by dask's shuffle, so equal keys meet in one bucket, and
    each bucket is checked (the error names the key and its row count in the whole frame)."""
    import dask

    frame = _with_key_columns(left, keys)[list(keys)]
    buckets = frame.shuffle(on=list(keys), npartitions=left.npartitions)
    checks = [dask.delayed(check_unique_keys, pure=True)(part, list(keys), "left", validate)
              for part in buckets.to_delayed()]
    return dask.delayed(len, pure=True)(checks)


def join_history(frame: FrameLike) -> list[str]:
    """The joins that made ``frame`` (eager, or a dask frame's ``_meta``), oldest first: each
    with its strategy, placement and the sizes behind them.  ``explain`` shows them.

    Example:
        >>> import pandas as pd
        >>> a = pd.DataFrame({"k": [1]}); b = pd.DataFrame({"k": [1], "v": [2]})
        >>> join_history(join(a, b, on="k"))[0].startswith("join on k (left, eager)")
        True
    """
    attrs = getattr(getattr(frame, "_meta", frame), "attrs", None) or {}
    return list(attrs.get(HISTORY_ATTR, []))


def _with_history(result: FrameLike, left: FrameLike, decision: JoinDecision) -> FrameLike:
    if hasattr(result, "attrs"):
        result.attrs = {**result.attrs, HISTORY_ATTR: [*join_history(left), str(decision)]}
    return result


def _meta_of(frame: FrameLike) -> EagerFrame:
    return frame.iloc[:0] if is_eager_frame(frame) else frame._meta


def _with_key_columns(frame: dd.DataFrame, keys: Sequence[str]) -> dd.DataFrame:
    """``frame`` with every key as a column (a key that is the index is reset into one)."""
    if all(k in frame.columns for k in keys):
        return frame
    return frame.reset_index()


@overload
def _cast_keys(frame: dd.DataFrame, casts: dict[str, DtypeSpec]) -> dd.DataFrame: ...
@overload
def _cast_keys(frame: FrameLike, casts: dict[str, DtypeSpec]) -> FrameLike: ...
def _cast_keys(frame: FrameLike, casts: dict[str, DtypeSpec]) -> FrameLike:
    """``frame`` with its key columns cast (categoricals decoded: per partition for a dask
    frame, each partition's categories checked against the kind of the cast)."""
    cols = {k: v for k, v in casts.items() if k in frame.columns}
    if not cols:
        return frame
    if is_eager_frame(frame):
        return cast_key_columns(frame, cols)
    meta = frame._meta.astype(cols)
    return frame.map_partitions(cast_key_columns, cols, meta=meta)


def cast_key_columns(frame: EagerFrame, casts: dict[str, DtypeSpec]) -> EagerFrame:
    """Cast key columns of an eager frame (or a dask partition); a categorical is decoded to
    the cast's dtype only when its categories are of the same kind (int, str...).

    Example:
        >>> import pandas as pd
        >>> cast_key_columns(pd.DataFrame({"k": pd.Series([7, 8], dtype="category")}), {"k": "int64"})["k"].tolist()
        [7, 8]
        >>> cast_key_columns(pd.DataFrame({"k": pd.Series([7], dtype="category")}), {"k": "str"})
        Traceback (most recent call last):
        ...
        fbrapids.errors.JoinError: join key 'k' is a categorical of int64 values where str values were expected (the other side's key dtype; str when both sides are dask categoricals of unknown categories): cast the key to its values first, e.g. .astype({'k': 'int64'})
    """
    for key, target in casts.items():
        categories = _categories(frame[key].dtype)
        if categories is not None and len(categories) and _key_kind(categories.dtype) != _key_kind(target):
            values = categories.dtype
            raise JoinError(f"join key {key!r} is a categorical of {values} values where {target} values were "
                            "expected (the other side's key dtype; str when both sides are dask categoricals of "
                            f"unknown categories): cast the key to its values first, e.g. .astype({{{key!r}: "
                            f"'{values}'}})")
    return frame.astype(casts)
