"""The end-to-end FeatureBox flow: views -> clean -> join -> extract -> merge -> stream -> train.

Extraction is lazy and partitioned (dask); the trainer's stream computes partition i+1 in a
background thread while partition i trains, so extraction overlaps training and no
features are ever written to disk.  The held-out set is the last day of the log.

Example:
    >>> import tempfile
    >>> from fbrapids.datasets.synthetic.generate import generate
    >>> d = tempfile.mkdtemp(); _ = generate(3000, d)
    >>> r = run_pipeline(d, epochs=1, batch_size=512, progress=False, work_dir=tempfile.mkdtemp())
    >>> r.metrics["n"] == r.rows["held out"] > 0, [p for p in sorted(r.work_tree) if not p.startswith(".")]
    (True, ['checkpoints'])
    >>> r.store_layout.split(" (")[0]  # every table fits in memory: no SSD files
    'one RAM tier per table'
"""

from __future__ import annotations

import contextlib
import logging
import numbers
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, TypeAlias, TypedDict

from fbrapids.app.tuning import TuningSummary
from fbrapids.datasets.synthetic import DENSE, DIN_SEQUENCE, DIN_TARGET, GROUP, LABEL, SPARSE, as_workload, din_history  # noqa: F401
from fbrapids.errors import ArgumentError, InputTypeError
from fbrapids.files.iostats import IOCounter, tree_bytes
from fbrapids.frames.backend import FrameLike, get_backend
from fbrapids.runs.heap import PeriodicRelease
from fbrapids.trainers.metrics import format_metric
from fbrapids.workloads import RunConfig, Workload
from fbrapids.workloads.frames import DAY, PARTITION_ROWS, index_as_column, split_fitted  # noqa: F401  (re-exported)
from fbrapids.workloads.recipe import Recipe
from fbrapids.workloads.run_config import MODELS  # noqa: F401  (re-exported: the names RunConfig accepts)

if TYPE_CHECKING:
    import numpy as np
    from distributed import Client

    from fbrapids.app.tuning import TuningData
    from fbrapids.features.fitted import Fitted
    from fbrapids.frames.cluster import WorkerCounters
    from fbrapids.frames.partition_pass import KeptPartitions
    from fbrapids.kernels import Expr
    from fbrapids.kernels.compile_host import BuildAhead
    from fbrapids.runs.disk_budget import TableBound
    from fbrapids.runs.memory_watch import MemoryWatch
    from fbrapids.runs.ram_budget import TableLayout
    from fbrapids.trainers.batch import Batch
    from fbrapids.trainers.fit_config import FitResult
    from fbrapids.trainers.models.base import CTRModel
    from fbrapids.trainers.sparse import StoreConfig
    from fbrapids.trainers.stream import BatchStream
    from fbrapids.workloads.split_check import SplitCheck

log = logging.getLogger(__name__)

#: how the models pool a bag of ids (``pooling=`` of every model; docs/models.md)
POOLING = "mean"
#: training rows are shuffled through a buffer of this many rows filled as partitions arrive
#: (``stream(shuffle_buffer=)``, :mod:`fbrapids.trainers.shuffle`): in time order the model ends
#: tuned to the last hours it saw and mispredicts the held-out day by the hour
#: (docs/models.md); a full buffer mixes about a day and a half of the generated log
SHUFFLE_BUFFER = 1 << 18
SHUFFLE_WINDOW = SHUFFLE_BUFFER  #: the older name of :data:`SHUFFLE_BUFFER`
KEEP_CHECKPOINTS = 3  #: newest checkpoints kept; the preflight budgets one more, being written
#: a partition stream hands the heap freed back to the system at most this often
#: (:class:`TimedPartitions`; each stage starts with it too).  At 4M rows the held-out pass
#: peaked at 3.6 GB without, 2.9 GB with the release at each stage only (CPU 101 s), 2.9 GB
#: every 5 s (104 s), 2.6 GB after every partition (110 s: the pages handed back are
#: faulted in again by the next partition)
RELEASE_EVERY_S = 5.0

#: a feature as a workload names it: an :mod:`fbrapids.ops` expression, or a column name
Feature: TypeAlias = "Expr | str"


class KernelSummary(TypedDict, total=False):
    """The meta-kernels' plan and counters of a run's streamed partitions (:func:`_kernel_summary`)."""

    layers: int
    operators: int
    launches: int
    partitions: int
    launches_per_partition: float
    pool_peak_bytes: int
    pool_regrowths: int
    dictionary_runs: int
    json_cleaning: bool  #: the two JSON-cleaning kernels ran too


