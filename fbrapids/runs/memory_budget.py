"""A run's memory budget: what it will hold at its peak, estimated before any work from the
views' sizes, and how it runs within the budget (or why it cannot).

The budget is ``RunConfig(memory_limit=...)`` / ``--memory-limit``: bytes, a size
(``"8GB"``, ``"6GiB"``) or a share of the machine's memory (``"40%"``); by default
:data:`DEFAULT_SHARE` of the machine's memory (its cgroup limit when lower).  It covers the
whole process tree of the run: this process as it stands when the run starts, and the
workers of a local cluster when the run starts one.

What a run holds at its peak does not grow with the log's rows, only with what is in
flight (:func:`estimate`; each part from the footers of the views and the run's settings):

* **this process** as the run starts (measured), and the libraries the run loads (torch);
* **embedding tables**: each table at its bound (:func:`fbrapids.runs.disk_budget.table_bounds`)
  as the store lays it out (:func:`_table_bytes`): every row in one RAM tier, or the cache and
  host-RAM tiers' rows with the rest on the SSD tier; with the directory of its ids (which
  grows with the distinct ids, not with the rows);
* **batches**: the stream's shuffle buffer and the rows held back for calibration;
* **partitions in flight**: :data:`IN_FLIGHT` partitions of the extracted frame (views
  joined, features extracted: bytes per row from the first row group of each view);
* **held-out predictions**: a score, label and group per held-out row, and the metrics'
  sorts (these grow with the held-out day's rows);
* **held-out rows kept**: the held-out rows computed with the training pass and kept for the
  evaluation, up to :data:`HELD_KEEP_BYTES` (past it they are computed again there);
* **dictionaries**: each dictionary broadcast to the log's partitions, its table
  (:data:`BROADCAST_COPIES` times its bytes as read);
* **shuffle stores**: a shuffle on this process's threads holds up to
  :data:`SHUFFLE_STORE_BYTES` in RAM per side before it spills to disk (dask's disk shuffle).

:func:`plan_memory` turns the estimate into how the run goes: on this process's threads,
every dictionary broadcast (the budget holds them); else, on a local distributed cluster
whose worker has what is left as its memory limit (spilling to disk past it, dask's P2P
shuffle), the dictionaries that do not fit shuffled rather than broadcast; else refused
(:class:`~fbrapids.errors.MemoryBudgetError`: one line naming the budget and the parts)
before any partition is read.  An estimate near the budget (:data:`NEAR`) is said.
:func:`fbrapids.app.run_memory.memory_plan` first sizes the tables' host-RAM tier to the
budget (:func:`host_rows_within`) when every row in RAM would leave the run off this
process's threads.

Example:
    >>> parse_memory_limit("8GB"), parse_memory_limit("1.5GiB"), parse_memory_limit(4096)
    (8000000000, 1610612736, 4096)
    >>> parse_memory_limit("50%") == machine_memory() // 2
    True
    >>> parse_memory_limit("lots")
    Traceback (most recent call last):
    ...
    fbrapids.errors.MemoryBudgetError: memory limit 'lots': expected bytes, a size such as '8GB' or '6GiB', or a share of the machine's memory such as '40%'
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from fbrapids.errors import MemoryBudgetError
from fbrapids.runs.ram_budget import TableLayout
from fbrapids.runs.view_sizes import ViewSize, view_sizes
from fbrapids.runs.workload_like import WorkloadLike

if TYPE_CHECKING:  # (annotations only)
    import pyarrow as pa

    from fbrapids.kernels.expr import Expr

log = logging.getLogger(__name__)

#: the default budget: this share of the machine's memory
DEFAULT_SHARE = 0.5
#: an estimate at or above this share of the budget is said (logged as a warning)
NEAR = 0.85
#: partitions of the extracted frame held at once: one computed (its inputs beside it), one
#: queued for the stream, one being cut into batches
IN_FLIGHT = 4
#: a dictionary broadcast to every partition: its table (a copy of it, with a hash index over
#: its keys); on a cluster its persisted partitions beside it make one more
BROADCAST_COPIES = 2
#: what dask's disk shuffle (partd) keeps in RAM per store before it spills to its files
SHUFFLE_STORE_BYTES = 10 ** 9
#: torch and the compiled kernels, loaded by the run after it starts
LIBRARIES_BYTES = 600 << 20
#: a dask worker process with pandas, pyarrow, dask and fbrapids imported
WORKER_BASE_BYTES = 450 << 20
#: per held-out row: the score, the label and the group, and the metrics' sorts of them
PREDICTION_ROW_BYTES = 64
#: the held-out partitions computed beside the training pass (every step before the train /
#: held-out split run once for both) are kept for the evaluation up to this many bytes; past
#: it, those with rows are computed again there (``fbrapids.app.pipeline.TimedPartitions.keeps``).
#: The demo's 200,000 rows keep 15 MB
HELD_KEEP_BYTES = 256 << 20
#: per extracted feature and row: a scalar, and a list (token ids, crosses: ~80 B measured)
SCALAR_FEATURE_BYTES, LIST_FEATURE_BYTES = 8, 96
#: per slot of an embedding table's directory (its arrays double from 1,024 slots as ids
#: arrive): the id, its record and flags, filled when made, and the id hash map's share
#: (measured: 102 B per id at 1M ids, 125 B per id at 3M, whose 4,194,304 slots are 89 B each)
DIRECTORY_ID_BYTES = 100
DIRECTORY_FIRST_SLOTS = 1 << 10
#: per tier slot beyond its floats: the slot map's owner, free list and dirty flag, and the
#: cache's id -> slot map (measured: 1M ids in one RAM tier of 2,097,152 slots hold 245.6 MB)
SLOT_ROW_BYTES = 36
#: per row on the SSD tier, in RAM: its place in the file, and the file's pages mapped in as it is
#: read and written (measured: 738k rows past 262k in RAM held 19 MB)
SSD_ROW_BYTES = 24
#: a growable cache (the one RAM tier) grows to this many times its slots
#: (:data:`fbrapids.trainers.sparse.hierarchy.GROWTH`)
GROWTH = 4
#: a growable cache over reserved address space starts at this many slots at most
#: (:data:`fbrapids.trainers.sparse.tiers.IN_PLACE_START`)
IN_PLACE_START = 1 << 14
#: the fewest host-RAM rows per table a budget sizes the tiers to
MIN_HOST_ROWS = 1 << 14
#: the share of the room the rest leaves them that a budget sizes the tables' tiers to
SIZED_SHARE = 0.95
_SIZES = {"": 1, "b": 1, "k": 10 ** 3, "kb": 10 ** 3, "m": 10 ** 6, "mb": 10 ** 6, "g": 10 ** 9, "gb": 10 ** 9,
          "t": 10 ** 12, "tb": 10 ** 12, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def machine_memory() -> int:
    """The memory this process may use: the machine's, or its cgroup's limit when lower.

    Example:
        >>> machine_memory() > 0
        True
    """
    total = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return total


def default_memory_limit() -> int:
    """:data:`DEFAULT_SHARE` of :func:`machine_memory`.

    Example:
        >>> default_memory_limit() == int(machine_memory() * DEFAULT_SHARE)
        True
    """
    return int(machine_memory() * DEFAULT_SHARE)


def parse_memory_limit(value: int | str | None) -> int:
    """A memory limit in bytes: an int, a size (``"8GB"``, ``"512MiB"``), a share of the
    machine's memory (``"40%"``), or None for :func:`default_memory_limit` (module doc)."""
    if value is None:
        return default_memory_limit()
    bad = MemoryBudgetError(f"memory limit {value!r}: expected bytes, a size such as '8GB' or '6GiB', or a share of "
                            "the machine's memory such as '40%'")
    if isinstance(value, bool):
        raise bad
    if isinstance(value, int):
        if value < 1:
            raise bad
        return value
    if not isinstance(value, str):
        raise bad
    text = value.strip().lower().replace(" ", "")
    try:
        if text.endswith("%"):
            share = float(text[:-1])
            if not 0 < share <= 100:
                raise bad
            return int(machine_memory() * share / 100)
        number = text.rstrip("kmgtib")
        unit = text[len(number):]
        if unit not in _SIZES:
            raise bad
        out = int(float(number) * _SIZES[unit])
    except ValueError:
        raise bad from None
    if out < 1:
        raise bad
    return out


