"""What a training run will write to disk, estimated before it starts from what bounds each
embedding table.

An embedding table holds one row per distinct value of its feature.  Sizing every table by
the log's rows (one new value per impression) is the worst case, and at 16M rows it asked
for 62 GiB where the run writes a few.  Each table is bounded by what its feature can hold:

* a hashed feature (``hash_bucket``, ``split`` / ``ngrams`` / ``cross`` with ``buckets``):
  its buckets;
* a cast to a small integer type: that type's values (``i8``: 256); ``bucketize``: its
  boundaries plus one;
* a raw column of a dictionary view (users, ads: ``user_id``, ``advertiser_id``): that
  view's rows, plus one for the join's default of a miss (ids of the log absent from the
  dictionary are not counted: an estimate, not a guarantee);
* an integer column: the span of its values in the files' statistics (``max - min + 1``);
* ``overlap_count`` of two lists, one of them ``first_k`` / ``last_k``: ``k + 1`` counts and
  null (the demo's ``qt_first_eq``: 3 rows, where one row per impression asked for 5 GB of
  directory at 64M rows);
* anything else: one row per impression.

The smallest bound that applies is taken.  **Known limit:** one row per impression is no
bound on a feature whose value is a list (a bag of tokens, a cross of two bags: several ids
an impression), yet it caps every bound here: at 200,000 rows the demo's ``qxt_cross_h``
is bounded at 200,000 and holds 774,023 rows (its 2^20 buckets do bound it, but taken as
they are they over-ask about 30x on a small log; ``tests/runs/test_disk_budget.py``).

:func:`disk_need` turns the bounds into the bytes of the SSD tier (its file grows by
doubling from 4,096 rows) and of ``keep + 1`` checkpoints (``keep`` kept while the next is
written).

Example:
    >>> import tempfile
    >>> from fbrapids import ops
    >>> from fbrapids.datasets.synthetic.generate import generate
    >>> d = tempfile.mkdtemp(); _ = generate(1000, d)
    >>> b = table_bounds(d, ["user_id", "h", "slot"], {"h": ops.hash_bucket("city", 64)})
    >>> b["user_id"].rows, b["h"].rows, b["slot"].rows
    (101, 64, 9)
    >>> b["h"].why
    '64 hash buckets'
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:  # (annotations only: the kernels load when a bound is asked for)
    from fbrapids.kernels.expr import Expr

log = logging.getLogger(__name__)

#: the views of a workload folder: the log, and the dictionaries joined to it
LOG_VIEWS = ("impressions", "basic")
DICTIONARY_VIEWS = ("users", "ads")
SSD_FIRST_ROWS = 1 << 12  #: the SSD tier file's first reservation (fbrapids.trainers.sparse.ssd.SsdTier)
CHECKPOINT_ROW_OVERHEAD = 24  #: bytes per table row in a checkpoint beyond the row itself (id, slot)


@dataclass(frozen=True)
class TableBound:
    """An embedding table's most rows, and what bounds it."""

    rows: int
    why: str


@dataclass
class _ColumnFacts:
    dictionary_rows: int | None = None
    lo: int | None = None
    hi: int | None = None
    spans: bool = True  # every file holding it has integer statistics


def _column_facts(data_dir: Path) -> tuple[int, dict[str, _ColumnFacts]]:
    """The log's rows, and per column: the rows of a dictionary view holding it, and the
    range of its integer values from the footers' statistics."""
    from fbrapids.views.parquet import parquet_file

    facts: dict[str, _ColumnFacts] = {}
    rows = 0
    for view in (*LOG_VIEWS, *DICTIONARY_VIEWS):
        path = data_dir / f"{view}.parquet"
        if not path.is_file():
            continue
        meta = parquet_file(str(path)).metadata
        if view == LOG_VIEWS[0]:
            rows = meta.num_rows
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        for c, name in enumerate(names):
            f = facts.setdefault(name, _ColumnFacts())
            if view in DICTIONARY_VIEWS:
                f.dictionary_rows = min(meta.num_rows, f.dictionary_rows or meta.num_rows)
            for g in range(meta.num_row_groups):
                st = meta.row_group(g).column(c).statistics
                if st is None or not st.has_min_max or not isinstance(st.min, int) or isinstance(st.min, bool):
                    f.spans = False
                    break
                f.lo = st.min if f.lo is None else min(f.lo, st.min)
                f.hi = st.max if f.hi is None else max(f.hi, st.max)
    return rows, facts


def _column_bound(name: str, facts: Mapping[str, _ColumnFacts]) -> TableBound | None:
    f = facts.get(name)
    if f is None:
        return None
    found = []
    if f.dictionary_rows is not None:  # + the join's default for a miss
        found.append(TableBound(f.dictionary_rows + 1, f"{f.dictionary_rows:,} dictionary rows + 1"))
    if f.spans and f.lo is not None and f.hi is not None:  # a dictionary's column also takes the join's default for a miss
        extra = 1 if f.dictionary_rows is not None else 0
        found.append(TableBound(int(f.hi) - int(f.lo) + 1 + extra, f"values {f.lo} to {f.hi}"
                                + (" + 1 default" if extra else "")))
    return min(found, key=lambda b: b.rows) if found else None


