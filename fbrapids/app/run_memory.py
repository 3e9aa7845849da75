"""A pipeline run's memory budget, planned before any work and held while it runs.

:func:`memory_plan` sizes the run of a workload under ``RunConfig.memory_limit`` from the
views' footers and the run's settings (:mod:`fbrapids.runs.memory_budget`): it refuses a run
that cannot fit in one line, and says how one that fits goes (on this process's threads, or
on a local dask cluster whose worker is limited and spills).  :func:`budgeted` applies the
plan to the run: the dask settings that size partitions and joins, the cluster when the plan
wants one, and the :class:`~fbrapids.runs.memory_watch.MemoryWatch` that samples the run's
memory by stage.

Example:
    >>> import tempfile
    >>> from fbrapids.datasets.synthetic.generate import generate
    >>> from fbrapids.datasets import synthetic
    >>> from fbrapids.workloads import RunConfig
    >>> d = tempfile.mkdtemp(); _ = generate(3000, d)
    >>> plan = memory_plan(synthetic.workload(d), RunConfig(memory_limit="64GB"), shuffle_rows=1 << 18)
    >>> plan.scheduler, plan.budget
    ('threads', 64000000000)
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

if TYPE_CHECKING:
    from distributed import Client

    from fbrapids.errors import MemoryBudgetError
    from fbrapids.kernels import Expr
    from fbrapids.runs.memory_budget import MemoryEstimate, MemoryPlan, RunShape
    from fbrapids.runs.memory_watch import MemoryWatch
    from fbrapids.runs.ram_budget import TableLayout
    from fbrapids.workloads import RunConfig, Workload

log = logging.getLogger(__name__)


def _source(limit: int | str | None) -> str:
    from fbrapids.runs.memory_budget import DEFAULT_SHARE, human, machine_memory

    if limit is None:
        return f"the default, {DEFAULT_SHARE:.0%} of this machine's {human(machine_memory())}"
    return f"memory_limit {limit!r}"


def history_keys(features: Mapping[str, Expr | str]) -> int:
    """The keys the history operators of ``features`` shuffle the log by (one per distinct
    first argument); a row operator (``overlap_count``) runs partition by partition and
    shuffles nothing.

    Example:
        >>> from fbrapids import ops
        >>> history_keys({"s": ops.time_since("user_id", "ts"), "o": ops.overlap_count(ops.first_k("q", 1), "t")})
        1
    """
    from fbrapids.features.fitted import HISTORY_OPS, frame_calls
    from fbrapids.kernels import as_expr

    return len({repr(c.args[0]) for e in features.values() for c in frame_calls(as_expr(e))
                if c.op in HISTORY_OPS and c.args})


def memory_plan(w: Workload, cfg: RunConfig, shuffle_rows: int, client: Client | None = None) -> MemoryPlan:
    """The :class:`~fbrapids.runs.memory_budget.MemoryPlan` of a run of workload ``w`` with
    ``cfg`` (a ``RunConfig``), the stream shuffling within ``shuffle_rows`` rows; ``client``:
    the dask cluster the run was given, if any.  Reads only footers and first row groups.

    Raises:
        MemoryBudgetError: the run cannot fit its budget (one line, before any work).
    """
    from fbrapids.errors import MemoryBudgetError
    from fbrapids.runs import memory_budget as mb
    from fbrapids.runs.disk_budget import table_bounds
    from fbrapids.runs.memory_watch import tree_rss
    from fbrapids.runs.ram_budget import table_layout
    from fbrapids.runs.view_sizes import held_out_rows, view_sizes
    from fbrapids.trainers.calibration import CALIBRATION_ROWS
    from fbrapids.trainers.sparse import StoreConfig
    from fbrapids.views.partitions import auto_partition_rows
    from fbrapids.workloads.frames import PARTITION_ROWS, split_fitted

    budget = mb.parse_memory_limit(cfg.memory_limit)
    dense, sparse, _, features = w.model_inputs(cfg.model)
    sizes = view_sizes(w)
    log_rows = sizes[0][w.log.name].rows if w.log.name in sizes[0] else 0
    bounds = table_bounds(w.root or ".", sparse, features)
    history = split_fitted(features)[1]
    row_floats = StoreConfig(dim=cfg.embedding_dim).width
    layout = table_layout(cfg.tiers, cfg.host_rows, bounds, 4 * row_floats)
    shape = mb.RunShape(
        dense=dense, sparse=sparse, features=features, table_rows={k: b.rows for k, b in bounds.items()},
        cache_rows=cfg.cache_rows, host_rows=layout.host_rows, row_floats=row_floats,
        # the stream's shuffle buffer, twice (a partition arriving is concatenated to it), the
        # rows held back for calibration
        batch_rows=2 * shuffle_rows + (CALIBRATION_ROWS if cfg.calibrate else 0) + 2 * cfg.batch_size,
        partition_rows=min(auto_partition_rows(max(log_rows, 1)), PARTITION_ROWS),
        history_keys=history_keys(history))
    import sys

    libraries = mb.LIBRARIES_BYTES // 2 if "torch" in sys.modules else mb.LIBRARIES_BYTES
    held, baseline = held_out_rows(w, sizes[0]), tree_rss()

    def estimated(shape: mb.RunShape) -> MemoryEstimate:
        return mb.estimate(w, shape, held, baseline=baseline, libraries=libraries, sizes=sizes)

    def planned(shape: mb.RunShape, est: MemoryEstimate | None = None) -> MemoryPlan:
        return mb.plan_memory(est if est is not None else estimated(shape), budget, _source(cfg.memory_limit),
                              client=client is not None)

    est = estimated(shape)  # once: the sizing below starts from it
    plan: MemoryPlan | None
    refused: MemoryBudgetError | None
    try:
        plan, refused = planned(shape, est), None
    except MemoryBudgetError as e:
        plan, refused = None, e
    if (plan is None or plan.scheduler != "threads") and client is None and cfg.tiers == "auto":
        plan, refused, layout = _sized_tables(planned, shape, est, log_rows, budget, plan, refused, layout)
    if plan is None:
        assert refused is not None
        raise refused
    plan.layout = layout
    log.info("%s", plan.describe())
    return plan


def _sized_tables(planned: Callable[[RunShape], MemoryPlan], shape: RunShape, est: MemoryEstimate, log_rows: int,
                  budget: int, plan: MemoryPlan | None, refused: MemoryBudgetError | None,
                  layout: TableLayout) -> tuple[MemoryPlan | None, MemoryBudgetError | None, TableLayout]:
    """The tables' RAM is what the budget can size: host-RAM rows per table so the rest fits
    on this process's threads (else the fewest), the rows past them on the SSD tier; returns
    ``(plan, refusal, layout)``, the given ones where sizing does not help."""
    import dataclasses

    from fbrapids.errors import MemoryBudgetError
    from fbrapids.runs import memory_budget as mb
    from fbrapids.runs.ram_budget import TableLayout

    room = budget - (est.total - est.parts["embedding tables"])  # a little left (this process is re-measured)
    rows = mb.host_rows_within(shape, log_rows, int(mb.SIZED_SHARE * room))
    rows = rows if rows is not None else mb.MIN_HOST_ROWS
    if layout.host_rows is not None and rows >= layout.host_rows:
        return plan, refused, layout
    sized: MemoryPlan | None
    failed: MemoryBudgetError | None
    try:
        sized, failed = planned(dataclasses.replace(shape, host_rows=rows)), None
    except MemoryBudgetError as e:
        sized, failed = None, e
    if sized is not None and (plan is None or sized.scheduler == "threads"):
        why = (f"{layout.why}; host RAM sized to the memory budget of {mb.human(budget)} (every row in RAM: "
               f"{mb.human(est.parts['embedding tables'])})")
        return sized, None, TableLayout(False, rows, why)
    return plan, (failed if plan is None else refused), layout  # a refusal: what the fewest rows still need


@contextlib.contextmanager
def budgeted(plan: MemoryPlan, client: Client | None) -> Iterator[tuple[Client | None, MemoryWatch]]:
    """Run inside ``plan``: yields ``(client, watch)``, the client a local cluster started
    for a plan that wants one (closed on leaving), else ``client`` as given; the dask
    settings of the plan (broadcast limit, partition rows) in force inside."""
    import dask

    from fbrapids.runs.memory_watch import MemoryWatch

    with contextlib.ExitStack() as stack:
        watch = stack.enter_context(MemoryWatch(plan.budget, source=plan.source))
        if plan.scheduler == "local cluster" and client is None:
            from fbrapids.frames.cluster import budgeted_cluster, close_client

            assert plan.worker_memory is not None  # plan_memory sizes the worker of a local cluster
            client = budgeted_cluster(plan.worker_memory)
            stack.callback(close_client, client)
        settings: dict[str, int] = {}
        if plan.broadcast_bytes is not None:
            settings["fbrapids.broadcast-bytes"] = plan.broadcast_bytes
        if plan.partition_rows < plan.default_rows:  # the budget asks for smaller partitions
            settings["fbrapids.partition-rows"] = plan.partition_rows
        stack.enter_context(dask.config.set(settings))
        yield client, watch