def human(n: float) -> str:
    """Bytes as GiB / MiB with one decimal.

    Example:
        >>> human(3 << 30), human(5 << 20)
        ('3.0 GiB', '5.0 MiB')
    """
    return f"{n / 2**30:.1f} GiB" if abs(n) >= 1 << 30 else f"{n / 2**20:.1f} MiB"


def feature_row_bytes(features: Mapping[str, Expr | str], schema: Mapping[str, pa.DataType]) -> int:
    """Bytes per row of the extracted ``features``: :data:`SCALAR_FEATURE_BYTES` for a
    scalar output, :data:`LIST_FEATURE_BYTES` for a list (typed over ``schema``, column ->
    Arrow type; a feature that cannot be typed there, a history among them, counts as a list).

    Example:
        >>> import pyarrow as pa
        >>> from fbrapids import ops
        >>> feature_row_bytes({"h": ops.hash_bucket("q", 8), "t": ops.split("q", " ")}, {"q": pa.large_string()})
        104
    """
    from fbrapids.errors import FbrapidsError
    from fbrapids.kernels import types
    from fbrapids.kernels.plan import build_plan

    typed = {name: k for name, t in schema.items() if (k := types.from_arrow(t)) is not None}  # (else: a list, below)
    total = 0
    for name, expr in features.items():
        try:
            plan = build_plan({name: expr}, typed)
            listy = types.is_var(plan.nodes[plan.outputs[name]].type) and "list" in plan.nodes[plan.outputs[name]].type
        except (FbrapidsError, KeyError, TypeError, ValueError):
            listy = True
        total += LIST_FEATURE_BYTES if listy else SCALAR_FEATURE_BYTES
    return total


