"""Hash joins of views with dictionaries, with a host fallback for oversized ones.

Engines: cuDF's hash join (``cudf.DataFrame.merge``) on the GPU backend, pandas' on the
CPU, and dask's merge for partitioned frames: broadcast when the other side is small,
shuffle otherwise.

Placement (DESIGN.md, "Joins"): when the build side (``other``) is estimated larger than
``fraction`` of the free device memory, the join runs on the host with pandas and its
result is copied to the device.  The estimate is the build side's in-memory bytes times
``HASH_TABLE_OVERHEAD`` (cuDF's hash table roughly doubles the key columns, plus the
gathered payload).  The decision and the sizes behind it are logged and kept in
:func:`join_decisions`.  On the CPU backend there is no device: every join is a host
join, unless ``device_budget`` is given, which lets the decision be exercised (the
engine is pandas either way there).

Keys must have compatible dtypes: integers with integers (int32 is widened to int64),
strings with strings.  An int key against a string key, or int64 against uint64, is an
error rather than a silently empty or wrong join.  In a left join, integer columns of the
other side become nullable (``Int64``...) on pandas rather than float, so 64-bit ids keep
their exact values; ``clean(fill=...)`` turns them back into plain ints.

Example:
    >>> import pandas as pd
    >>> views = pd.DataFrame({"user_id": [1, 2, 3]})
    >>> users = pd.DataFrame({"user_id": [1, 3], "age": [20, 30]})
    >>> join(views, users, on="user_id")["age"].tolist()
    [20, <NA>, 30]
"""

from __future__ import annotations

import collections
import logging
import os
from dataclasses import dataclass
from typing import Any, Sequence

import pandas as pd

from fbrapids import backend as _backend
from fbrapids.errors import JoinError

log = logging.getLogger(__name__)

HASH_TABLE_OVERHEAD = 2.0
DEFAULT_DEVICE_FRACTION = float(os.environ.get("FBRAPIDS_JOIN_DEVICE_FRACTION", "0.5"))
BROADCAST_BYTES = int(os.environ.get("FBRAPIDS_BROADCAST_BYTES", str(256 * 2**20)))
_HOWS = ("left", "inner")


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


def join_decisions() -> list[JoinDecision]:
    """The placement decisions of the joins planned in this process, oldest first.

    Example:
        >>> isinstance(join_decisions(), list)
        True
    """
    return list(_DECISIONS)


def _is_dask(obj: Any) -> bool:
    return hasattr(obj, "dask") and hasattr(obj, "npartitions")


def _frame_bytes(frame: Any) -> int:
    if _is_dask(frame):
        return int(frame.memory_usage(deep=True, index=False).sum().compute())
    return int(frame.memory_usage(deep=True, index=False).sum())


def _key_kind(dtype: Any) -> str:
    text = str(dtype).lower()
    if text in ("str", "string", "object", "large_string[pyarrow]", "string[pyarrow]") or "string" in text:
        return "str"
    try:
        kind = pd.api.types.pandas_dtype(dtype).kind
    except TypeError:
        kind = getattr(dtype, "kind", "O")
    return {"i": "int", "u": "uint", "f": "float", "b": "bool", "O": "str", "U": "str"}.get(kind, text)


def check_keys(left: Any, right: Any, on: Sequence[str]) -> dict[str, Any]:
    """Validate join keys; returns the casts the other side needs (int32 -> int64 ...).

    Raises:
        JoinError: a key is missing, or the key dtypes cannot match (int vs str,
            int64 vs uint64, float keys).
    """
    casts: dict[str, Any] = {}
    for key in on:
        for side, frame in (("left", left), ("right", right)):
            if key not in frame.columns:
                raise JoinError(f"join key {key!r} not in the {side} frame; its columns: {', '.join(map(str, frame.columns))}")
        lt, rt = left[key].dtype, right[key].dtype
        lk, rk = _key_kind(lt), _key_kind(rt)
        if "float" in (lk, rk):
            raise JoinError(f"join key {key!r} is floating point ({lt} vs {rt}); cast it to an integer or string first")
        if lk != rk:
            hint = ("ids above 2^63 need uint64 on both sides" if {lk, rk} == {"int", "uint"}
                    else "cast one side explicitly")
            raise JoinError(f"join key {key!r} has dtype {lt} on the left but {rt} on the right; {hint}")
        if str(lt) != str(rt):
            casts[key] = lt
    return casts