@dataclass
class PipelineResult:
    """What one run did and measured; :meth:`render` gives the demo's summary."""

    backend: str
    model: str
    store_layout: str = ""  #: where the embedding rows lived, and why (:func:`store_config`)
    rows: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    kernel: KernelSummary = field(default_factory=KernelSummary)
    joins: list[str] = field(default_factory=list)
    passes: dict[str, dict[str, int]] = field(default_factory=dict)  # per stream: partitions, tasks, shared tasks
    store: dict[str, dict[str, float]] = field(default_factory=dict)  #: per tier: hits, misses, ..., hit_rate
    clean: dict[str, object] = field(default_factory=dict)  #: the cleaning report's counts
    overlap_s: float = 0.0
    extract_busy_s: float = 0.0
    train_wait_s: float = 0.0
    samples_per_s: float = 0.0
    bytes_written: int = 0  #: measured: /proc/<pid>/io write_bytes of this process and its children
    bytes_read: int = 0  #: measured: rchar (every byte read: parquet input, SSD tier, ...)
    work_tree: dict[str, int] = field(default_factory=dict)  #: bytes on disk under work_dir, per entry
    checkpoint: str | None = None
    export: str | None = None  #: the serving export ``run_demo(export=...)`` wrote
    removed_work_dir: str | None = None  #: ``run_demo``'s temporary work dir, removed when it returned
    memory: dict[str, object] = field(default_factory=dict)  #: the budget, the plan and the measured peaks by stage
    fitted: str | None = None  # what the fitted features were fitted on (explain)
    oracle_auc: float | None = None
    steps: int = 0  #: training steps (global batches) taken
    held_rows: int = 0  #: training rows held back from training to fit the calibration on (fit)
    recipe: dict[str, object] = field(default_factory=dict)  #: the recipe trained with, and where it came from
    tuning: TuningSummary = field(default_factory=TuningSummary)  #: RunConfig(tune=...)'s grid, tries and choice
    #: the split as checked before training (:meth:`~fbrapids.workloads.split_check.SplitCheck.as_dict`):
    #: its rule's name, the log's files in order, the time column's form, each side's rows and times
    split: dict[str, object] = field(default_factory=dict)
    #: the C libraries this run compiled, not finding them in the kernel cache (a machine's
    #: first run of this fbrapids), by stage: ``{stage: {"libraries": n, "seconds": s}}``
    compiled: dict[str, dict[str, float]] = field(default_factory=dict)
    kernel_cache: str = ""  #: the kernel cache's folder, where later runs find them
    predictions: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # held-out pred / label / group

    def _repr_html_(self) -> str:
        """What a notebook shows: rows and seconds per stage (a chart), store hit rates, metrics."""
        from fbrapids.ui.display import pipeline_html

        return pipeline_html(self)

    def summary(self) -> dict[str, object]:
        """Everything :meth:`render` shows, as JSON-ready plain values (``fbrapids demo
        --summary-json``); the held-out predictions are left out.

        Example:
            >>> PipelineResult("cpu", "dlrm", rows={"trained": 3}).summary()["rows"]
            {'trained': 3}
        """
        import dataclasses
        import json

        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "predictions"}
        return json.loads(json.dumps(out, default=lambda v: v.item() if hasattr(v, "item") else str(v)))

    def _pass_lines(self) -> list[str]:
        """Each pass's partitions and shared tasks; the held-out one's computed with training."""
        lines = []
        for name, plan in self.passes.items():
            line = (f"  {name} pass: {plan.get('partitions', 0)} partitions, {plan.get('tasks', 0)} tasks, "
                    f"{plan.get('shared_tasks', 0)} shared by several partitions (each run once per pass)")
            if plan.get("kept_partitions"):
                line += (f"; {plan['kept_partitions']} partitions computed with the training pass (the steps "
                         f"before the split run once), {plan.get('kept_bytes', 0) / 1e6:.1f} MB kept for this one")
            lines.append(line)
        return lines

    def _memory_lines(self) -> list[str]:
        """The summary's memory lines: the peak of the process tree and its stage, the estimate
        made before any work, the budget, and how the run went within it."""
        m = self.memory
        if not m:
            return []

        def gib(v: object) -> float:  # a count of bytes (a numpy one too; 0 when not recorded), in GiB
            return float(v) / 2 ** 30 if isinstance(v, numbers.Real) else 0.0

        by_stage = m.get("peak_by_stage")
        stages = ", ".join(f"{k} {gib(v):.2f}" for k, v in (by_stage.items() if isinstance(by_stage, dict) else ())
                           if k != "start")
        return ["", "memory (the process tree):",
                f"  peak {gib(m.get('peak_bytes', 0)):.2f} GiB in {m.get('peak_stage')} (by stage, GiB: {stages}); "
                f"estimated {gib(m.get('estimate_bytes', 0)):.2f} GiB before any work; budget "
                f"{gib(m.get('budget_bytes', 0)):.2f} GiB ({m.get('budget_from')}); ran on {m.get('scheduler')}, "
                f"partitions of {m.get('partition_rows', 0):,} rows"]

    def _compile_lines(self) -> list[str]:
        """How many C libraries each stage compiled and the compiler's seconds, summed over
        compiles that ran at once (none on a later run: it loads them from the kernel cache)."""
        if not self.compiled:
            return []
        n = sum(int(v["libraries"]) for v in self.compiled.values())
        by_stage = ", ".join(f"{k} {int(v['libraries'])}" for k, v in self.compiled.items())
        seconds = sum(v["seconds"] for v in self.compiled.values())
        return [f"  C libraries compiled   {n:>12}  ({by_stage}: {seconds:.2f} s of compiler time, several compiles "
                f"at once; a later run loads them from {self.kernel_cache})"]

    def _compile_share(self) -> str:
        """What the training stage's rate includes of compiling (a machine's first run)."""
        s = self.compiled.get("extract+train", {}).get("seconds", 0.0)
        return f"  (its stage includes {s:.2f} s of compiling: a later run's does not)" if s else ""

    def _hidden_share(self) -> str:
        """The share of the training pass's extraction that ran while the trainer trained (its
        busy seconds are the overlap plus the trainer's waits), as the summary says it."""
        busy = self.overlap_s + self.train_wait_s
        return f"  ({self.overlap_s / busy:.0%} of the training pass's extraction)" if self.overlap_s > 0 else ""

    def render(self) -> str:
        """The human-readable summary printed by ``fbrapids demo``."""
        lines = [f"fbrapids pipeline — backend {self.backend}, model {self.model}", "", "rows per stage:"]
        lines += [f"  {k:<22} {v:>12,}" for k, v in self.rows.items()]
        json_counts = self.clean.get("json")
        for src, jc in (json_counts.items() if isinstance(json_counts, dict) else ()):
            nulls = ", ".join(f"{k.split(':', 1)[1]} {v:,}" for k, v in jc.items() if k.startswith("not_string:"))
            lines.append(f"  JSON {src}: {jc.get('malformed', 0):,} malformed, {jc.get('too_deep', 0):,} nested deeper "
                         f"than 64, {jc.get('null_input', 0):,} null; non-string leaves read as null: {nulls or 'none'}")
        if self.split.get("text"):
            lines += ["", *str(self.split["text"]).splitlines()]
        lines += ["", "seconds per stage:"]
        lines += [f"  {k:<22} {v:>12.2f}" for k, v in self.seconds.items()]
        lines += self._compile_lines()
        k = self.kernel
        json_kernels = "  (+2 JSON-cleaning kernels: scan, pick)" if k.get("json_cleaning") else ""
        lines += ["", "feature extraction (meta-kernels):",
                  f"  feature layers         {k.get('layers', 0):>12}{json_kernels}",
                  f"  feature operators      {k.get('operators', 0):>12}",
                  f"  kernel launches        {k.get('launches', 0):>12}  ({k.get('partitions', 0)} partitions streamed, "
                  f"{k.get('launches_per_partition', 0):.1f} per partition, "
                  f"{k.get('dictionary_runs', 0)} of them the dictionary path's runs over distinct values)",
                  f"  pool peak bytes        {k.get('pool_peak_bytes', 0):>12,}",
                  f"  pool regrowths         {k.get('pool_regrowths', 0):>12}"]
        lines += ["", "joins:"] + ([f"  {j}" for j in self.joins] or ["  none"])
        lines += self._pass_lines()
        lines += self._memory_lines()
        lines += ["", "embedding store (all tables):"] + ([f"  {self.store_layout}"] if self.store_layout else [])
        for tier in ("cache", "host", "ssd"):
            t = self.store.get(tier)
            if t and (tier == "cache" or t["hits"] or t["evictions"] or t["bytes_moved"]):  # a tier in use
                lines.append(f"  {tier:<6} hit rate {t['hit_rate']:.3f}  hits {t['hits']:,}  misses {t['misses']:,}"
                             f"  evictions {t['evictions']:,}  bytes moved {t['bytes_moved']:,}")
        m = self.metrics
        lines += ["", f"held out: {self.split.get('rule', 'last day')}",
                  f"  AUC {format_metric(m.get('auc'))}   GAUC {format_metric(m.get('gauc'))}   "
                  f"logloss {format_metric(m.get('logloss'))}   NE {format_metric(m.get('ne'))}   "
                  f"calibration {format_metric(m.get('calibration'), '.3f')}"]
        if m.get("undefined"):
            lines.append(f"  undefined: {m['undefined']}")
        lines += ["", "pipelining:",
                  f"  samples per second     {self.samples_per_s:>12,.0f}" + self._compile_share(),
                  f"  extraction busy        {self.extract_busy_s:>12.2f} s",
                  f"  overlapped w/ training {self.overlap_s:>12.2f} s" + self._hidden_share(),
                  f"  trainer waited         {self.train_wait_s:>12.2f} s",
                  f"  bytes written          {self.bytes_written:>12,}  (measured; on disk under the work dir: "
                  + (", ".join(f"{k} {v:,}" for k, v in self.work_tree.items()) or "nothing")
                  + "; no feature files)"]
        if self.checkpoint:
            lines.append(f"  checkpoint             {self.checkpoint}")
        if self.removed_work_dir:
            lines.append(f"  work dir               {self.removed_work_dir} removed (temporary: --work-dir DIR keeps "
                         "the store and checkpoints, --export DIR the trained model)")
        if self.export:
            lines.append(f"  export                 {self.export} (serve it: fbrapids serve {self.export})")
        lines += _recipe_lines(self.recipe, self.tuning)
        if self.fitted:
            lines += ["", self.fitted]
        return "\n".join(lines)


def _recipe_lines(recipe: Mapping[str, object], tuning: TuningSummary) -> list[str]:
    """The summary's lines on the recipe trained with and, when tuned, the tuning's tries."""
    if not recipe:
        return []
    lines = ["", f"recipe ({recipe.get('source', '')}):", f"  {recipe.get('text', '')}"]
    if tuning:
        from fbrapids.app.tuning import tuning_lines

        lines += tuning_lines(tuning)
    return lines