@dataclass
class MemoryEstimate:
    """A run's estimated peak, by part (bytes), and what it was worked out from."""

    parts: dict[str, int] = field(default_factory=dict)
    dictionaries: dict[str, int] = field(default_factory=dict)  #: dictionary view -> broadcast bytes
    partition_rows: int = 0
    row_bytes: float = 0.0  #: bytes per row of the extracted frame

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def describe(self) -> str:
        return ", ".join(f"{k} {human(v)}" for k, v in self.parts.items() if v)


@dataclass(frozen=True)
class RunShape:
    """What of a run's settings its memory depends on (:func:`estimate`)."""

    dense: Sequence[str]
    sparse: Sequence[str]
    features: Mapping[str, Expr | str]  #: the extracted features (name -> expression)
    table_rows: Mapping[str, int]  #: per sparse feature: the most ids its table holds (0: unknown)
    cache_rows: int
    host_rows: int | None
    row_floats: int  #: floats per table row (the embedding and its optimizer state)
    batch_rows: int  #: rows the stream holds as batches (its shuffle buffer, the rows held back)
    partition_rows: int  #: rows per partition of the log as the run reads it
    history_keys: int = 0  #: keys the history features shuffle the log by (two shuffles each)


def _grown(first: int, rows: int, growth: int = 0) -> int:
    """The slots of an array that starts at ``first`` and grows ``growth`` times (default:
    :data:`GROWTH`, a growable cache's) until it holds ``rows``.

    Example:
        >>> _grown(1000, 900), _grown(1000, 1001), _grown(1000, 20_000), _grown(1024, 3000, 2)
        (1000, 4000, 64000, 4096)
    """
    slots = max(int(first), 1)
    while slots < rows:
        slots *= growth or GROWTH
    return slots


def table_ids(shape: RunShape, log_rows: int) -> dict[str, int]:
    """The most ids each sparse feature's table holds: its bound, else one per row of the log."""
    return {name: int(shape.table_rows.get(name, 0)) if int(shape.table_rows.get(name, 0)) > 1 else log_rows
            for name in shape.sparse}