def expression_bound(expr: Expr | str, facts: Mapping[str, _ColumnFacts] | None = None) -> TableBound | None:
    """The most distinct values ``expr`` can take, or None when nothing bounds it: what its
    operator declares (:meth:`~fbrapids.kernels.operator.Operator.distinct_bound`).

    Example:
        >>> from fbrapids import ops
        >>> expression_bound(ops.cast(ops.bucketize("age", [0, 18, 65]), "i8"))
        TableBound(rows=4, why='3 boundaries + 1')
        >>> expression_bound(ops.cross("a", "b", buckets=1 << 20)).rows
        1048576
        >>> expression_bound(ops.overlap_count(ops.first_k("q", 1), ops.first_k("t", 3)))
        TableBound(rows=3, why='0 to 1 elements in common, or null')
    """
    from fbrapids.kernels import as_expr, find_operator
    from fbrapids.kernels.expr import Call, Col
    from fbrapids.kernels.operator import Sizes, buckets_bound

    e = as_expr(expr)
    if isinstance(e, Col):
        return _column_bound(e.name, facts or {})
    if not isinstance(e, Call):
        return None
    op = find_operator(e.op)
    sizes = Sizes(values=lambda a: _as_tuple(expression_bound(a, facts)), length=_list_length)
    found = op.distinct_bound(e, sizes) if op is not None else buckets_bound(e)  # (unregistered: its buckets)
    return TableBound(*found) if found is not None else None


def _as_tuple(b: TableBound | None) -> tuple[int, str] | None:
    return (b.rows, b.why) if b is not None else None


def _list_length(expr: Expr) -> int | None:
    """The most elements a list ``expr`` holds (what its operator declares), or None."""
    from fbrapids.kernels import find_operator
    from fbrapids.kernels.expr import Call

    if not isinstance(expr, Call):
        return None
    op = find_operator(expr.op)
    return op.list_length(expr) if op is not None else None


def table_bounds(data_dir: str | os.PathLike, sparse: Sequence[str],
                 features: Mapping[str, Expr | str]) -> dict[str, TableBound]:
    """The bound of each sparse feature's table (module doc): ``features`` maps the
    extracted ones to their expressions; the others are columns of the views."""
    rows, facts = _column_facts(Path(data_dir))
    out = {}
    for name in sparse:
        bound = expression_bound(features[name], facts) if name in features else _column_bound(name, facts)
        if bound is None or bound.rows > rows:
            bound = TableBound(max(rows, 1), f"{rows:,} impressions (nothing smaller bounds it)")
        out[name] = bound
    return out


def ssd_file_rows(rows: int) -> int:
    """Rows the SSD tier's file reserves to hold ``rows`` (it doubles from 4,096).

    Example:
        >>> ssd_file_rows(10), ssd_file_rows(5000)
        (4096, 8192)
    """
    cap = SSD_FIRST_ROWS
    while cap < rows:
        cap *= 2
    return cap


def disk_need(bounds: Mapping[str, TableBound], row_bytes: int, dense_bytes: int, keep: int | None,
              ssd: bool, checkpoints: bool) -> dict[str, int]:
    """Bytes the run writes, by what: the SSD tier (``ssd``), and ``keep + 1`` checkpoints
    (``checkpoints``; each: every table row with its id, and the dense weights with the
    optimizer's state, three times their size); ``keep=0``: only the final checkpoint (a run
    without periodic ones writes no other).

    Example:
        >>> disk_need({"t": TableBound(5000, "")}, 68, 1000, keep=3, ssd=True, checkpoints=True)
        {'SSD tier': 557056, '4 checkpoints (3 kept + 1 being written)': 1852000}
        >>> disk_need({"t": TableBound(5000, "")}, 68, 1000, keep=0, ssd=False, checkpoints=True)
        {'the final checkpoint': 463000}
    """
    need: dict[str, int] = {}
    if ssd:
        need["SSD tier"] = sum(ssd_file_rows(b.rows) for b in bounds.values()) * row_bytes
    if checkpoints:
        one = sum(b.rows for b in bounds.values()) * (row_bytes + CHECKPOINT_ROW_OVERHEAD) + 3 * dense_bytes
        if keep is None:
            need["checkpoints (all kept)"] = one
        elif keep == 0:
            need["the final checkpoint"] = one
        else:
            need[f"{keep + 1} checkpoints ({keep} kept + 1 being written)"] = (keep + 1) * one
    return need


def _tree_bytes(path: Path) -> int:
    from fbrapids.files.iostats import tree_bytes

    return sum(tree_bytes(path).values())


def freeable(work_dir: str | os.PathLike | None) -> str:
    """What could be freed for a run, with sizes: checkpoints older than the newest under
    ``work_dir/checkpoints``, the SSD tier ``work_dir/store`` (a run that does not resume
    rebuilds it), and the compiled-kernel cache (rebuilt on demand).

    Example:
        >>> import tempfile
        >>> freeable(tempfile.mkdtemp()).startswith("could be freed: ")
        True
    """
    from fbrapids.kernels.cache import cache_dir
    from fbrapids.runs.workdir import human_bytes

    parts = []
    if work_dir is not None:
        work = Path(work_dir)
        steps = sorted((p for p in (work / "checkpoints").glob("step-*") if p.is_dir()), reverse=True)
        if len(steps) > 1:
            parts.append(f"{len(steps) - 1} older checkpoints in {work / 'checkpoints'} "
                         f"({human_bytes(sum(_tree_bytes(p) for p in steps[1:]))}; the newest, {steps[0].name}, "
                         "is what --resume needs)")
        if (work / "store").is_dir():
            parts.append(f"the SSD tier {work / 'store'} ({human_bytes(_tree_bytes(work / 'store'))}; "
                         "rebuilt by a run without --resume)")
    cache = cache_dir()
    if cache.is_dir():
        parts.append(f"the kernel cache {cache} ({human_bytes(_tree_bytes(cache))}; rebuilt when needed)")
    return "could be freed: " + ("; ".join(parts) if parts else "nothing fbrapids wrote (free space on that disk)")