class TimedPartitions:
    """The partitions of a dask frame as one pass (:func:`~fbrapids.frames.partition_pass.iter_partitions`),
    with the compute time recorded; ``columns``: only these are computed out (the stream's).

    The stream's background thread iterates this, so the recorded time is extraction work
    that runs beside training.  Shared upstream tasks (the dictionaries' hash tables, a
    shuffle) run once per pass; at most ``window`` partitions are in flight.  Once the
    consumer is done with a partition, the heap freed since goes back to the operating
    system (:class:`~fbrapids.runs.heap.PeriodicRelease`: at most every
    :data:`RELEASE_EVERY_S`; ``released_s``: the seconds that took), so the process holds
    what is in flight, not every size of buffer a partition ever needed.
    """

    def __init__(self, frame: FrameLike, window: int = 2, counters: WorkerCounters | None = None,
                 columns: list[str] | None = None, watch: MemoryWatch | None = None,
                 beside: TimedPartitions | None = None) -> None:
        # only the columns the consumer reads travel (from cluster workers) and are held
        self.frame = frame[list(dict.fromkeys(columns))] if columns else frame
        #: ``beside``'s partitions computed with these, kept for its own pass (:meth:`keeps`)
        self.beside = beside
        self.kept: KeptPartitions | None = None
        self.window = window
        self.counters = counters  # a cluster.WorkerCounters polled after each partition
        self.watch = watch  # a runs.memory_watch.MemoryWatch: the run stops past its budget
        self.busy_s = 0.0
        self.release = PeriodicRelease(RELEASE_EVERY_S)
        self.released_s = 0.0
        self.partitions = 0
        self.plan: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def npartitions(self) -> int:
        """The frame's partitions (a stream over this estimates its batches from them)."""
        import dask.dataframe as dd

        if not isinstance(self.frame, dd.DataFrame):
            raise InputTypeError(f"TimedPartitions: a dask frame has partitions, not {type(self.frame).__name__}")
        return self.frame.npartitions

    @classmethod
    def with_held_out(cls, train: FrameLike, test: FrameLike,
                      **options: Any) -> tuple[TimedPartitions, TimedPartitions]:
        """The training pass over ``train`` and the held-out pass over ``test``, whose
        partitions the training pass computes beside its own and keeps (:meth:`keeps`);
        ``options``: each pass's (``window``, ``counters``, ``columns``, ``watch``)."""
        held = cls(test, **options).keeps()
        return cls(train, beside=held, **options), held

    def keeps(self, budget: int | None = None) -> TimedPartitions:
        """This pass's partitions are computed by the pass that has it ``beside``, partition
        by partition with its own (what the two frames share, such as every step before the
        train / held-out split, runs once), and kept up to ``budget`` bytes (default
        :data:`~fbrapids.runs.memory_budget.HELD_KEEP_BYTES`;
        :class:`~fbrapids.frames.partition_pass.KeptPartitions`): its own pass then computes
        only the partitions with rows that were not kept.  Returns ``self``."""
        from fbrapids.frames.backend import is_dask
        from fbrapids.frames.partition_pass import KeptPartitions
        from fbrapids.runs import memory_budget

        if is_dask(self.frame):
            self.kept = KeptPartitions(self.frame, memory_budget.HELD_KEEP_BYTES if budget is None else budget)
        return self

    def __iter__(self) -> Iterator[FrameLike]:
        from fbrapids.frames.partition_pass import iter_partitions

        beside = self.beside.kept if self.beside is not None else None
        if self.kept is not None:
            kept_bytes = self.kept.kept_bytes
            parts = self.kept.partitions(window=self.window, stats=self.plan)
        else:
            parts = iter_partitions(self.frame, window=self.window, stats=self.plan, beside=beside)

        def extracted() -> int:  # the log's partitions this pass extracted (one beside another is its)
            return self.kept.computed_again if self.kept is not None else yielded

        yielded = 0
        while True:
            t = time.perf_counter()
            before = extracted()
            try:
                part = next(parts)
                yielded += 1
            except StopIteration:
                part = None
            with self._lock:
                self.busy_s += time.perf_counter() - t
                self.partitions += extracted() - before
            if part is None:
                if self.kept is not None:  # what the pass beside computed and kept for this one
                    self.plan.update(kept_partitions=self.kept.computed_beside, kept_bytes=kept_bytes)
                return
            if self.counters is not None:
                self.counters.poll()
            if self.watch is not None:
                self.watch.check()
            yield part
            del part  # the consumer is done with it: its freed heap goes back
            t = time.perf_counter()
            if self.release.maybe():
                self.released_s += time.perf_counter() - t


class _WaitTimer:
    """Wraps a batch iterable; records how long the consumer waited for each batch."""

    def __init__(self, batches: Iterable[Batch]) -> None:
        self.batches = batches
        self.wait_s = 0.0
        self.samples = 0

    def expected_batches(self) -> int | None:
        from fbrapids.trainers.fit import expected_batches

        return expected_batches(self.batches)

    def estimated_batches(self) -> int | None:
        from fbrapids.trainers.fit import estimated_batches

        return estimated_batches(self.batches)

    def __iter__(self) -> Iterator[Batch]:
        it = iter(self.batches)
        while True:
            t = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                self.wait_s += time.perf_counter() - t
                return
            self.wait_s += time.perf_counter() - t
            self.samples += len(batch)
            yield batch


def feature_frame(data: Workload | str | Path, backend: str | None = None,
                  extra_features: Mapping[str, Feature] | None = None) -> tuple[FrameLike, dict[str, FrameLike]]:
    """The lazy, partitioned frame of a workload's extracted features (a folder of generated
    data: :func:`fbrapids.datasets.synthetic.workload`), and its parts (``log``, ``views``,
    ``joined``): :func:`fbrapids.workloads.frames.feature_frame`.

    ``extra_features`` (name -> expression) are extracted with the workload's features,
    in the same meta-kernels; history and row operators (``overlap_count``) after them, over
    the merged frame (fitted ones are left to :func:`plan_frames`, which fits them on the
    training rows).  On the generated data the small dictionaries (users, ads)
    are broadcast (persisted first on a dask cluster), and the basic features, sorted by ``instance_id`` like
    the impressions, are joined partition by partition (no shuffle).
    """
    from fbrapids.workloads import frames

    w = as_workload(data)
    features = {**w.features, **(extra_features or {})}
    merged, parts = frames.feature_frame(w, backend=backend, features=features)
    _, history, _ = split_fitted(features)  # the frame-level ones (the demo's qt_first_eq), but fitted ones
    return (merged.fbx.extract(**history) if history else merged), parts


def read_sorted_views(data: Workload | str | Path, backend: str | None = None) -> dict[str, FrameLike]:
    """A workload's views as read; those sorted by a key (the generated data's impressions and
    basic, by ``instance_id``) indexed by it with known divisions, in partitions of whole
    row groups, at most ``PARTITION_ROWS`` rows each.

    Example:
        >>> import tempfile
        >>> from fbrapids.datasets.synthetic.generate import generate
        >>> d = tempfile.mkdtemp(); _ = generate(3000, d)
        >>> v = read_sorted_views(d)
        >>> v["impressions"].index.name, v["basic"].known_divisions
        ('instance_id', True)
    """
    from fbrapids.workloads import frames

    return frames.read_views(as_workload(data), backend=backend)


#: the recipe fields a model has no part for (a tuning does not vary them): no first-order
#: tables in DLRM and DCN-v2; the logistic regression's tables are all first-order, and it has no MLP
UNUSED_RECIPE_FIELDS: dict[str, tuple[str, ...]] = {"dlrm": ("first_order_lr",), "dcn": ("first_order_lr",),
                                                    "logreg": ("sparse_lr", "dropout")}

#: the demo's recipe of each model (:class:`~fbrapids.workloads.recipe.Recipe`), by the log's size:
#: ``(rows from, recipe)`` pairs, the last whose rows the log reaches applies.  Chosen by
#: ``RunConfig(tune=...)`` on the default data of 200,000 rows, data seed 0 (DIN's score averaged
#: over model seeds 0, 1, 2: its dense side depends on the draw; logreg's first-order rate over data
#: seeds 0, 1, 2; docs/models.md), at every size.
RECIPES: dict[str, tuple[tuple[int, Recipe], ...]] = {
    "dlrm": ((0, Recipe(sparse_lr=0.1)),),
    "wide_deep": ((0, Recipe(dense_lr=3e-3, sparse_lr=0.1, first_order_lr=0.02)),),
    "deepfm": ((0, Recipe(dense_lr=3e-3, sparse_lr=0.05, first_order_lr=0.02)),),
    "din": ((0, Recipe(dense_lr=3e-3, sparse_lr=0.05, first_order_lr=0.02, weight_decay=1e-5)),),
    "dcn": ((0, Recipe(sparse_lr=0.2)),),
    # logreg below 1M rows: its sparse rates halve each pass, and it trains on every row, without
    # the post-hoc shift (a logistic regression fits its own intercept to the training rows; the
    # eighth of them the shift holds back cost it more: on the validation days of data seeds 0, 1
    # and 2, AUC 0.7040 against 0.7029 and logloss 0.3362 against 0.3365, calibration 0.985 to
    # 1.016, docs/models.md); from 1M rows (the shift holds back 4%): the recipe before the
    # per-pass decay, not re-tuned with it
    "logreg": ((0, Recipe(dense_lr=1e-4, first_order_lr=0.2, weight_decay=1e-4, epochs=6, sparse_lr_decay=0.5,
                          calibrate=False)),
               (1_000_000, Recipe(dense_lr=1e-4, first_order_lr=0.1, weight_decay=1e-4, epochs=4))),
}


def recipe_for(model: str, rows: int | None) -> tuple[Recipe, int]:
    """The demo's recipe of ``model`` for a log of ``rows`` rows (None: unknown, the largest
    size's), and the rows its entry in :data:`RECIPES` starts from.

    Example:
        >>> recipe_for("dlrm", 200_000)[0].epochs
        1
    """
    entries = RECIPES.get(model) or ((0, Recipe()),)
    start, recipe = entries[0]
    for entry_start, entry in entries:  # the last entry whose rows the log reaches
        if rows is None or rows >= entry_start:
            start, recipe = entry_start, entry
    return recipe, start