def _table_bytes(shape: RunShape, log_rows: int, in_place: bool = False) -> int:
    """Every table at its most ids (:func:`table_ids`), with the directory of its ids
    (:data:`DIRECTORY_ID_BYTES` per slot).  One RAM tier (``host_rows`` None): every row in a
    growable cache whose slot map covers its grown slots (from ``cache_rows``; in place, a
    table that fits :data:`IN_PLACE_START` slots holds no more), and, unless ``in_place``,
    the largest table's rows once more while it grows (its old and new arrays side by side).
    A store's arrays grow in place where the system grants their address space
    (:mod:`fbrapids.trainers.sparse.reserved`; not under strict overcommit), where they do not
    they are copied: the plan counts the copy, a margin in place.  Tiers: the cache tier and
    the slot maps of both RAM tiers, written when made; the host tier's rows as they fill; the
    rows past them live on the SSD tier (:data:`SSD_ROW_BYTES` each in RAM).

    Example:
        >>> shape = RunShape([], ["a", "b"], {}, {"a": 1000, "b": 50_000}, cache_rows=1 << 12, host_rows=None,
        ...                  row_floats=17, batch_rows=0, partition_rows=0)
        >>> _table_bytes(shape, 10 ** 6)  # 66,560 directory slots, 51,000 rows of 68 B, 69,632 slots, 50,000 rows growing
        16030752
        >>> _table_bytes(shape, 10 ** 6, in_place=True)  # the same grown in place: no copy
        12630752
        >>> tiered = RunShape([], ["a", "b"], {}, {"a": 1000, "b": 50_000}, cache_rows=1 << 12, host_rows=1 << 13,
        ...                   row_floats=17, batch_rows=0, partition_rows=0)
        >>> _table_bytes(tiered, 10 ** 6) < _table_bytes(shape, 10 ** 6)
        True
    """
    row = 4 * shape.row_floats
    ids = table_ids(shape, log_rows)
    directory = sum(_grown(DIRECTORY_FIRST_SLOTS, n, 2) for n in ids.values()) * DIRECTORY_ID_BYTES
    if shape.host_rows is None:
        # in place a table starts at IN_PLACE_START slots at most, and past them grows as from cache_rows
        start = min(shape.cache_rows, IN_PLACE_START)
        grown = sum(start if in_place and n <= start else _grown(shape.cache_rows, n) for n in ids.values())
        copied = 0 if in_place else max(ids.values(), default=0) * row
        return directory + sum(ids.values()) * row + grown * SLOT_ROW_BYTES + copied
    total = directory
    for n in ids.values():
        cache = min(shape.cache_rows, n)
        host = min(shape.host_rows, max(n - cache, 0))
        total += (shape.cache_rows + shape.host_rows) * SLOT_ROW_BYTES + (cache + host) * row
        total += (n - cache - host) * SSD_ROW_BYTES
    return total


def host_rows_within(shape: RunShape, log_rows: int, room: int) -> int | None:
    """The most host-RAM rows per table (at least :data:`MIN_HOST_ROWS`) whose tiers hold
    the tables in ``room`` bytes, the rows past them on the SSD tier; None when even the
    fewest do not fit.

    Example:
        >>> shape = RunShape([], ["a"], {}, {"a": 10 ** 6}, cache_rows=1 << 12, host_rows=None,
        ...                  row_floats=17, batch_rows=0, partition_rows=0)
        >>> n = host_rows_within(shape, 10 ** 6, 150 << 20)
        >>> n, _table_bytes(replace(shape, host_rows=n), 10 ** 6) <= 150 << 20
        (351264, True)
        >>> host_rows_within(shape, 10 ** 6, 10 << 20) is None
        True
    """
    def need(n: int) -> int:
        return _table_bytes(replace(shape, host_rows=n), log_rows)

    lo, hi = MIN_HOST_ROWS, max(table_ids(shape, log_rows).values(), default=MIN_HOST_ROWS)
    if need(lo) > room:
        return None
    while lo < hi:  # the most rows that fit: need() grows with them
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if need(mid) <= room else (lo, mid - 1)
    return lo


def _batch_row_bytes(shape: RunShape, schema: Mapping[str, pa.DataType]) -> int:
    """A batch row: the dense floats, the label and group, each sparse feature's ids and offset."""
    listy = {n for n in shape.sparse
             if n in shape.features and feature_row_bytes({n: shape.features[n]}, schema) > SCALAR_FEATURE_BYTES}
    return 4 * len(shape.dense) + 16 + sum(8 + (LIST_FEATURE_BYTES if n in listy else 8) for n in shape.sparse)


def estimate(w: WorkloadLike, shape: RunShape, held_out_rows: int, baseline: int, libraries: int = LIBRARIES_BYTES,
             sizes: tuple[dict[str, ViewSize], dict[str, pa.DataType]] | None = None) -> MemoryEstimate:
    """The peak of a run of workload ``w`` with ``shape`` by part (module doc), from the views'
    footers (:func:`fbrapids.runs.view_sizes.view_sizes`); ``baseline``: the bytes of the process tree as it starts."""
    sizes_by_view, schema = sizes if sizes is not None else view_sizes(w)
    log_size = sizes_by_view.get(w.log.name, ViewSize(0, 0.0))
    joined = [j for j in w.joins if j.view in sizes_by_view]
    sorted_views = {v.name for v in w.views if v.sorted_by is not None}
    dictionaries = {j.view: sizes_by_view[j.view].bytes for j in joined if j.view not in sorted_views}
    row_bytes = (log_size.row_bytes + sum(sizes_by_view[j.view].row_bytes for j in joined)
                 + feature_row_bytes(shape.features, schema))
    out = MemoryEstimate(dictionaries=dictionaries, partition_rows=min(shape.partition_rows, max(log_size.rows, 1)),
                         row_bytes=row_bytes)
    out.parts["this process"] = baseline
    out.parts["libraries"] = libraries
    out.parts["embedding tables"] = _table_bytes(shape, log_size.rows)
    out.parts["batches"] = min(shape.batch_rows, log_size.rows) * _batch_row_bytes(shape, schema)
    out.parts["partitions in flight"] = int(IN_FLIGHT * min(shape.partition_rows, max(log_size.rows, 1)) * row_bytes)
    out.parts["held-out predictions"] = held_out_rows * PREDICTION_ROW_BYTES
    out.parts["held-out rows kept"] = int(min(HELD_KEEP_BYTES, held_out_rows * row_bytes))
    out.parts["dictionaries"] = BROADCAST_COPIES * sum(dictionaries.values())
    out.parts["shuffle stores"] = 2 * shape.history_keys * min(SHUFFLE_STORE_BYTES, int(log_size.rows * 64))
    return out