def _nullable_payload(right: Any, on: Sequence[str]) -> Any:
    """Right-side integer/bool columns as nullable dtypes, so a left join keeps exact ints."""
    if _backend.is_gpu_object(right):
        return right  # cudf columns are nullable already
    changes = {}
    for col in right.columns:
        if col in on:
            continue
        dtype = right[col].dtype
        if not isinstance(dtype, pd.api.extensions.ExtensionDtype) and dtype.kind in "iub":
            nullable = {"b": "boolean", "i": dtype.name.capitalize(), "u": "U" + dtype.name[1:].capitalize()}[dtype.kind]
            changes[col] = pd.api.types.pandas_dtype(nullable)
    if not changes:
        return right
    return right.astype(changes)


def decide_placement(be: _backend.Backend, build_bytes: int, device_budget: int | None, fraction: float) -> tuple[str, int | None, str]:
    """``(placement, budget, reason)`` for a build side of ``build_bytes``.

    Example:
        >>> from fbrapids.backend import get_backend
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
    _DECISIONS.append(decision)
    log.info("%s", decision)


def _merge_eager(left: Any, right: Any, on: list[str], how: str, suffixes: tuple[str, str]) -> Any:
    return left.merge(right, on=on, how=how, suffixes=suffixes, sort=False)


def _host_merge(left: Any, right: Any, on: list[str], how: str, suffixes: tuple[str, str]) -> Any:
    """Join on the host with pandas; the result goes back to ``left``'s backend."""
    be = _backend.backend_of(left)
    result = _merge_eager(_backend.to_host(left), _backend.to_host(right), on, how, suffixes)
    return _backend.to_backend(result, be)


def join(
    left: Any,
    other: Any,
    on: str | Sequence[str],
    how: str = "left",
    *,
    suffixes: tuple[str, str] = ("", "_right"),
    broadcast: bool | None = None,
    device_budget: int | None = None,
    fraction: float = DEFAULT_DEVICE_FRACTION,
) -> Any:
    """Hash join ``left`` (a view) with ``other`` (usually a dictionary) on ``on``.

    Args:
        left: pandas, cudf or dask frame.
        other: frame of any of those kinds.
        on: key column(s), present on both sides.
        how: ``"left"`` or ``"inner"``.
        broadcast: for dask frames, force (True) or forbid (False) a broadcast join;
            default: broadcast when ``other`` is under ``FBRAPIDS_BROADCAST_BYTES``.
        device_budget: device bytes the build side may use (default: ``fraction`` of
            the free device memory).  Above it the join runs on the host.
        fraction: share of free device memory a build side may use.

    Raises:
        JoinError: bad ``how``, missing keys, or key dtypes that cannot match.

    Example:
        >>> import pandas as pd
        >>> a = pd.DataFrame({"k": [1, 2]}); b = pd.DataFrame({"k": [2], "v": ["x"]})
        >>> join(a, b, on="k", how="inner").to_dict("list")
        {'k': [2], 'v': ['x']}
    """
    if how not in _HOWS:
        raise JoinError(f"how={how!r} is not supported; use one of {', '.join(_HOWS)}")
    keys = [on] if isinstance(on, str) else list(on)
    casts = check_keys(left, other, keys)
    be = _backend.backend_of(left)
    build_bytes = _frame_bytes(other)
    if casts:
        other = other.astype(casts)
    if how == "left":
        other = _nullable_payload(other, keys) if not _is_dask(other) else other.map_partitions(_nullable_payload, keys)
    placement, budget, reason = decide_placement(be, build_bytes, device_budget, fraction)

    if not _is_dask(left):
        if _is_dask(other):
            other = other.compute()
        decision = JoinDecision(tuple(keys), how, placement, "eager", build_bytes, budget, reason)
        _record(decision)
        if placement == "host" and be.is_gpu:
            return _host_merge(left, other, keys, how, suffixes)
        return _merge_eager(left, _backend.to_backend(other, be), keys, how, suffixes)

    use_broadcast = broadcast if broadcast is not None else build_bytes <= BROADCAST_BYTES
    strategy = "broadcast" if use_broadcast else "shuffle"
    _record(JoinDecision(tuple(keys), how, placement, strategy, build_bytes, budget, reason))
    dd = _backend.dask_dataframe()
    if placement == "host" and be.is_gpu:
        # the dictionary stays in host memory; each partition joins on the host
        host_other = other.compute() if _is_dask(other) else _backend.to_host(other)
        host_other = _backend.to_host(host_other)
        meta = _host_merge(left._meta, host_other.iloc[:0], keys, how, suffixes)
        return left.map_partitions(_host_merge, host_other, keys, how, suffixes, meta=meta)
    if not _is_dask(other):
        # dd.from_pandas takes pandas and cudf frames alike (dask_cudf.from_cudf is legacy)
        other = dd.from_pandas(_backend.to_backend(other, be), npartitions=1)
    return dd.merge(left, other, on=keys, how=how, suffixes=suffixes, broadcast=use_broadcast)
