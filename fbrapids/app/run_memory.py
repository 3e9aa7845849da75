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
from typing import Any, Iterator

log = logging.getLogger(__name__)


def _source(limit: Any) -> str:
    from fbrapids.runs.memory_budget import DEFAULT_SHARE, human, machine_memory

    if limit is None:
        return f"the default, {DEFAULT_SHARE:.0%} of this machine's {human(machine_memory())}"
    return f"memory_limit {limit!r}"


def memory_plan(w: Any, cfg: Any, shuffle_rows: int, client: Any = None) -> Any:
    """The :class:`~fbrapids.runs.memory_budget.MemoryPlan` of a run of workload ``w`` with
    ``cfg`` (a ``RunConfig``), the stream shuffling within ``shuffle_rows`` rows; ``client``:
    the dask cluster the run was given, if any.  Reads only footers and first row groups.

    Raises:
        MemoryBudgetError: the run cannot fit its budget (one line, before any work).
    """
    from fbrapids.runs import memory_budget as mb
    from fbrapids.runs.view_sizes import held_out_rows, view_sizes
    from fbrapids.runs.disk_budget import table_bounds
    from fbrapids.runs.memory_watch import tree_rss
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
    shape = mb.RunShape(
        dense=dense, sparse=sparse, features=features, table_rows={k: b.rows for k, b in bounds.items()},
        cache_rows=cfg.cache_rows, host_rows=cfg.host_rows, row_floats=StoreConfig(dim=cfg.embedding_dim).width,
        # the stream's shuffle buffer, twice (a partition arriving is concatenated to it), the
        # rows held back for calibration
        batch_rows=2 * shuffle_rows + (CALIBRATION_ROWS if cfg.calibrate else 0) + 2 * cfg.batch_size,
        partition_rows=min(auto_partition_rows(max(log_rows, 1)), PARTITION_ROWS),
        history_keys=len({repr(getattr(e, "args", (e,))[0]) for e in history.values()}))
    import sys

    libraries = mb.LIBRARIES_BYTES // 2 if "torch" in sys.modules else mb.LIBRARIES_BYTES
    est = mb.estimate(w, shape, held_out_rows(w, sizes[0]), baseline=tree_rss(), libraries=libraries, sizes=sizes)
    plan = mb.plan_memory(est, budget, _source(cfg.memory_limit), client=client is not None)
    log.info("%s", plan.describe())
    return plan


@contextlib.contextmanager
def budgeted(plan: Any, client: Any) -> Iterator[tuple[Any, Any]]:
    """Run inside ``plan``: yields ``(client, watch)``, the client a local cluster started
    for a plan that wants one (closed on leaving), else ``client`` as given; the dask
    settings of the plan (broadcast limit, partition rows) in force inside."""
    import dask

    from fbrapids.runs.memory_watch import MemoryWatch

    with contextlib.ExitStack() as stack:
        watch = stack.enter_context(MemoryWatch(plan.budget, source=plan.source))
        if plan.scheduler == "local cluster" and client is None:
            from fbrapids.frames.cluster import budgeted_cluster, close_client

            client = budgeted_cluster(plan.worker_memory)
            stack.callback(close_client, client)
        settings: dict[str, int] = {}
        if plan.broadcast_bytes is not None:
            settings["fbrapids.broadcast-bytes"] = plan.broadcast_bytes
        if plan.partition_rows < plan.default_rows:  # the budget asks for smaller partitions
            settings["fbrapids.partition-rows"] = plan.partition_rows
        stack.enter_context(dask.config.set(settings))
        yield client, watch