def default_recipe(data: Workload | str | Path, model: str) -> Recipe:
    """The recipe the pipeline trains ``model`` with on ``data`` unless told otherwise: its
    :data:`RECIPES` entry for the log's rows (:func:`recipe_for`, :func:`log_rows`)."""
    return recipe_for(model, log_rows(as_workload(data)))[0]


def log_rows(w: Workload) -> int | None:
    """The rows of the workload's log, from its parquet footers (None when a file of it is not
    parquet: counting would read it).

    Example:
        >>> import tempfile
        >>> from fbrapids.datasets.synthetic.generate import generate
        >>> d = tempfile.mkdtemp(); _ = generate(300, d)
        >>> log_rows(as_workload(d))
        300
    """
    from fbrapids.views.parquet_footer import check_footer

    total = 0
    for f in w.log.paths:
        path = Path(w.resolve(f))
        if path.suffix != ".parquet" or not path.is_file():
            return None
        total += check_footer(path).num_rows
    return total


def model_arguments(name: str, dense_dim: int, sparse: list[str], store: StoreConfig,
                    embedding_dim: int = 16, sequences: dict[str, str] | None = None,
                    recipe: Recipe | None = None) -> tuple[type[CTRModel], dict[str, Any]]:
    """The class and constructor arguments of :func:`build_model` (an export rebuilds the
    model from them); ``recipe``: its learning rates, weight decay and dropout in the
    stores' configurations and the model's ``dropout`` (none of which changes the model's
    layout).

    Example:
        >>> from fbrapids.trainers.sparse import StoreConfig
        >>> cls, kw = model_arguments("wide_deep", 3, ["a"], StoreConfig(cache_rows=8))
        >>> cls.__name__, kw["deep_mlp"]
        ('WideAndDeep', [64, 32])
    """
    from fbrapids.trainers import models

    # mean pooling of bags (docs/models.md: a bag of up to 64 query x title tokens summed
    # outweighed every single-id field and added noise to the interactions)
    cls = models.model_for(name)  # the class from the one registry; its own pipeline arguments
    common = dict(dense_dim=dense_dim, sparse_features=list(sparse), embedding_dim=embedding_dim, store=store,
                  pooling=POOLING)
    return cls, cls.pipeline_arguments(common, store, recipe, sequences)


def build_model(name: str, dense_dim: int, sparse: list[str], store: StoreConfig, embedding_dim: int = 16,
                sequences: dict[str, str] | None = None, recipe: Recipe | None = None) -> CTRModel:
    """One of the trainer's models over the pipeline's features.

    Example:
        >>> from fbrapids.trainers.sparse import StoreConfig
        >>> type(build_model("dlrm", 3, ["a"], StoreConfig(cache_rows=8))).__name__
        'DLRM'
    """
    cls, kwargs = model_arguments(name, dense_dim, sparse, store, embedding_dim, sequences, recipe)
    return cls(**kwargs)


def split_by_day(frame: FrameLike, cutoff: int) -> tuple[FrameLike, FrameLike]:
    """Rows with ``ts`` before ``cutoff`` (epoch seconds) for training, the rest held out
    (:func:`fbrapids.workloads.frames.split_by_time` on the generated data's time column).

    Example:
        >>> import pandas as pd
        >>> tr, te = split_by_day(pd.DataFrame({"ts": [1, 5, 9]}), 5)
        >>> tr["ts"].tolist(), te["ts"].tolist()
        ([1], [5, 9])
    """
    from fbrapids.workloads.frames import split_by_time

    return split_by_time(frame, "ts", cutoff)


def run_pipeline(workload: Workload | str | Path, config: RunConfig | None = None, *, client: Client | None = None,
                 **options: object) -> PipelineResult:
    """Run the FeatureBox flow on ``workload`` and train ``config.model`` on the stream.

    Args:
        workload: a :class:`~fbrapids.workloads.Workload` (views, joins, cleaning, label,
            split, features: what is read and trained on), or a folder of generated data
            (its :func:`fbrapids.datasets.synthetic.workload`).
        config: a :class:`~fbrapids.workloads.RunConfig` (the model, batches, store tiers,
            work dir, checkpoints, ...; default ``RunConfig()``).
        client: a ``distributed.Client`` to extract on (None: dask's local scheduler).
        options: shorthand for ``config.with_(**options)`` (``run_pipeline(d, model="din")``);
            names other than ``RunConfig``'s are an error.

    The workload's fitted operators (``target_encode``, ``categorify``, ...) are fitted on
    the training rows only (one pass), applied out-of-fold to them and frozen to the
    held-out rows; history operators run over the whole log (strictly earlier events
    only).  ``--model din`` adds the workload's behaviour sequences.

    The work dir is held exclusively for the run (a second run on it is a
    :class:`~fbrapids.errors.WorkDirLockedError` naming this one's PID and host); before
    training, it and the checkpoint dir are checked writable with free space for the SSD
    tier plus ``KEEP_CHECKPOINTS + 1`` checkpoints, each table sized by its bound
    (:mod:`fbrapids.runs.disk_budget`; :class:`~fbrapids.errors.PreflightError` with the sizes).

    Memory: before any work the run's peak is estimated from the views' footers against
    ``config.memory_limit`` (:mod:`fbrapids.app.run_memory`): a run that cannot fit is a
    :class:`~fbrapids.errors.MemoryBudgetError` in one line; one whose dictionaries do not fit
    beside the rest runs on a local dask cluster whose worker is limited and spills.  While it
    runs its memory is sampled by stage (``result.memory``), said when near the budget, and
    the run stops with a MemoryBudgetError past it.

    Returns:
        A :class:`PipelineResult` (``render()`` is the demo's summary).
    """
    import dask

    # every compute of this run goes to ``client``, or to this process's threads: never to
    # some other default client that happens to exist (kernel counters are read from there)
    from fbrapids.app.run_memory import budgeted, memory_plan
    from fbrapids.frames.cluster import frozen_worker_watchdog
    from fbrapids.runs.workdir import lock_work_dir, temporary_work_dir, torch_cache_in

    w = as_workload(workload)
    cfg = (config if config is not None else RunConfig()).with_(**options)
    if not isinstance(cfg, RunConfig):
        raise ArgumentError(f"config must be a RunConfig, got {type(config).__name__}")
    w.check_files()
    plan = memory_plan(w, cfg, SHUFFLE_BUFFER, client)  # a run that cannot fit: refused before any work
    if cfg.work_dir is None and cfg.checkpoint_every is None:  # a temporary work dir, removed at the end: its
        cfg = cfg.with_(checkpoint=False)  # final checkpoint would be removed unread
    with contextlib.ExitStack() as stack:
        work = Path(cfg.work_dir) if cfg.work_dir is not None else stack.enter_context(temporary_work_dir())
        client, watch = stack.enter_context(budgeted(plan, client))
        with dask.config.set(scheduler=client if client is not None else "threads"), lock_work_dir(work), \
                torch_cache_in(work), frozen_worker_watchdog(client, f"the run on {w.origin}"):
            result = _run(w, cfg, client, work, watch, plan.layout)
        result.memory = {**plan.summary(), **watch.summary()}
        if cfg.work_dir is None:
            result.removed_work_dir, result.checkpoint = str(work), None  # removed on leaving this block
    return result