@dataclass
class MemoryPlan:
    """How a run goes within its ``budget`` (:func:`plan_memory`)."""

    budget: int
    estimate: MemoryEstimate
    scheduler: str  #: ``"threads"`` (this process), ``"local cluster"`` (started for the run) or ``"client"``
    #: a dictionary of at most this many bytes is broadcast, a larger one shuffled (None: the
    #: join's own limit, on a cluster the run was given)
    broadcast_bytes: int | None
    partition_rows: int  #: rows per partition of the log
    worker_memory: int | None = None  #: the local cluster's worker memory limit
    source: str = "default"  #: where the budget came from
    default_rows: int = 0  #: rows per partition without a budget (more than ``partition_rows``: the budget cut them)
    #: where the embedding rows live (a :class:`~fbrapids.runs.ram_budget.TableLayout`; None: the store decides)
    layout: TableLayout | None = None

    @property
    def near(self) -> bool:
        return self.estimate.total >= NEAR * self.budget

    def describe(self) -> str:
        """One line: the budget, the estimate and how the run goes.

        Example:
            >>> e = MemoryEstimate({"embedding tables": 1 << 30}, partition_rows=1000)
            >>> print(MemoryPlan(4 << 30, e, "threads", 1 << 30, 1000).describe())
            memory: estimated peak 1.0 GiB of a budget of 4.0 GiB (default): on this process's threads, dictionaries up to 1.0 GiB broadcast, partitions of 1,000 rows (embedding tables 1.0 GiB)
        """
        how = {"threads": "on this process's threads", "client": "on the given dask cluster",
               "local cluster": f"on a local dask cluster, its worker limited to {human(self.worker_memory or 0)} "
                                "(spilling to disk past it)"}[self.scheduler]
        limit = "the join's own limit" if self.broadcast_bytes is None else human(self.broadcast_bytes)
        return (f"memory: estimated peak {human(self.estimate.total)} of a budget of {human(self.budget)} "
                f"({self.source}): {how}, dictionaries up to {limit} broadcast, partitions of "
                f"{self.partition_rows:,} rows ({self.estimate.describe()})")

    def summary(self) -> dict[str, object]:
        """The plan as JSON-ready values (the run's summary)."""
        return {"budget_bytes": self.budget, "budget_from": self.source, "estimate_bytes": self.estimate.total,
                "estimate": dict(self.estimate.parts), "scheduler": self.scheduler,
                "broadcast_bytes": self.broadcast_bytes, "partition_rows": self.partition_rows,
                "worker_memory_bytes": self.worker_memory,
                "host_rows": None if self.layout is None or self.layout.one_ram_tier else self.layout.host_rows}


#: the fewest rows a partition is cut to when the budget asks for smaller ones
MIN_PARTITION_ROWS = 1 << 14
#: the most bytes of a partition of the extracted frame: partitions are sized by bytes, so
#: their count, not their size, grows with the log (and smaller still when the budget asks)
PARTITION_BYTES = 192 << 20
_FLEXIBLE = ("partitions in flight", "dictionaries", "shuffle stores")


def _refusal(need: int, parts: Mapping[str, int], budget: int, source: str) -> MemoryBudgetError:
    listed = ", ".join(f"{k} {human(v)}" for k, v in parts.items() if v)
    return MemoryBudgetError(
        f"this run needs at least {human(need)} of memory ({listed}), over its memory budget of {human(budget)} "
        f"({source}); nothing was read. Raise the budget (--memory-limit, RunConfig.memory_limit), or hold less: "
        "fewer host_rows / cache_rows per embedding table, a smaller batch size")


