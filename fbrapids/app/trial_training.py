"""A feature trial's training: one extraction pass, 2·K models side by side.

The baseline's and the candidates' features are extracted together, once per partition
(:func:`fbrapids.app.pipeline.plan_frames` with the candidates as extra features), and
one stream of batches feeds every model: for each seed ``s`` of ``seeds``, a baseline
and a candidate arm built as one architecture under ``torch.manual_seed(s)`` and stores
seeded ``s`` (:mod:`fbrapids.trainers.arms`: the arms start as the same function, the
baseline arm sees the candidates' inputs as a placebo), and with ``aa=True`` an A/A arm
(the candidate arm's architecture and start, the candidates' values shuffled across each
batch's rows), trained side by side
(:mod:`fbrapids.trainers.side_by_side`).  The training rows come as a plain run streams
them (:func:`fbrapids.app.pipeline.batch_stream`, shuffled within
:data:`fbrapids.app.pipeline.SHUFFLE_WINDOW` rows, the order fixed by the first seed): the
same batches in the same order for every arm and seed (``ArmsRun.order`` fingerprints
it).  The held-out day is streamed once too, in its own order, and every model predicts it.

Example:
    >>> import tempfile
    >>> from fbrapids import ops
    >>> from fbrapids.datasets.synthetic.generate import generate
    >>> d = tempfile.mkdtemp(); _ = generate(3000, d)
    >>> run = train_arms(d, {"slot_x_os": ops.cross("slot", "os")}, seeds=[0], batch_size=512, progress=False)
    >>> len(run.baseline), len(run.candidate), run.extraction["models"], run.extraction["partitions"] > 0
    (1, 1, 2, True)
    >>> run.aa  # no A/A arms unless asked
    []
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from fbrapids.errors import ArgumentError

if TYPE_CHECKING:  # (annotations only)
    from fbrapids.trainers.batch import Batch

log = logging.getLogger(__name__)

#: ``trial``'s options beyond its own, with their defaults (run_pipeline's where it has one;
#: the trial's cache is smaller: 2·K models hold one each)
OPTIONS = {"backend": None, "epochs": 1, "batch_size": 2048, "embedding_dim": 16, "cache_rows": 1 << 16,
           "host_rows": None, "train_threads": None, "nan": "error", "count_clean": False, "work_dir": None}


@dataclass
class ArmsRun:
    """Held-out predictions of every arm (``baseline[i]`` / ``candidate[i]`` trained with
    ``seeds[i]``), the labels and groups, and what the one extraction pass did."""

    seeds: list[int]
    label: np.ndarray
    group: np.ndarray
    baseline: list[np.ndarray] = field(default_factory=list)
    candidate: list[np.ndarray] = field(default_factory=list)
    aa: list[np.ndarray] = field(default_factory=list)  # the A/A arms' (``aa=True``), one per seed
    extraction: dict[str, int] = field(default_factory=dict)  # launches, partitions, rows streamed
    seconds: dict[str, float] = field(default_factory=dict)
    zeroed: list[str] = field(default_factory=list)  # the candidate-input weights started at 0
    rows: dict[str, int] = field(default_factory=dict)  #: rows every model trained on (per epoch) and held out
    split: dict[str, Any] = field(default_factory=dict)  #: the split as checked before training (SplitCheck.as_dict)
    order: str = ""  # sha1 of the training batches' labels and groups, in the order every model read them


def train_arms(data: Any, candidates: dict[str, Any], *, kind: str = "sparse", model: str = "dlrm",
               seeds: Sequence[int] = (0,), progress: bool = True, sequences: dict[str, str] | None = None,
               paired: bool = True, aa: bool = False, split_check: Any = None, **options: Any) -> ArmsRun:
    """Extract once, train a baseline and a candidate arm per seed side by side, predict the
    held-out rows (see the module docstring) of ``data``, a
    :class:`~fbrapids.workloads.Workload` or a folder of generated data; ``options``: :data:`OPTIONS`.

    ``paired=False`` builds the arms as separate models instead, as trials did before: the
    baseline over the baseline's features only, the candidate over all of them, each
    initialised under the seed with nothing zeroed (still one extraction pass); it is there
    to measure what the pairing buys.  ``aa=True`` adds an A/A arm per seed
    (:func:`fbrapids.trainers.arms.shuffled_view`).  ``split_check``: the split's check, when
    already made (:func:`~fbrapids.workloads.split_check.check_split`)."""
    import dask
    import torch

    from fbrapids import kernels as kernel_stats
    from fbrapids.frames.backend import get_backend
    from fbrapids.datasets.synthetic import as_workload
    from fbrapids.app.pipeline import SHUFFLE_WINDOW, TimedPartitions, batch_stream, build_model, plan_frames, \
        training_inputs, training_threads
    from fbrapids.workloads import SequenceFeature
    from fbrapids.trainers.arms import zero_candidate_inputs
    from fbrapids.trainers.side_by_side import CountedBatches, fit_side_by_side, predict_side_by_side
    from fbrapids.trainers.sparse import StoreConfig
    from fbrapids.runs.workdir import temporary_work_dir

    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ArgumentError(f"trial: unknown option(s) {unknown}; known: {', '.join(sorted(OPTIONS))}")
    opt = {**OPTIONS, **options}
    be = get_backend(opt["backend"])
    new = list(candidates)
    new_dense, new_sparse = (new, []) if kind == "dense" else ([], list(new))
    w = as_workload(data)
    if sequences is not None:  # candidate sequences: the baseline arm trains with none
        w = w.replace(sequences={})
    w = w.with_features(candidates, sparse=new_sparse, dense=new_dense,
                        sequences={n: SequenceFeature(t) for n, t in (sequences or {}).items()})
    dense, sparse, seqs, _ = w.model_inputs(model)
    for s in seqs:
        if s in new and s not in new_sparse:
            new_sparse.append(s)
    t0 = time.perf_counter()
    run = ArmsRun([int(s) for s in seeds], np.zeros(0), np.zeros(0))
    with dask.config.set(scheduler="threads"), temporary_work_dir() as tmp:
        work = Path(opt["work_dir"]) if opt["work_dir"] is not None else Path(tmp)
        inputs = training_inputs(w, model, opt["embedding_dim"], opt["batch_size"], run.seeds[0])
        frames = plan_frames(inputs, w, be.name, check=split_check)  # the split and the stream's columns checked
        train, test = frames.train, frames.test
        run.split = {**frames.split.as_dict(), "text": frames.split.render()} if frames.split is not None else {}
        if frames.fitted_state is not None:
            run.seconds["fit"] = frames.fit_s
        models, views = [], []
        arms = ("baseline", "candidate", "aa") if aa else ("baseline", "candidate")
        for s in run.seeds:
            for arm in arms:
                ssd = str(work / f"seed{s}" / arm) if opt["host_rows"] is not None else None
                store = StoreConfig(cache_rows=opt["cache_rows"], host_rows=opt["host_rows"], ssd_dir=ssd, seed=s)
                torch.manual_seed(s)  # both arms of a seed: the same draw of every parameter
                if not paired and arm == "baseline":
                    keep_d = [c for c in dense if c not in new_dense]
                    keep_s = [f for f in sparse if f not in new_sparse]
                    models.append(build_model(model, len(keep_d), keep_s, store, opt["embedding_dim"],
                                              sequences={k: v for k, v in seqs.items() if k in keep_s}))
                    views.append(_DropView(dense, new_dense))
                    continue
                net = build_model(model, len(dense), sparse, store, opt["embedding_dim"], sequences=seqs)
                if paired:
                    run.zeroed = zero_candidate_inputs(net, dense, sparse, new_dense, new_sparse)
                models.append(net)
                views.append(_BaselineView(dense, new_dense, new_sparse) if arm == "baseline" else
                             _ShuffledView(dense, new_dense, new_sparse, s) if arm == "aa" else None)
        run.seconds["plan"] = time.perf_counter() - t0
        if frames.split is not None:  # every check passed: what is about to train, and on what
            frames.split.announce(w.origin)
        kernel_stats.reset_stats()  # the streamed partitions' kernels only
        columns = [w.label, *([w.group] if w.group else []), *dense, *sparse]
        producer = TimedPartitions(train, window=1, columns=columns)
        test_producer = TimedPartitions(test, window=1, columns=columns)

        def batches(source: Any, window: int) -> Any:  # the pipeline's stream: its batches, its order
            return batch_stream(source, dense, sparse, opt["batch_size"], run.seeds[0], opt["nan"], w.label,
                                w.group, window)

        with training_threads(opt["train_threads"], be.is_gpu):  # every core but one on the CPU
            t = time.perf_counter()
            train_stream = CountedBatches(batches(producer, SHUFFLE_WINDOW))
            steps = fit_side_by_side(models, train_stream, views=views, epochs=opt["epochs"], progress=progress)
            run.seconds["extract+train"] = time.perf_counter() - t
            t = time.perf_counter()
            preds = predict_side_by_side(models, batches(test_producer, 0), views=views, progress=progress)
            run.seconds["extract+predict"] = time.perf_counter() - t
        ks = kernel_stats.stats()
    run.label, run.group = preds[0]["label"], preds[0]["group"]
    n = len(arms)
    run.baseline = [p["pred"] for p in preds[0::n]]
    run.candidate = [p["pred"] for p in preds[1::n]]
    run.aa = [p["pred"] for p in preds[2::n]] if aa else []
    run.order = train_stream.digest.hexdigest()
    run.rows = {"trained": train_stream.rows // max(1, int(opt["epochs"])), "held out": len(run.label)}
    run.extraction = {"launches": int(ks["launches"]), "partitions": producer.partitions + test_producer.partitions,
                      "rows streamed": train_stream.rows + len(run.label),
                      "steps per model": int(steps), "models": len(models)}
    run.seconds["extract busy"] = producer.busy_s + test_producer.busy_s
    log.info("trial: %d models trained side by side from one extraction pass (%d kernel launches, %d partitions)",
             len(models), run.extraction["launches"], run.extraction["partitions"])
    return run


class _DropView:
    """An unpaired baseline's view of a batch: the candidates' dense columns left out (its
    model reads only its own sparse features)."""

    def __init__(self, dense: list[str], new_dense: list[str]) -> None:
        self.keep = [i for i, c in enumerate(dense) if c not in new_dense]

    def __call__(self, batch: Batch) -> Batch:
        from fbrapids.trainers.batch import Batch

        return Batch(batch.dense[:, self.keep], batch.label, batch.sparse, batch.group)


class _BaselineView:
    """A baseline arm's view of a batch (:func:`fbrapids.trainers.arms.baseline_view`)."""

    def __init__(self, dense: list[str], new_dense: list[str], new_sparse: list[str]) -> None:
        self.dense, self.new_dense, self.new_sparse = dense, new_dense, new_sparse

    def __call__(self, batch: Batch) -> Batch:
        from fbrapids.trainers.arms import baseline_view

        return baseline_view(batch, self.dense, self.new_dense, self.new_sparse)


class _ShuffledView:
    """An A/A arm's view of a batch (:func:`fbrapids.trainers.arms.shuffled_view`), its
    permutations drawn from a generator seeded with the arm's seed."""

    def __init__(self, dense: list[str], new_dense: list[str], new_sparse: list[str], seed: int) -> None:
        import torch

        self.dense, self.new_dense, self.new_sparse = dense, new_dense, new_sparse
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, batch: Batch) -> Batch:
        from fbrapids.trainers.arms import shuffled_view

        return shuffled_view(batch, self.dense, self.new_dense, self.new_sparse, self.generator)