def _run(w: Workload, cfg: RunConfig, client: Client | None, work: Path, watch: MemoryWatch,
         layout: TableLayout | None = None) -> PipelineResult:
    """One run of :func:`run_pipeline`, its work dir held: plan, then stream and train, then
    evaluate on the held-out rows, each stage's rows, seconds and counters recorded; the
    tables laid out as the memory plan's ``layout`` says (:func:`store_config`)."""
    import torch

    from fbrapids.joins.strategies import join_decision_mark, join_decisions
    from fbrapids.trainers.metrics import all_metrics

    be = get_backend(cfg.backend)
    torch.manual_seed(cfg.seed)
    result = PipelineResult(be.name, cfg.model)
    io = IOCounter().__enter__()  # bytes this run writes and reads, measured (children included)
    decisions_before = join_decision_mark()
    _reset_kernel_counters(client, require=f"extracting {w.origin}")
    t0 = time.perf_counter()
    watch.stage("plan")
    with counting_compiles(result, "plan"):
        planned = _plan_run(w, cfg, be.name, work, result, layout)
    result.seconds["plan"] = time.perf_counter() - t0
    if planned.frames.split is not None:  # every check passed: what is about to train, and on what
        planned.frames.split.announce(w.origin)

    _reset_kernel_counters(client)  # count the streamed partitions' kernels only, not planning's
    streams = _open_streams(w, cfg, planned, client, watch)
    fitted, train_s, evaluate_s = _train_and_evaluate(w, cfg, be.is_gpu, planned, streams, result)
    watch.stage("metrics")
    _record_training(result, fitted, streams, train_s)
    p = result.predictions
    result.metrics = all_metrics(p["label"], p["pred"], p.get("group"))
    result.seconds["extract+evaluate"] = evaluate_s
    result.kernel = _kernel_summary(streams, planned.frames)
    result.kernel["json_cleaning"] = any("json" in v.clean for v in w.views)  # its two kernels ran
    _record_rows(result, w, cfg, planned.frames, streams)
    result.joins = [str(d) for d in join_decisions(since=decisions_before)]
    result.passes = {"training": dict(streams.producer.plan), "held-out": dict(streams.test_producer.plan)}
    result.store = _store_totals(planned.net)
    io.__exit__(None, None, None)
    result.bytes_written, result.bytes_read = io.write_bytes, io.rchar
    result.work_tree = tree_bytes(work)
    return result


@dataclass
class _PlannedRun:
    """What :func:`_plan_run` made before any partition is computed."""

    inputs: TrainingInputs
    frames: PlannedFrames
    net: CTRModel  #: the model (:func:`build_model`)
    ckpt_dir: Path | None  #: where checkpoints go (None: no checkpoints)
    recipe: Recipe  #: its learning rates, regularisation, epochs and per-pass decay


@dataclass
class _Streams:
    """The passes of a run (:func:`_open_streams`): the timed training and held-out
    partitions, the training batches, and the held-out batches once evaluation made them."""

    producer: TimedPartitions
    test_producer: TimedPartitions
    train: _WaitTimer
    counters: WorkerCounters | None  #: the workers' kernel counters on a cluster, else None
    watch: MemoryWatch  #: the run's memory watch
    test: BatchStream | None = None  #: the held-out batches, once evaluation made them


def _reset_kernel_counters(client: Client | None, require: str | None = None) -> None:
    """Zero the kernel counters of this process and, on a cluster, of every worker (first
    checking, when ``require`` names the work, that the cluster has workers)."""
    from fbrapids import kernels as kernel_stats

    kernel_stats.reset_stats()
    if client is not None:
        if require is not None:
            from fbrapids.frames.cluster import require_workers

            require_workers(client, require)
        client.run(kernel_stats.reset_stats)


def _plan_run(w: Workload, cfg: RunConfig, backend: str, work: Path, result: PipelineResult,
              layout: TableLayout | None = None) -> _PlannedRun:
    """The run's inputs, lazy frames and model, checked before training: a resume with other
    settings refused, the fitted features fitted (and saved beside the checkpoints), the
    disk preflight passed, the model's C libraries built (ahead, once the data is read and
    planned: a run refused by its settings or its data compiles nothing).  Records the
    fit's seconds and explanation in ``result``."""
    import torch

    from fbrapids.runs.disk_budget import table_bounds

    inputs = training_inputs(w, cfg.model, cfg.embedding_dim, cfg.batch_size, cfg.seed)
    recipe = _resolve_recipe(w, cfg, backend, work, inputs, result)
    inputs.run["recipe"] = recipe.as_dict()  # a resume must train with it too
    if cfg.resume and cfg.checkpoint:
        _check_resume(work / "checkpoints", inputs.run)  # a resume with other settings: refused before planning
    frames = plan_frames(inputs, w, backend)
    if frames.fitted_state is not None:
        result.seconds["fit"] = frames.fit_s
        result.fitted = frames.fitted_state.explain()
        if cfg.checkpoint:
            frames.fitted_state.save(work / "fitted")
    ahead = _build_ahead(cfg.model, get_backend(backend).is_gpu)
    bounds = table_bounds(w.root or ".", inputs.sparse, inputs.extra_features)
    store, result.store_layout = store_config(cfg, work / "store", bounds, layout=layout)
    torch.manual_seed(cfg.seed)  # the model a run without a tuning builds, whatever the tuning drew before it
    net = build_model(cfg.model, len(inputs.dense), inputs.sparse, store, cfg.embedding_dim, sequences=inputs.sequences,
                      recipe=recipe)
    ckpt_dir = (work / "checkpoints") if cfg.checkpoint else None
    _preflight(work, ckpt_dir, net, store, bounds, periodic=bool(cfg.checkpoint_every))
    ahead.wait()  # built before the first step: the training stage's rate is training's
    return _PlannedRun(inputs, frames, net, ckpt_dir, recipe)


def store_config(cfg: RunConfig, ssd_dir: str | Path, bounds: Mapping[str, TableBound],
                 available: int | None = None, layout: TableLayout | None = None) -> tuple[StoreConfig, str]:
    """The tables' :class:`~fbrapids.trainers.sparse.StoreConfig` for ``cfg.tiers`` and the
    tables' ``bounds`` (:func:`fbrapids.runs.disk_budget.table_bounds`), and where the rows
    live, in words: one RAM tier where every table fits in memory (``tiers="auto"``,
    :mod:`fbrapids.runs.ram_budget`), else ``cfg``'s tiers over an SSD folder ``ssd_dir``;
    ``layout`` (a :class:`~fbrapids.runs.ram_budget.TableLayout`, the memory plan's: its
    host-RAM rows sized to the budget) decides instead when given.

    Example:
        >>> from fbrapids.runs.disk_budget import TableBound
        >>> store, why = store_config(RunConfig(), "/tmp/s", {"ad": TableBound(1000, "buckets")}, available=1 << 30)
        >>> store.host_rows, store.ssd_dir, why.split(" (")[0]
        (None, None, 'one RAM tier per table')
    """
    from fbrapids.runs.ram_budget import table_layout
    from fbrapids.trainers.sparse import StoreConfig

    if layout is None:
        layout = table_layout(cfg.tiers, cfg.host_rows, bounds, StoreConfig(dim=cfg.embedding_dim).width * 4,
                              available)
    if layout.one_ram_tier:
        return (StoreConfig(cache_rows=cfg.cache_rows, seed=cfg.seed),
                f"one RAM tier per table (no SSD files): {layout.why}")
    host = layout.host_rows
    tiers = StoreConfig(cache_rows=cfg.cache_rows, host_rows=host, ssd_dir=str(ssd_dir), seed=cfg.seed)
    return tiers, (f"tiers: cache {cfg.cache_rows:,} rows, host RAM "
                   f"{'unbounded' if host is None else f'{host:,} rows'}, SSD files: {layout.why}")


def _resolve_recipe(w: Workload, cfg: RunConfig, backend: str, work: Path, inputs: TrainingInputs,
                    result: PipelineResult) -> Recipe:
    """The recipe the run trains with: ``cfg.recipe``, else the pipeline's for the model and the
    log's size (:data:`RECIPES`); with ``cfg.tune``, the one a tuning from it chooses
    (:mod:`fbrapids.app.tuning`; a resume reuses the recipe its checkpoint recorded).  Recorded
    in ``result.recipe`` (and the tuning in ``result.tuning``)."""
    if cfg.recipe is not None:
        recipe, source = cfg.recipe, "RunConfig.recipe"
    else:
        rows = log_rows(w)
        recipe, start = recipe_for(cfg.model, rows)
        source = (f"the pipeline's for {cfg.model}" + (f" on logs of {start:,} rows or more" if start else "")
                  if rows is not None else f"the pipeline's for {cfg.model} on the largest logs (the log's size "
                  "is not known from its footers)")
    if cfg.tune:
        from fbrapids.trainers.run_identity import recorded_identity

        found = recorded_identity(work / "checkpoints") if cfg.resume and cfg.checkpoint else None
        kept = (found[1] or {}).get("recipe") if found is not None else None
        if kept is not None:
            recipe, source = Recipe(**kept), "tuned by the run this one resumes (its checkpoint's)"
        else:
            from fbrapids.app.tuning import tune_recipe

            with training_threads(cfg.train_threads, backend == "gpu"):
                result.tuning = tune_recipe(_tuning_data(w, cfg, inputs, backend), cfg, recipe, work,
                                            UNUSED_RECIPE_FIELDS.get(cfg.model, ()))
            recipe, source = Recipe(**result.tuning["choice"]), f"tuned on the validation day, from {source}"
    result.recipe = {**recipe.as_dict(), "source": source, "text": recipe.describe()}
    return recipe


