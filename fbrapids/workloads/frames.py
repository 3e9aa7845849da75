"""A :class:`~fbrapids.workloads.Workload`'s lazy frames: views read, cleaned, joined, the
features extracted, and the rows split into training and held out.

Example:
    >>> import tempfile
    >>> from fbrapids.datasets.synthetic.generate import generate
    >>> from fbrapids.datasets import synthetic
    >>> d = tempfile.mkdtemp(); _ = generate(3000, d)
    >>> merged, parts = feature_frame(synthetic.workload(d))
    >>> train, test = split_frame(synthetic.workload(d), merged)
    >>> len(train) + len(test) == len(merged), sorted(parts)
    (True, ['joined', 'log', 'views'])
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from fbrapids.errors import WorkloadError
from fbrapids.frames.backend import is_dask_frame
from fbrapids.views.rows import filter_rows
from fbrapids.workloads.spec import HELD_OUT, Join, View, Workload

if TYPE_CHECKING:  # (annotations only: no import at run time)
    import dask.dataframe as dd

    from fbrapids.frames.backend import FrameLike
    from fbrapids.ops import ExprLike
    from fbrapids.workloads.split_check import SplitCheck

log = logging.getLogger(__name__)

DAY = 86400
# rows per streamed partition, whatever the data's size: memory in flight is a few partitions
# (extracted features with token lists take ~1.5 KB a row), so it must not grow with the rows
PARTITION_ROWS = 1 << 18


def partition_rows() -> int:
    """The most rows of a partition of a sorted view: dask config ``fbrapids.partition-rows``
    (a run sets it from its memory budget: :mod:`fbrapids.runs.memory_budget`), else
    :data:`PARTITION_ROWS`.

    Example:
        >>> partition_rows() == PARTITION_ROWS
        True
    """
    import dask

    return int(dask.config.get("fbrapids.partition-rows", PARTITION_ROWS))


def _lazy(frame: FrameLike, where: str) -> dd.DataFrame:
    """``frame``, a view as :func:`~fbrapids.views.read.read_view` reads it here: a dask frame."""
    if not is_dask_frame(frame):
        raise WorkloadError(f"{where}: read as a {type(frame).__name__}, not a dask frame")
    return frame


def _budgeted_rows() -> int | None:
    """``fbrapids.partition-rows`` when a run set it (its memory budget), else None."""
    import dask

    value = dask.config.get("fbrapids.partition-rows", None)
    return None if value is None else int(value)


def index_as_column(frame: FrameLike) -> FrameLike:
    """``frame`` with its (named) index as its first column and a fresh default index.

    Example:
        >>> import pandas as pd
        >>> index_as_column(pd.DataFrame({"a": [1]}, index=pd.Index([7], name="k"))).to_dict("list")
        {'k': [7], 'a': [1]}
    """
    return frame.reset_index()


def _rows_before(part: FrameLike, column: str, cutoff: int | None, before: bool) -> FrameLike:
    keep = part[column] < cutoff
    return filter_rows(part, keep if before else ~keep)  # a partition all on one side: not copied


def split_by_time(frame: FrameLike, column: str, cutoff: int | None) -> tuple[FrameLike, FrameLike]:
    """Rows with ``column < cutoff`` for training, the rest held out.

    On dask each partition is filtered by its own rows (``map_partitions``): a dask-level
    ``frame[mask]`` aligns the mask by index, which partition-local indexes (duplicate
    labels across partitions) break at 1M rows.

    Example:
        >>> import pandas as pd
        >>> tr, te = split_by_time(pd.DataFrame({"ts": [1, 5, 9]}), "ts", 5)
        >>> tr["ts"].tolist(), te["ts"].tolist()
        ([1], [5, 9])
    """
    if is_dask_frame(frame):
        return (frame.map_partitions(_rows_before, column, cutoff, True, meta=frame._meta),
                frame.map_partitions(_rows_before, column, cutoff, False, meta=frame._meta))
    return frame[frame[column] < cutoff], frame[frame[column] >= cutoff]


def _marked(part: FrameLike, held_out: bool) -> FrameLike:
    return part.assign(**{HELD_OUT: held_out})


def _marked_rows(part: FrameLike, offset: int, cutoff: int) -> FrameLike:
    import numpy as np

    return part.assign(**{HELD_OUT: np.arange(offset, offset + len(part)) >= cutoff})


def _read(w: Workload, view: View, paths: tuple[str, ...], backend: str | None) -> FrameLike:
    from fbrapids.views.read import read_view

    files = [w.resolve(p) for p in paths]
    options = dict(view.options)
    if _budgeted_rows() is not None and "row_groups_per_partition" not in options:
        options.setdefault("partition_rows", _budgeted_rows())  # a run's budget caps its partitions
    try:
        return read_view(files if len(files) > 1 else files[0], backend=backend, **options)
    except WorkloadError:
        raise
    except Exception as e:
        if type(e).__name__ == "ViewError":
            raise WorkloadError(f"{w.where}: view {view.name!r}: {e}") from e
        raise


def read_views(w: Workload, backend: str | None = None, check: SplitCheck | None = None) -> dict[str, FrameLike]:
    """Each view of ``w`` as a lazy frame; views ``sorted_by`` a key indexed by it with
    known divisions (in partitions of whole row groups, at most :data:`PARTITION_ROWS` rows:
    the row groups per partition are the first sorted view's, so they line up); the log read
    from its files in ``check``'s order (:func:`~fbrapids.workloads.split_check.check_split`,
    made here when not given), its time column read as UTC epoch seconds in its form, and
    marked held out or not (``fraction`` / ``files`` splits: :data:`HELD_OUT`)."""
    from fbrapids.views.divisions import groups_per_partition, index_by_sorted_key
    from fbrapids.views.parquet import parquet_file
    from fbrapids.views.partitions import auto_partition_rows
    from fbrapids.views.read import read_view
    from fbrapids.workloads.split_check import check_split

    check = check if check is not None else check_split(w)
    out: dict[str, FrameLike] = {}
    groups = None
    for v in w.views:
        if v.sorted_by is not None:
            if len(v.paths) != 1:
                raise WorkloadError(f"{w.where}: view {v.name!r}: sorted_by needs one parquet file")
            path = Path(w.resolve(v.paths[0]))
            if groups is None:
                rows = min(auto_partition_rows(parquet_file(str(path)).metadata.num_rows), partition_rows())
                groups = groups_per_partition(path, rows)
            frame = read_view(path, backend=backend, row_groups_per_partition=groups, **v.options)
            out[v.name] = index_by_sorted_key(frame, path, v.sorted_by, groups)
        else:
            out[v.name] = _read(w, v, tuple(check.files) if v is w.log else v.paths, backend)
        if v is w.log:
            out[v.name] = _timed(w, _lazy(out[v.name], f"{w.where}: view {v.name!r}"), check)
        if v.distinct:
            out[v.name] = out[v.name].drop_duplicates(subset=list(v.distinct))
    rule = w.split.rule
    if rule == "files":
        where = f"{w.where}: view {w.log.name!r}"
        held = _timed(w, _lazy(_read(w, w.log, tuple(check.held_files), backend), where), check)
        train, test = (f.map_partitions(_marked, flag, meta=_marked(f._meta, flag))
                       for f, flag in ((_lazy(out[w.log.name], where), False), (held, True)))
        import dask.dataframe as dd

        out[w.log.name] = dd.concat([train, test])
    elif rule == "fraction":
        if w.split.fraction is None:
            raise WorkloadError(f"{w.where}: a 'fraction' split without its fraction")
        out[w.log.name] = _mark_last_rows(_lazy(out[w.log.name], f"{w.where}: view {w.log.name!r}"), w.split.fraction)
    return out


def _timed(w: Workload, frame: dd.DataFrame, check: SplitCheck) -> dd.DataFrame:
    """The log ``frame`` with its time column read as UTC epoch seconds in the checked form
    (per partition; nothing to do for epoch seconds already int64)."""
    from fbrapids.views.times import parse_time_column

    form, column = check.time_form, w.time
    if form is None or column is None:
        return frame
    if form.name == "s" and str(frame._meta[column].dtype) == "int64":
        return frame
    where = f"{w.where}: time {column!r} of view {w.log.name!r}"
    return frame.map_partitions(parse_time_column, column, form, where,
                                meta=parse_time_column(frame._meta, column, form, where))


def _mark_last_rows(frame: dd.DataFrame, fraction: float) -> dd.DataFrame:
    """``frame`` with :data:`HELD_OUT` True on its last ``fraction`` of rows (file order;
    one pass to count each partition's rows)."""
    import math

    import dask
    import dask.dataframe as dd

    lengths = [int(n) for n in frame.map_partitions(len).compute()]
    total = sum(lengths)
    cutoff = total - max(1, math.floor(total * fraction))
    parts, offset = [], 0
    for part, n in zip(frame.to_delayed(), lengths):
        parts.append(dask.delayed(_marked_rows)(part, offset, cutoff))
        offset += n
    return dd.from_delayed(parts, meta=_marked_rows(frame._meta, 0, 0), verify_meta=False)


def feature_frame(w: Workload, backend: str | None = None, features: Mapping[str, ExprLike] | None = None,
                  check: SplitCheck | None = None) -> tuple[FrameLike, dict[str, Any]]:
    """The lazy, partitioned frame of ``w``: the log cleaned, the views joined in (each
    cleaned; dictionaries broadcast, their hash tables built once per pass, each pass
    reading them for its table, on threads and on a cluster alike: a persisted copy would
    sit beside the table for the whole run, at 64M generated rows 0.7 GB, and its futures
    would have to outlive this call, which the lazy frame's graph does not ensure: a 64M-row
    run on a local cluster lost them between the plan and its first pass), ``features`` (name -> expression; default ``w``'s)
    extracted in the meta-kernels (history and fitted operators among them are left to
    :func:`fbrapids.app.pipeline.plan_frames`: :func:`split_fitted`), then the
    ``after_features`` joins.
    Returns it and the parts: ``log`` (the cleaned log, its clean report), ``views`` (as
    read), ``joined`` (before extraction).  ``check``: the split's
    (:func:`~fbrapids.workloads.split_check.check_split`; made here when not given)."""
    views = read_views(w, backend=backend, check=check)
    cleaned = {v.name: views[v.name].fbx.clean(**v.clean) if v.clean else views[v.name] for v in w.views}
    frame = cleaned[w.log.name]

    def join(frame: FrameLike, j: Join) -> FrameLike:
        opts = {} if j.validate is None else {"validate": j.validate}
        frame = frame.fbx.join(cleaned[j.view], on=j.on if isinstance(j.on, str) else list(j.on), how=j.how, **opts)
        return frame.fbx.clean(fill=j.fill) if j.fill else frame

    for j in w.joins:
        if not j.after_features:
            frame = join(frame, j)
    joined = frame
    features = split_fitted(w.features if features is None else features)[0]
    merged = joined.fbx.extract(**features) if features else joined
    for j in w.joins:
        if j.after_features:
            merged = join(merged, j)
    if merged.index.name is not None and is_dask_frame(merged):  # the key back as a column
        # per partition (opaque to dask's optimizer: its filter pushdown through reset_index
        # misaligns a later row filter such as split_by_time's, dask 2026.8)
        merged = merged.map_partitions(index_as_column, meta=index_as_column(merged._meta))
    return merged, {"log": cleaned[w.log.name], "views": views, "joined": joined}


def split_fitted(features: Mapping[str, ExprLike] | None
                 ) -> tuple[dict[str, ExprLike], dict[str, ExprLike], dict[str, ExprLike]]:
    """``features`` as (meta-kernel only, history, fitted).

    History operators look only at strictly earlier events, so they run over the whole
    log (after the merge with the basic features, which stays partition by partition);
    fitted operators are fitted on the training days only.

    Example:
        >>> from fbrapids import ops
        >>> k, h, f = split_fitted({"h": ops.hour("ts"), "te": ops.count_encode("user_id"),
        ...                         "s": ops.time_since("user_id", "ts")})
        >>> sorted(k), sorted(h), sorted(f)
        (['h'], ['s'], ['te'])
    """
    from fbrapids.features.fitted import FITTED_OPS, frame_calls
    from fbrapids.kernels import as_expr

    kernel: dict[str, ExprLike] = {}
    history: dict[str, ExprLike] = {}
    fitted: dict[str, ExprLike] = {}
    for name, e in (features or {}).items():
        calls = frame_calls(as_expr(e))
        group = fitted if any(c.op in FITTED_OPS for c in calls) else history if calls else kernel
        group[name] = e
    return kernel, history, fitted


def held_out_cutoff(w: Workload) -> int | None:
    """The first held-out time of an ``at`` / ``last_day`` split (UTC epoch seconds; the
    log's time column read once: :func:`~fbrapids.workloads.split_check.check_split`, whose
    refusals it raises), None for the other rules."""
    from fbrapids.workloads.split_check import check_split

    return check_split(w).cutoff


def split_frame(w: Workload, frame: FrameLike, cutoff: int | None = None) -> tuple[FrameLike, FrameLike]:
    """``frame`` (of ``w``) as (training rows, held-out rows) by ``w.split``; ``cutoff``:
    :func:`held_out_cutoff`'s, when already known."""
    if w.split.rule in ("at", "last_day"):
        if w.time is None:
            raise WorkloadError(f"{w.where}: a {w.split.rule!r} split needs the time column (time = ...)")
        return split_by_time(frame, w.time, cutoff if cutoff is not None else held_out_cutoff(w))
    if HELD_OUT not in frame.columns:
        raise WorkloadError(f"{w.where}: the frame has no {HELD_OUT!r} column (read it with feature_frame)")
    train, test = split_by_time(frame, HELD_OUT, True)
    return train.drop(columns=[HELD_OUT]), test.drop(columns=[HELD_OUT])