def plan_memory(est: MemoryEstimate, budget: int, source: str = "default", client: bool = False) -> MemoryPlan:
    """How a run with estimate ``est`` goes within ``budget`` (module doc); ``client``: the
    run computes on a dask cluster it was given (whose workers' memory is theirs).

    Raises:
        MemoryBudgetError: when even the smallest partitions, every dictionary shuffled on a
            local cluster, do not fit (one line naming the budget and the parts).

    Example:
        >>> e = MemoryEstimate({"this process": 1 << 30, "partitions in flight": 1 << 28, "dictionaries": 3 << 28},
        ...                    {"users": 1 << 28}, partition_rows=1 << 18, row_bytes=256)
        >>> [plan_memory(e, b).scheduler for b in (8 << 30, 3 << 29)]
        ['threads', 'local cluster']
        >>> plan_memory(e, 1 << 30)
        Traceback (most recent call last):
        ...
        fbrapids.errors.MemoryBudgetError: this run needs at least 1.5 GiB of memory (this process 1.0 GiB, a dask worker 450.0 MiB, partitions in flight 24.0 MiB), over its memory budget of 1.0 GiB (default); nothing was read. Raise the budget (--memory-limit, RunConfig.memory_limit), or hold less: fewer host_rows / cache_rows per embedding table, a smaller batch size
    """
    fixed = {k: v for k, v in est.parts.items() if k not in _FLEXIBLE}
    per_row = IN_FLIGHT * est.row_bytes
    rows = max(1, min(est.partition_rows, int(PARTITION_BYTES // max(est.row_bytes, 1.0))))
    smallest = min(rows, MIN_PARTITION_ROWS)
    room = budget - sum(fixed.values())
    if client:  # the partitions are computed on the cluster; this process holds the stream's
        if room < per_row * smallest:
            raise _refusal(int(sum(fixed.values()) + per_row * smallest), {**fixed, "partitions in flight": int(per_row * smallest)}, budget, source)
        rows = int(min(rows, room // per_row))
        parts = {**fixed, "partitions in flight": int(per_row * rows)}
        return _planned(est, parts, budget, source, "client", None, rows, None)
    local_need = est.parts.get("dictionaries", 0) + est.parts.get("shuffle stores", 0)
    if room >= local_need + per_row * smallest:  # threads, every dictionary broadcast
        rows = int(min(rows, (room - local_need) // per_row))
        parts = {**fixed, "partitions in flight": int(per_row * rows), "dictionaries": est.parts.get("dictionaries", 0),
                 "shuffle stores": est.parts.get("shuffle stores", 0)}
        return _planned(est, parts, budget, source, "threads", int((room - per_row * rows) // BROADCAST_COPIES), rows,
                        None)
    # a local cluster: its worker computes the partitions (spilling past its limit); this
    # process holds the two the stream has
    worker = int(room - per_row * smallest / 2)
    if worker < WORKER_BASE_BYTES + per_row * smallest:
        need = int(sum(fixed.values()) + WORKER_BASE_BYTES + 1.5 * per_row * smallest)
        raise _refusal(need, {**fixed, "a dask worker": WORKER_BASE_BYTES,
                              "partitions in flight": int(1.5 * per_row * smallest)}, budget, source)
    rows = int(min(rows, (worker - WORKER_BASE_BYTES) // (2 * per_row)))
    rows = max(rows, smallest)
    parts = {**fixed, "a dask worker (limit)": worker, "partitions in this process": int(per_row * rows / 2)}
    broadcast = max(0, int((worker - WORKER_BASE_BYTES - per_row * rows) // (BROADCAST_COPIES + 1)))
    return _planned(est, parts, budget, source, "local cluster", broadcast, rows, worker)


def _planned(est: MemoryEstimate, parts: dict[str, int], budget: int, source: str, scheduler: str,
             broadcast: int | None, rows: int, worker: int | None) -> MemoryPlan:
    planned = MemoryEstimate(parts, est.dictionaries, rows, est.row_bytes)
    plan = MemoryPlan(budget, planned, scheduler, broadcast, rows, worker, source, est.partition_rows)
    if plan.near:
        log.warning("memory: the estimated peak %s is %.0f%% of the budget %s (%s): %s; a larger --memory-limit "
                    "leaves room", human(planned.total), 100 * planned.total / budget, human(budget), source,
                    planned.describe())
    return plan