def validation_frames(inputs: TrainingInputs, w: Workload, backend: str | None) -> tuple[FrameLike, FrameLike, int]:
    """The lazy rows a tuning (:mod:`fbrapids.app.tuning`) trains and scores on: the training
    days before the last one, and the last training day (the validation day), with ``inputs``'
    features (fitted ones fitted on the days before the validation day only); and the
    validation day's first second.  The held-out rows are not among them.  A split that is
    not by time (``at`` / ``last_day``) is a :class:`~fbrapids.errors.WorkloadError`: a tuning
    needs a day to hold out."""
    from fbrapids.errors import WorkloadError
    from fbrapids.workloads import Split
    from fbrapids.workloads.frames import held_out_cutoff, split_by_time

    cutoff = held_out_cutoff(w)
    if cutoff is None or w.time is None:
        raise WorkloadError(f"{w.where}: tuning holds out the last training day, which needs a split by time "
                            f"(rule 'at' or 'last_day'), not {w.split.rule!r}")
    start = cutoff - DAY
    frames = plan_frames(inputs, w.replace(split=Split("at", at=start)), backend)
    validation, _ = split_by_time(frames.test, w.time, cutoff)  # the held-out day's rows dropped
    return frames.train, validation, start


def _tuning_data(w: Workload, cfg: RunConfig, inputs: TrainingInputs, backend: str | None) -> TuningData:
    """The run's :class:`~fbrapids.app.tuning.TuningData`: :func:`validation_frames`, the run's
    model with a recipe, its stream (the training days' shuffled as the run's are)."""
    from fbrapids.app.tuning import TuningData

    train, validation, day = validation_frames(inputs, w, backend)
    columns = [w.label, *([w.group] if w.group else []), *inputs.dense, *inputs.sparse]

    def model(recipe: Recipe, store: StoreConfig) -> CTRModel:
        return build_model(cfg.model, len(inputs.dense), inputs.sparse, store, cfg.embedding_dim,
                           sequences=inputs.sequences, recipe=recipe)

    def batches(frame: FrameLike, shuffled: bool) -> BatchStream:
        return batch_stream(TimedPartitions(frame, window=1, columns=columns), inputs.dense, inputs.sparse,
                            cfg.batch_size, cfg.seed, cfg.nan, w.label, w.group, SHUFFLE_BUFFER if shuffled else 0)

    return TuningData(train, validation, day, model, batches)


def _open_streams(w: Workload, cfg: RunConfig, planned: _PlannedRun, client: Client | None,
                  watch: MemoryWatch) -> _Streams:
    """The timed passes over the training and held-out partitions (only the stream's columns
    computed out) and the shuffled training batches over the first; on a cluster, the
    workers' kernel counters polled after each partition."""
    counters = None
    if client is not None:
        from fbrapids import kernels as kernel_stats
        from fbrapids.frames.cluster import WorkerCounters

        counters = WorkerCounters(client, kernel_stats.stats)  # survives worker restarts
    dense, sparse = planned.inputs.dense, planned.inputs.sparse
    columns = [w.label, *([w.group] if w.group else []), *dense, *sparse]
    # held-out partitions are streamed too
    # one partition computed at a time plus a queue of one: at most two partitions ahead of the
    # trainer, as stream(prefetch=2) holds over a dask frame
    # the held-out rows of each partition computed with its training rows, kept for the evaluation
    producer, test_producer = TimedPartitions.with_held_out(planned.frames.train, planned.frames.test, window=1,
                                                            counters=counters, columns=columns, watch=watch)
    train = _WaitTimer(batch_stream(producer, dense, sparse, cfg.batch_size, cfg.seed, cfg.nan, w.label, w.group,
                                    SHUFFLE_BUFFER))
    return _Streams(producer, test_producer, train, counters, watch)


@contextlib.contextmanager
def training_threads(threads: int | None, is_gpu: bool) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` for the block (None: on the CPU backend every
    core but one, left to the extraction beside the trainer), restored after."""
    import torch

    before = torch.get_num_threads()
    if threads is None and not is_gpu:
        threads = max(1, (os.cpu_count() or 2) - 1)  # leave a core to the extraction beside it
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _train_and_evaluate(w: Workload, cfg: RunConfig, is_gpu: bool, planned: _PlannedRun, streams: _Streams,
                        result: PipelineResult) -> tuple[FitResult, float, float]:
    """Train the model on the training stream, then predict the held-out stream into
    ``result.predictions``; returns the fit's result and the two stages' seconds."""
    from fbrapids.trainers.device import place_model
    from fbrapids.trainers.fit import default_optimizer, fit, predict

    inputs, recipe = planned.inputs, planned.recipe
    place_model(planned.net, None)  # where fit trains it: the dense optimizer is made for the parameters there
    optimizer = default_optimizer([p for p in planned.net.parameters() if p.requires_grad], recipe.dense_lr)
    with training_threads(cfg.train_threads, is_gpu):
        streams.watch.stage("extract+train")
        t = time.perf_counter()
        with counting_compiles(result, "extract+train"):
            fitted = fit(planned.net, streams.train, epochs=cfg.epochs or recipe.epochs, progress=cfg.progress,
                         optimizer=optimizer, sparse_lr_decay=recipe.sparse_lr_decay,
                         checkpoint_dir=planned.ckpt_dir, resume=cfg.resume, checkpoint_every=cfg.checkpoint_every,
                         run=inputs.run, keep_checkpoints=KEEP_CHECKPOINTS,
                         calibrate=cfg.calibrate and recipe.calibrate)
        train_s = time.perf_counter() - t
        streams.watch.stage("extract+evaluate")
        t = time.perf_counter()
        streams.test = batch_stream(streams.test_producer, inputs.dense, inputs.sparse, cfg.batch_size, cfg.seed,
                                    cfg.nan, w.label, w.group)
        with counting_compiles(result, "extract+evaluate"):
            result.predictions = predict(planned.net, streams.test, progress=cfg.progress)  # read-only, as served
        evaluate_s = time.perf_counter() - t
    return fitted, train_s, evaluate_s


@contextlib.contextmanager
def counting_compiles(result: PipelineResult, stage: str) -> Iterator[None]:
    """Record in ``result.compiled[stage]`` the C libraries this process compiled inside the
    block and the seconds they took (nothing when every one came from the kernel cache).

    Example:
        >>> r = PipelineResult("cpu", "dlrm")
        >>> with counting_compiles(r, "plan"):
        ...     pass
        >>> r.compiled
        {}
    """
    from fbrapids.kernels import cache

    before = dict(cache.stats)
    try:
        yield
    finally:
        built = sum(cache.stats[k] - before[k] for k in ("builds", "rebuilds"))
        if built:
            result.compiled[stage] = {"libraries": int(built),
                                      "seconds": round(cache.stats["compile_seconds"] - before["compile_seconds"], 2)}
            result.kernel_cache = str(cache.cache_dir())


def _build_ahead(model: str, is_gpu: bool) -> BuildAhead:
    """The C libraries the ``model``'s training loads on the CPU (its
    :meth:`~fbrapids.trainers.models.CTRModel.cpu_sources`: the store's, DLRM's dots),
    compiling on background threads beside the plan where they are not in the kernel cache
    (a machine's first run: seconds each, once); none on a GPU run."""
    from fbrapids.kernels.compile_host import BuildAhead
    from fbrapids.trainers import models

    return BuildAhead([] if is_gpu else models.model_for(model).cpu_sources())


def _record_training(result: PipelineResult, fitted: FitResult, streams: _Streams, train_s: float) -> None:
    """The training stage's seconds, overlap of extraction with training, throughput,
    steps and newest checkpoint, into ``result``."""
    producer, stream = streams.producer, streams.train
    result.seconds["extract+train"] = train_s
    result.extract_busy_s = producer.busy_s + streams.test_producer.busy_s
    result.train_wait_s = stream.wait_s
    result.overlap_s = max(0.0, producer.busy_s - stream.wait_s)
    result.samples_per_s = stream.samples / train_s if train_s > 0 else 0.0
    result.steps = fitted.steps
    result.held_rows = int(getattr(fitted, "held_rows", 0))
    if fitted.checkpoints:
        result.checkpoint = str(fitted.checkpoints[-1])
    elif getattr(fitted, "resumed_from", None) is not None:
        # resumed after training had finished (the run died in evaluation, say): nothing
        # left to train, and the checkpoint it resumed from is this model, to export
        result.checkpoint = str(fitted.resumed_from)


def _kernel_summary(streams: _Streams, frames: PlannedFrames) -> KernelSummary:
    """The meta-kernels' plan (layers, operators) and the launches and memory pool of the
    streamed partitions (summed over a cluster's workers)."""
    from fbrapids import kernels as kernel_stats
    from fbrapids.features import plan_for

    ks = kernel_stats.stats() if streams.counters is None else _cluster_kernel_stats(streams.counters)
    streamed = streams.producer.partitions + streams.test_producer.partitions
    plan = plan_for(frames.parts["joined"]._meta, frames.plain)
    inputs = _frame_op_inputs(frames.frame_ops)  # a plan of their own, run before the frame-level operators
    extra = plan_for(frames.train._meta, inputs) if inputs else None
    layers, operators = len(plan.layers), len(plan.nodes)
    if extra is not None:
        layers, operators = layers + len(extra.layers), operators + len(extra.nodes)
    return {"layers": layers, "operators": operators, "launches": ks["launches"],
            "partitions": streamed, "launches_per_partition": ks["launches"] / streamed if streamed else 0.0,
            "pool_peak_bytes": ks["peak_pool_bytes"], "pool_regrowths": ks["regrowths"],
            "dictionary_runs": ks["dictionary_runs"]}


def _frame_op_inputs(features: Mapping[str, Feature]) -> dict[str, Expr]:
    """The meta-kernel expressions the frame-level operators of ``features`` read (``overlap_count``'s
    token lists, say): extracted in a plan of their own before those operators run.

    Example:
        >>> from fbrapids import ops
        >>> sorted(_frame_op_inputs({"x": ops.overlap_count(ops.split("q", " "), "t")}).values(), key=str)
        [Call(op='split', args=(Col(name='q'),), params=(('sep', ' '), ('buckets', None)))]
    """
    from fbrapids.features.fitted import FRAME_OPS, frame_calls
    from fbrapids.kernels import Call, as_expr

    out: dict[str, Expr] = {}
    for e in features.values():
        for c in frame_calls(as_expr(e)):
            for a in c.args:
                if isinstance(a, Call) and a.op not in FRAME_OPS and a not in out.values():
                    out[f"_input{len(out)}"] = a
    return out


def _record_rows(result: PipelineResult, w: Workload, cfg: RunConfig, frames: PlannedFrames,
                 streams: _Streams) -> None:
    """The rows per stage (each view read, the log after cleaning, merged, trained, held
    back, held out, dense values zeroed), the cleaning report's counts and the split, into
    ``result``.  A count not taken (``count_clean=False``) is left out, never shown as 0."""
    check = frames.split
    counts = frames.parts["log"].fbx.clean_report.counts if cfg.count_clean and w.log.clean else {}
    for name, n in _view_rows(w, check, count=cfg.count_clean).items():
        result.rows[f"{name} read"] = n
    if counts:
        result.rows["after clean"] = int(counts.get("rows_out", 0))
    elif not w.log.clean and check is not None:
        result.rows["after clean"] = check.rows  # nothing to clean
    result.rows["merged (train+test)"] = int(streams.train.samples + result.metrics.get("n", 0))
    result.rows["trained"] = int(streams.train.samples)
    if result.held_rows:  # part of them: held back from training to fit the calibration on (fit)
        result.rows["of which held back for calibration"] = result.held_rows
    result.rows["held out"] = int(result.metrics.get("n", 0))
    if cfg.nan == "zero":
        result.rows["dense NaN/inf/null -> 0"] = sum(int(getattr(st, "stats", {}).get("nan_replaced", 0))
                                                     for st in (streams.train.batches, streams.test))
    result.clean = counts
    if check is not None:
        result.split = {**check.as_dict(), "text": check.render()}


def _view_rows(w: Workload, check: SplitCheck | None, count: bool) -> dict[str, int]:
    """Rows read per view: the log's from the split's check, a parquet view's from its
    footers; another view's by a pass over its files when ``count`` (else left out)."""
    from fbrapids.views.parquet import parquet_file
    from fbrapids.views.paths import expand_paths
    from fbrapids.views.read import read_view

    out: dict[str, int] = {}
    for v in w.views:
        if v is w.log:
            if check is not None:
                out[v.name] = check.rows
            continue
        files = [f for p in v.paths for f in expand_paths(w.resolve(p))]
        if all(f.endswith(".parquet") for f in files):
            out[v.name] = sum(parquet_file(f).metadata.num_rows for f in files)
        elif count:
            opts = {k: x for k, x in v.options.items() if k not in ("columns", "dtype")}
            first = list(v.options.get("columns") or read_view(files, backend="cpu", **opts)._meta.columns)[:1]
            out[v.name] = len(read_view(files, columns=first, eager=True, backend="cpu", **opts))
    return out


@dataclass
class TrainingInputs:
    """What :func:`run_pipeline` trains ``model`` on, before any data is read
    (:func:`training_inputs`), and the lazy frames once planned (:func:`plan_frames`)."""

    model: str
    dense: list[str]
    sparse: list[str]
    sequences: dict[str, str] | None
    extra_features: dict[str, Feature]
    run: dict[str, object]  #: the settings a checkpoint records and a resume must share


@dataclass
class PlannedFrames:
    """The lazy training and held-out frames of a run (:func:`plan_frames`)."""

    train: FrameLike
    test: FrameLike
    parts: dict[str, FrameLike]
    plain: dict[str, Feature]  #: the extra features extracted in the meta-kernels
    fitted_state: Fitted | None = None
    frame_ops: dict[str, Feature] = field(default_factory=dict)  #: those computed at frame level (history, row ops)
    fit_s: float = 0.0
    split: SplitCheck | None = None  #: the split, checked before planning


def training_inputs(data: Workload | str | Path, model: str, embedding_dim: int, batch_size: int,
                    seed: int) -> TrainingInputs:
    """The features ``model`` trains on from the workload (DIN: its behaviour sequences
    added: :meth:`~fbrapids.workloads.Workload.model_inputs`) and the run's settings
    (reads only the data's footers).

    Example:
        >>> import tempfile
        >>> from fbrapids.datasets.synthetic.generate import generate
        >>> d = tempfile.mkdtemp(); _ = generate(300, d)
        >>> t = training_inputs(d, "din", 16, 2048, 0)
        >>> t.sequences, t.sparse[-1], t.run["batch_size"]
        ({'hist_cat': 'category'}, 'hist_cat', 2048)
    """
    w = as_workload(data)
    dense, sparse, sequences, features = w.model_inputs(model)
    run = _run_settings(w, model, embedding_dim, dense, sparse, sequences or None, features, batch_size, seed)
    return TrainingInputs(model, dense, sparse, sequences or None, features, run)


def plan_frames(inputs: TrainingInputs, data: Workload | str | Path, backend: str | None = None,
                check: SplitCheck | None = None) -> PlannedFrames:
    """The lazy training and held-out rows of the workload with ``inputs``' features:
    history features over the whole log, fitted ones fitted once on the training rows
    (out-of-fold there, frozen on the held-out rows), the split checked first
    (:func:`~fbrapids.workloads.split_check.check_split`; ``check``: when already made) and
    the stream's columns checked."""
    from fbrapids.runs.plan_checks import check_stream_columns
    from fbrapids.workloads import frames
    from fbrapids.workloads.split_check import check_split

    w = as_workload(data)
    plain, history, to_fit = split_fitted(inputs.extra_features)
    if check is None:  # the log's label and time read once: a split that cannot be right refused here
        check = check_split(w)
    merged, parts = frames.feature_frame(w, backend=backend, features=plain, check=check)
    if history:  # on dask: one shuffle by each history key, right across partition boundaries
        merged = merged.fbx.extract(**history)
    train, test = frames.split_frame(w, merged, check.cutoff)
    out = PlannedFrames(train, test, parts, plain, split=check, frame_ops=history)
    if to_fit:  # fitted on the training rows only; out-of-fold there, frozen on the held-out rows
        t = time.perf_counter()
        out.fitted_state = train.fbx.fit(**to_fit)
        out.train = train.fbx.extract(out.fitted_state, training=True)
        out.test = test.fbx.extract(out.fitted_state)
        out.fit_s = time.perf_counter() - t
    check_stream_columns(out.train._meta, w.label, inputs.dense, inputs.sparse,  # fitted features included
                         w.origin, group=w.group)
    return out


def _run_settings(w: Workload, model: str, embedding_dim: int, dense: list[str], sparse: list[str],
                  sequences: dict[str, str] | None, features: Mapping[str, Feature], batch_size: int,
                  seed: int) -> dict[str, object]:
    """What a checkpoint of this run records and a resume must share with it
    (:mod:`fbrapids.trainers.run_identity`): the model and its inputs, batch size, seed, and
    the data's fingerprint (:func:`fbrapids.runs.data_identity.data_fingerprint` of a generated
    folder, else :func:`~fbrapids.runs.data_identity.files_fingerprint` of the views' files)."""
    from fbrapids.runs.data_identity import data_fingerprint, files_fingerprint

    data = data_fingerprint(w.root) if w.name == "generated" and w.root else files_fingerprint(w.files())
    return {"model": model, "embedding_dim": int(embedding_dim), "dense": list(dense), "sparse": list(sparse),
            "sequences": dict(sequences or {}),
            "extra_features": {k: _comparable(v) for k, v in sorted(features.items())},
            "batch_size": int(batch_size), "seed": int(seed), "data": data}


def _comparable(expr: object) -> str:
    """An expression's repr, which names its operators and parameters; one holding an
    object's address (a user function) stands as its type only, so that a resume does
    not differ from the run it continues by an address alone."""
    import re

    text = repr(expr)
    return f"<{type(expr).__name__}>" if re.search(r" at 0x[0-9a-fA-F]+", text) else text


def _check_resume(root: Path, run: Mapping[str, object]) -> None:
    """Refuse (:class:`~fbrapids.errors.CheckpointMismatchError`) a resume whose settings
    differ from those the newest checkpoint under ``root`` recorded."""
    from fbrapids.trainers.run_identity import check_identity, recorded_identity

    found = recorded_identity(root)
    if found is not None:
        check_identity(found[1], run, found[0])


def _cluster_kernel_stats(counters: WorkerCounters) -> dict[str, int]:
    """Kernel counters summed over every worker process of a distributed cluster seen
    during the run (a restarted worker's earlier counts included)."""
    from fbrapids import kernels as kernel_stats

    total = kernel_stats.KernelStats()
    for snapshot in counters.snapshots():
        total += kernel_stats.KernelStats(**snapshot)
    return total.as_dict()


def _preflight(work: Path, ckpt_dir: Path | None, net: CTRModel, store: StoreConfig, bounds: Mapping[str, TableBound],
               periodic: bool = True) -> dict[str, int]:
    """Work dir (and checkpoint dir) writable, with room for the SSD tier and ``keep + 1``
    checkpoints (``periodic``; else the final one alone), each table sized by what bounds it (:mod:`fbrapids.runs.disk_budget`: a hashed
    feature by its buckets, a raw id by its dictionary's rows), not by the log's rows.
    Returns the bytes needed, by what."""
    from fbrapids.runs.disk_budget import disk_need
    from fbrapids.runs.workdir import preflight

    dense = sum(t.numel() * t.element_size() for t in net.state_dict().values())
    need = disk_need(bounds, store.width * 4, dense, KEEP_CHECKPOINTS if periodic else 0,
                     ssd=store.ssd_dir is not None, checkpoints=ckpt_dir is not None)
    log.info("embedding tables at most: %s", ", ".join(f"{k} {b.rows:,} ({b.why})" for k, b in bounds.items()))
    # a resumed run with an SSD tier rewrites its file, and one with periodic checkpoints prunes
    # the checkpoints there to the kept ones: what they hold now is space it reuses.  Without
    # periodic checkpoints it adds the final one beside those there; a run without an SSD
    # tier leaves an older run's store folder as it is
    held = sum(sum(tree_bytes(p).values()) for p in (work / "store" if store.ssd_dir is not None else None,
                                                      ckpt_dir if periodic else None) if p is not None)
    if held:
        need["less what the store and checkpoints there hold" if periodic else "less what the store there holds"] \
            = -held
    dirs = {"work dir": work, **({"checkpoint dir": ckpt_dir} if ckpt_dir is not None else {})}
    preflight(dirs, need)
    return need


def batch_stream(source: FrameLike | Iterable[FrameLike], dense: list[str], sparse: list[str], batch_size: int,
                 seed: int, nan: str = "error", label: str = LABEL, group: str | None = GROUP,
                 shuffle_buffer: int = 0) -> BatchStream:
    """The trainer's stream of ``source`` (the label, group and the given features) as
    :func:`run_pipeline` streams it (its training days with ``shuffle_buffer=SHUFFLE_BUFFER``):
    the same batches in the same order for the same rows, batch size, seed and buffer however
    the rows are partitioned (``label`` / ``group``: the workload's; default the generated data's)."""
    from fbrapids.trainers.stream import stream

    return stream(source, label=label, dense=dense, sparse=sparse, group=group, batch_size=batch_size,
                  seed=seed, prefetch=1, nan=nan, shuffle_buffer=shuffle_buffer)


def training_batches(rows: int, seed: int = 0, batch_size: int = 2048,
                     data: str | Path | None = None) -> tuple[list[Batch], list[Batch], TrainingInputs]:
    """The training and held-out batches ``fbrapids demo --rows rows --seed seed`` trains and
    evaluates the DLRM on (the same plan, stream, shuffle and seed), read into memory, and
    the run's inputs: what ``benchmarks/training_loop.py`` times the trainers on.

    Example:
        >>> import tempfile
        >>> from fbrapids.datasets.synthetic.generate import generate
        >>> d = tempfile.mkdtemp(); _ = generate(3000, d)
        >>> train, test, inputs = training_batches(3000, batch_size=512, data=d)
        >>> len(train) > 0 and len(test) > 0, inputs.model
        (True, 'dlrm')
    """
    w, inputs, frames = demo_plan(rows, seed, batch_size, data)
    train, test = demo_passes(w, inputs, frames, batch_size, seed)
    return train, test, inputs


def demo_plan(rows: int, seed: int = 0, batch_size: int = 2048,
              data: str | Path | None = None) -> tuple[Workload, TrainingInputs, PlannedFrames]:
    """The workload, the DLRM's inputs and the planned frames of ``fbrapids demo --rows rows
    --seed seed`` (its data generated once into the cache, or read from ``data``): what
    :func:`demo_passes` extracts."""
    from fbrapids.datasets.synthetic.generate import ensure_dataset
    from fbrapids.runs.data_cache import default_data_dir

    folder = Path(data) if data is not None else ensure_dataset(rows, default_data_dir(rows, seed), seed=seed)
    w = as_workload(folder)
    inputs = training_inputs(w, "dlrm", 16, batch_size, seed)
    return w, inputs, plan_frames(inputs, w)


def demo_passes(w: Workload, inputs: TrainingInputs, frames: PlannedFrames, batch_size: int,
                seed: int) -> tuple[list[Batch], list[Batch]]:
    """The training and held-out batches of the planned ``frames``, extracted as the demo's
    stream extracts them (one pass, the held-out partitions computed beside the training
    ones, the training rows shuffled through :data:`SHUFFLE_BUFFER`, dask's threads), into
    memory: :func:`training_batches` after its plan, and what
    ``benchmarks/training_loop.py`` times as the demo's extraction alone."""
    import dask

    columns = [w.label, *([w.group] if w.group else []), *inputs.dense, *inputs.sparse]
    with dask.config.set(scheduler="threads"):
        train_pass, test_pass = TimedPartitions.with_held_out(frames.train, frames.test, window=1, columns=columns)
        train = list(batch_stream(train_pass, inputs.dense, inputs.sparse, batch_size, seed, "error", w.label,
                                  w.group, SHUFFLE_BUFFER))
        test = list(batch_stream(test_pass, inputs.dense, inputs.sparse, batch_size, seed, "error", w.label,
                                 w.group))
    return train, test


def _store_totals(model: CTRModel) -> dict[str, dict[str, float]]:
    """Per-tier statistics summed over every embedding table of ``model``."""
    totals: dict[str, dict[str, float]] = {}
    for store in model.stores().values() if hasattr(model, "stores") else []:
        for tier, s in store.stats().items():
            if not isinstance(s, dict):
                continue
            t = totals.setdefault(tier, {"hits": 0, "misses": 0, "evictions": 0, "bytes_moved": 0})
            for key in ("hits", "misses", "evictions"):
                t[key] += int(s.get(key, 0))
            t["bytes_moved"] += int(s.get("bytes_in", 0)) + int(s.get("bytes_out", 0))
    for t in totals.values():
        looked = t["hits"] + t["misses"]
        t["hit_rate"] = t["hits"] / looked if looked else float("nan")
    return totals
