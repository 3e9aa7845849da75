"""A feature trial's training: the arms, and passes of side-by-side training from one plan.

**The arms.**  Every seed trains the same arms (:func:`plan_arms`), all built as **one
architecture** under ``torch.manual_seed(seed)`` with stores seeded ``seed``
(:mod:`fbrapids.trainers.arms`: they start as the same function):

* candidates together (``each=False``): a baseline arm, a candidate arm reading every
  candidate, and with ``aa=True`` an A/A arm reading them shuffled across each batch's rows.
  The model reads the baseline's inputs and one input per candidate.
* each candidate on its own (``each=True``): a baseline arm, one arm per candidate, and with
  ``aa=True`` an A/A arm per candidate.  The model reads the baseline's inputs and **one
  candidate slot** (:data:`SLOT`): candidate ``c``'s arm puts ``c``'s values in it, its A/A
  arm ``c``'s values shuffled, the baseline the placebo.  So every arm has the shape of a
  one-candidate trial's, and candidate ``c`` is compared as a trial of ``c`` alone would
  compare it, against a baseline trained once for all.

Each arm reads its *view* of the stream's batch (:class:`ArmView`): the baseline's inputs as
they are, and in the candidates' places their values, the placebo (the baseline: nothing
of them) or their shuffled copy (A/A).

**Passes.**  The features of the baseline and of every candidate are extracted together
(:func:`fbrapids.app.pipeline.plan_frames`, the candidates as extra features), planned once
per trial.  A pass (:meth:`ArmsSession.train`) streams the training rows once (extraction
beside training, as a plain run streams them: :func:`fbrapids.app.pipeline.batch_stream`,
shuffled through a buffer of :data:`fbrapids.app.pipeline.SHUFFLE_BUFFER` rows, the order fixed by the
trial's first seed, ``order_seed``, so every pass, arm and seed reads the same batches in the same order;
``SeedRun.order`` fingerprints it) and trains every arm of its seeds side by side
(:mod:`fbrapids.trainers.side_by_side`), then streams the held-out rows once and every
model predicts them.  A trial runs one pass for all its seeds, or several (a trial
resumable seed by seed, a sequential design's looks, or more models than
``models_per_pass``).  A pass another may follow keeps its training and held-out batches in
memory, up to :data:`KEPT_BATCHES_BYTES` (:class:`~fbrapids.trainers.kept_batches.KeptBatches`),
and the next pass trains and predicts on those, the same batches in the same order, without
extracting the rows again (past the limit it extracts them again; ``extraction["passes
extracted"]`` counts the passes that did, and their busy seconds are reported).

Example:
    >>> import tempfile
    >>> from fbrapids import ops
    >>> from fbrapids.datasets.synthetic.generate import generate
    >>> d = tempfile.mkdtemp(); _ = generate(3000, d)
    >>> arms = plan_arms(["slot_x_os"], each=False, aa=False)
    >>> [a.name for a in arms]
    ['baseline', 'candidate']
    >>> with ArmsSession(d, {"slot_x_os": ops.cross("slot", "os")}, arms, batch_size=512) as session:
    ...     runs = session.train([0], progress=False)
    >>> sorted(runs[0].preds), runs[0].rows > 0, session.extraction["models"]
    (['baseline', 'candidate'], True, 2)
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence, TypedDict, Unpack

import numpy as np

from fbrapids.errors import ArgumentError, TrialError

if TYPE_CHECKING:  # (annotations only)
    from fbrapids.app.pipeline import TimedPartitions
    from fbrapids.frames.backend import Backend
    from fbrapids.kernels import Expr
    from fbrapids.trainers.batch import Batch
    from fbrapids.trainers.kept_batches import KeptBatches
    from fbrapids.trainers.models.base import CTRModel
    from fbrapids.trainers.side_by_side import CountedBatches
    from fbrapids.trainers.stream import BatchStream
    from fbrapids.workloads import Workload
    from fbrapids.workloads.split_check import SplitCheck

log = logging.getLogger(__name__)

#: ``trial``'s options beyond its own, with their defaults (run_pipeline's where it has one;
#: the trial's cache is smaller: every model holds one).  ``models_per_pass``: the most
#: models one pass trains side by side (:func:`plan_passes`).  36 (10 candidates without A/A
#: arms, 33 models, in one pass instead of 22 + 11) was measured and not kept: on 2 cores it was
#: faster in a fresh process (43.8, 45.0 s against 47.7, 52.7 s) but slower after a plain run
#: and another trial in the same process, as a benchmark runs it (44.1, 48.0 s against 41.7,
#: 37.1 s), and its peak memory was 5.0 GB against 3.9-4.0 GB at 200,000 rows
class TrialOptions(TypedDict, total=False):
    """``trial``'s options beyond its own (:data:`OPTIONS`)."""

    backend: str | None
    epochs: int
    batch_size: int
    embedding_dim: int
    cache_rows: int
    host_rows: int | None
    train_threads: int | None
    nan: str
    count_clean: bool
    work_dir: str | Path | None
    models_per_pass: int


OPTIONS: TrialOptions = {"backend": None, "epochs": 1, "batch_size": 2048, "embedding_dim": 16, "cache_rows": 1 << 16,
           "host_rows": None, "train_threads": None, "nan": "error", "count_clean": False, "work_dir": None,
           "models_per_pass": 24}

#: a pass that another may follow keeps its training and held-out batches for it up to this
#: many bytes in all (:class:`~fbrapids.trainers.kept_batches.KeptBatches`); past it the next
#: pass extracts the rows again.  200,000 generated rows with 10 candidates keep 181 MB (155 MB of
#: training batches, 26 MB held out)
KEPT_BATCHES_BYTES = 1 << 30

#: the model input a candidate fills in ``each=True`` trials (renamed when a baseline input has the name)
SLOT = "candidate"


@dataclass(frozen=True)
class Arm:
    """One model per seed: ``role`` ``"baseline"`` (candidates as placebo), ``"candidate"``
    (reads ``reads``' values) or ``"aa"`` (reads them shuffled across each batch's rows)."""

    name: str
    role: str
    reads: tuple[str, ...] = ()


def plan_arms(candidates: Sequence[str], each: bool, aa: bool) -> list[Arm]:
    """The arms every seed trains (module docstring), the baseline first.

    Example:
        >>> [a.name for a in plan_arms(["a", "b"], each=True, aa=True)]
        ['baseline', 'candidate:a', 'candidate:b', 'aa:a', 'aa:b']
        >>> plan_arms(["a", "b"], each=False, aa=False)[1]
        Arm(name='candidate', role='candidate', reads=('a', 'b'))
    """
    names = tuple(candidates)
    if not each:
        return [Arm("baseline", "baseline"), Arm("candidate", "candidate", names)] + \
            ([Arm("aa", "aa", names)] if aa else [])
    return [Arm("baseline", "baseline"), *(Arm(f"candidate:{c}", "candidate", (c,)) for c in names),
            *((Arm(f"aa:{c}", "aa", (c,)) for c in names) if aa else ())]


def plan_passes(seeds: Sequence[int], arms_per_seed: int, models_per_pass: int) -> list[list[int]]:
    """``seeds`` in order, grouped into passes of at most ``models_per_pass`` models (at least
    one seed each).

    Example:
        >>> plan_passes([0, 1, 2], 3, 24), plan_passes([0, 1, 2], 11, 24), plan_passes([0, 1], 21, 24)
        ([[0, 1, 2]], [[0, 1], [2]], [[0], [1]])
    """
    per = max(1, models_per_pass // max(1, arms_per_seed))
    return [list(seeds[i:i + per]) for i in range(0, len(seeds), per)]


@dataclass
class SeedRun:
    """One seed's held-out predictions, by arm name, and what its pass did (``rows``: the
    training rows each model read per epoch; ``order``: sha1 of the training batches' labels
    and groups in the order every model read them)."""

    seed: int
    preds: dict[str, np.ndarray]
    rows: int = 0
    steps: int = 0
    order: str = ""


class ArmsSession:
    """One trial's training (module docstring): the frames planned once; :meth:`train` runs a
    pass for some seeds.  A context manager (a temporary work dir for stores' SSD tiers,
    dask's threads).  ``options``: :data:`OPTIONS`; ``paired=False`` builds the arms of
    ``each=False`` as separate models (the baseline over the baseline's inputs only, nothing
    zeroed: what the pairing buys); ``order_seed``: the stream's shuffle seed (the
    trial's first seed, whichever seeds a pass trains)."""

    def __init__(self, data: Workload | str | Path, candidates: Mapping[str, Expr], arms: Sequence[Arm], *,
                 kind: str = "sparse",
                 model: str = "dlrm", sequences: dict[str, str] | None = None, paired: bool = True,
                 split_check: SplitCheck | None = None, order_seed: int = 0,
                 **options: Unpack[TrialOptions]) -> None:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ArgumentError(f"trial: unknown option(s) {unknown}; known: {', '.join(sorted(OPTIONS))}")
        self.opt: TrialOptions = {**OPTIONS, **options}
        self.data_source = data
        self.candidates, self.arms, self.kind, self.model = dict(candidates), list(arms), kind, model
        self.each = any(a.name.startswith("candidate:") for a in self.arms)
        self.paired, self.sequences, self.split_check, self.order_seed = paired, sequences, split_check, order_seed
        self.extraction: dict[str, int] = {"launches": 0, "partitions": 0, "rows streamed": 0, "models": 0,
                                           "passes": 0, "passes extracted": 0}
        self._kept: tuple[KeptBatches, KeptBatches] | None = None  # a pass's batches, kept for the next
        self.seconds: dict[str, float] = {}
        self.label = self.group = np.zeros(0)
        self.split: dict[str, object] = {}
        self.zeroed: list[str] = []
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "ArmsSession":
        import dask

        from fbrapids.runs.workdir import temporary_work_dir

        self._stack.enter_context(dask.config.set(scheduler="threads"))
        tmp = self._stack.enter_context(temporary_work_dir())
        self.work = Path(self.opt["work_dir"]) if self.opt["work_dir"] is not None else Path(tmp)
        self._plan()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _plan(self) -> None:
        """The workload with the candidates, the inputs of the stream and of the model, the
        lazy frames (the split and the stream's columns checked): once per trial."""
        from fbrapids.app.pipeline import plan_frames, training_inputs
        from fbrapids.datasets.synthetic import as_workload
        from fbrapids.workloads import SequenceFeature

        t0 = time.perf_counter()
        new = list(self.candidates)
        self.new_dense, self.new_sparse = (new, []) if self.kind == "dense" else ([], list(new))
        w = as_workload(self.data_source)
        if self.sequences is not None:  # candidate sequences: the baseline arm trains with none
            w = w.replace(sequences={})
        self.w = w.with_features(self.candidates, sparse=self.new_sparse, dense=self.new_dense,
                                 sequences={n: SequenceFeature(t) for n, t in (self.sequences or {}).items()})
        self.dense, self.sparse, self.seqs, _ = self.w.model_inputs(self.model)
        for s in self.seqs:
            if s in new and s not in self.new_sparse:
                self.new_sparse.append(s)
        inputs = training_inputs(self.w, self.model, self.opt["embedding_dim"], self.opt["batch_size"],
                                 self.order_seed)
        self.run_settings = inputs.run  #: what a resumed trial must share with the run it continues
        self.frames = plan_frames(inputs, self.w, self._backend().name, check=self.split_check)
        frames = self.frames
        self.split = {**frames.split.as_dict(), "text": frames.split.render()} if frames.split is not None else {}
        if frames.fitted_state is not None:
            self.seconds["fit"] = frames.fit_s
        self.layout = ModelLayout(self.dense, self.sparse, self.new_dense, self.new_sparse, self.each)
        self.seconds["plan"] = time.perf_counter() - t0

    def _backend(self) -> Backend:
        from fbrapids.frames.backend import get_backend

        return get_backend(self.opt["backend"])

    def train(self, seeds: Sequence[int], progress: bool = True, keep: bool = False) -> list[SeedRun]:
        """One pass: every arm of ``seeds`` trained side by side on one stream of the training
        rows, then every model's held-out predictions; a :class:`SeedRun` per seed.  ``keep``:
        another pass may follow, so this one keeps its batches for it where they fit
        (:data:`KEPT_BATCHES_BYTES`); a pass after one that kept them streams those instead of
        extracting the rows again."""
        from fbrapids import kernels as kernel_stats
        from fbrapids.app.pipeline import training_threads
        from fbrapids.trainers.kept_batches import KeptBatches
        from fbrapids.trainers.side_by_side import CountedBatches, fit_side_by_side, predict_side_by_side, side_by_side

        if not self.extraction["passes"] and self.frames.split is not None:
            self.frames.split.announce(self.w.origin)  # every check passed: what is about to train, and on what
        t0 = time.perf_counter()
        models, views = self._build(seeds)
        kernel_stats.reset_stats()  # the streamed partitions' kernels only
        replay = self._replay()
        producers = self._producers() if replay is None else None
        train_batches: Iterable[Batch] = replay[0] if replay is not None else \
            self._batches(self._producer(producers, 0), shuffle=True)
        kept: list[KeptBatches] = []
        if keep and replay is None:
            kept.append(KeptBatches(train_batches, KEPT_BATCHES_BYTES))
            train_batches = kept[0]
        with training_threads(self._threads(len(models)), self._backend().is_gpu):
            t = time.perf_counter()
            stream = CountedBatches(train_batches)
            arms = side_by_side(models, views)  # shared tables and batched dense parts where the models allow
            steps = fit_side_by_side(models, stream, views=views, epochs=self.opt["epochs"], progress=progress,
                                     strategy=arms)
            self._add_seconds("extract+train", time.perf_counter() - t)
            t = time.perf_counter()
            test_batches: Iterable[Batch] = replay[1] if replay is not None else \
                self._batches(self._producer(producers, 1), shuffle=False)  # (made once the training is over)
            if kept and kept[0].replay(int(self.opt["epochs"])) is not None:  # what is left of the bytes, for these
                kept.append(KeptBatches(test_batches, KEPT_BATCHES_BYTES - kept[0].bytes))
                test_batches = kept[1]
            preds = predict_side_by_side(models, test_batches, views=views, progress=progress, strategy=arms)
            self._add_seconds("extract+predict", time.perf_counter() - t)
        self.batched = type(arms).__name__ == "BatchedArms"
        self._record_pass(preds[0], producers, stream, len(models))
        if len(kept) == 2:
            self._kept = (kept[0], kept[1])
        elif not keep:  # no pass follows: the batches kept are let go
            self._kept = None
        self._add_seconds("pass", time.perf_counter() - t0)
        n = len(self.arms)
        rows = stream.rows // max(1, int(self.opt["epochs"]))
        return [SeedRun(int(s), {a.name: p["pred"] for a, p in zip(self.arms, preds[i * n:(i + 1) * n])},
                        rows, int(steps), stream.digest.hexdigest()) for i, s in enumerate(seeds)]

    @staticmethod
    def _producer(producers: tuple[TimedPartitions, TimedPartitions] | None, k: int) -> TimedPartitions:
        """The training (0) or held-out (1) pass of a pass that extracts its rows."""
        assert producers is not None  # (a pass that replays kept batches has none)
        return producers[k]

    def _replay(self) -> tuple[Iterable[Batch], Iterable[Batch]] | None:
        """The training and held-out batches an earlier pass kept (:meth:`train`'s ``keep``),
        streamed again; None where it kept none."""
        if self._kept is None:
            return None
        train, test = self._kept[0].replay(int(self.opt["epochs"])), self._kept[1].replay()
        if train is None or test is None:
            return None
        return train, test

    def _threads(self, models: int) -> int | None:
        """torch's threads for a pass of ``models``: the user's, else on the CPU every core
        when several models train side by side (their dense work outweighs the extraction
        beside it: K = 3 with A/A at 200k, 2 cores, trained in 13.7 s on one thread and 11.9 s
        on two), else every core but one (None: :func:`~fbrapids.app.pipeline.training_threads`)."""
        if self.opt["train_threads"] is not None or models < 2 or self._backend().is_gpu:
            return self.opt["train_threads"]
        return os.cpu_count() or None

    def _add_seconds(self, key: str, s: float) -> None:
        self.seconds[key] = self.seconds.get(key, 0.0) + s

    def _producers(self) -> tuple[TimedPartitions, TimedPartitions]:
        from fbrapids.app.pipeline import TimedPartitions

        w = self.w
        columns = [w.label, *([w.group] if w.group else []), *self.dense, *self.sparse]
        # the held-out rows computed with the training rows
        return TimedPartitions.with_held_out(self.frames.train, self.frames.test, window=1, columns=columns)

    def _batches(self, source: TimedPartitions, shuffle: bool) -> BatchStream:
        """The pipeline's stream of ``source``: its batches, its order."""
        from fbrapids.app.pipeline import SHUFFLE_BUFFER, batch_stream

        return batch_stream(source, self.dense, self.sparse, self.opt["batch_size"], self.order_seed,
                            self.opt["nan"], self.w.label, self.w.group, SHUFFLE_BUFFER if shuffle else 0)

    def _record_pass(self, held: dict[str, np.ndarray], producers: tuple[TimedPartitions, TimedPartitions] | None,
                     stream: CountedBatches, models: int) -> None:
        """The pass's held-out labels and groups (every pass streams the same held-out rows:
        checked) and its extraction counts, added to the trial's (``producers`` None: the pass
        streamed batches an earlier one kept, extracting nothing)."""
        from fbrapids import kernels as kernel_stats

        label, group = held["label"], held.get("group", np.zeros(0))
        if self.extraction["passes"] and not (np.array_equal(label, self.label) and np.array_equal(group, self.group)):
            raise TrialError("trial: the held-out rows came in another order in this pass than in the first; the "
                             "arms' predictions cannot be paired")
        self.label, self.group = label, group
        ks = kernel_stats.stats()
        parts = producers[0].partitions + producers[1].partitions if producers is not None else 0
        for key, value in (("launches", int(ks["launches"])), ("partitions", parts),
                           ("rows streamed", stream.rows + len(label)), ("models", models), ("passes", 1),
                           ("passes extracted", int(producers is not None))):
            self.extraction[key] += value
        if producers is not None:
            busy = producers[0].busy_s + producers[1].busy_s
            self.seconds["extract busy"] = self.seconds.get("extract busy", 0.0) + busy
            log.info("trial: %d models trained side by side in one pass (%d kernel launches, %d partitions)", models,
                     int(ks["launches"]), parts)
        else:
            log.info("trial: %d models trained side by side in one pass, on the batches the first pass kept "
                     "(%s bytes: no extraction)", models, f"{self._kept[0].bytes + self._kept[1].bytes:,}"
                     if self._kept is not None else "?")

    def _build(self, seeds: Sequence[int]) -> tuple[list[CTRModel], list[ArmView | _DropView]]:
        """Every arm of every seed: the models, and the views of the stream's batches they read."""
        models, views = [], []
        for s in seeds:
            for arm in self.arms:
                net, view = self._arm_model(int(s), arm)
                models.append(net)
                views.append(view)
        return models, views

    def _arm_model(self, seed: int, arm: Arm) -> tuple[CTRModel, ArmView | _DropView]:
        """``arm``'s model for ``seed`` (built under ``torch.manual_seed(seed)``, the
        candidates' inputs zeroed when paired) and its view."""
        import torch

        from fbrapids.app.pipeline import build_model
        from fbrapids.trainers.arms import zero_candidate_inputs
        from fbrapids.trainers.sparse import StoreConfig

        lay, opt = self.layout, self.opt
        ssd = str(self.work / f"seed{seed}" / arm.name.replace(":", "-")) if opt["host_rows"] is not None else None
        store = StoreConfig(cache_rows=opt["cache_rows"], host_rows=opt["host_rows"], ssd_dir=ssd, seed=seed)
        torch.manual_seed(seed)  # every arm of a seed: the same draw of every parameter
        if not self.paired and arm.role == "baseline":
            keep_d = [c for c in self.dense if c not in self.new_dense]
            keep_s = [f for f in self.sparse if f not in self.new_sparse]
            net = build_model(self.model, len(keep_d), keep_s, store, opt["embedding_dim"],
                              sequences={k: v for k, v in self.seqs.items() if k in keep_s})
            return net, _DropView(self.dense, self.new_dense)
        seqs = lay.model_sequences(self.seqs)
        net = build_model(self.model, len(lay.model_dense), lay.model_sparse, store, opt["embedding_dim"],
                          sequences=seqs)
        if self.paired:
            self.zeroed = zero_candidate_inputs(net, lay.model_dense, lay.model_sparse, lay.slots_dense,
                                                lay.slots_sparse)
        return net, ArmView(lay, arm, seed)


class ModelLayout:
    """Where a trial's model reads each input from the stream's batch.

    ``each=False``: the model's inputs are the stream's (the baseline's, then the
    candidates'), each candidate its own slot.  ``each=True``: the baseline's inputs, then one
    slot (:data:`SLOT`, renamed past any baseline name) that each arm fills from its candidate.

    Example:
        >>> lay = ModelLayout(["d0", "a"], ["s0", "b"], ["a"], ["b"], each=True)
        >>> lay.model_dense, lay.model_sparse, lay.slots_dense, lay.slots_sparse
        (['d0', 'candidate'], ['s0', 'candidate'], ['candidate'], ['candidate'])
    """

    def __init__(self, dense: list[str], sparse: list[str], new_dense: list[str], new_sparse: list[str],
                 each: bool) -> None:
        self.dense, self.sparse, self.each = list(dense), list(sparse), each
        self._columns: dict[str, list[int]] = {}  # the model's dense columns in the batch's, by candidate
        self.new_dense, self.new_sparse = list(new_dense), list(new_sparse)
        if not each:
            self.model_dense, self.model_sparse = list(dense), list(sparse)
            self.slots_dense, self.slots_sparse = list(new_dense), list(new_sparse)
            return
        slot = SLOT
        while slot in dense or slot in sparse:
            slot += "_"
        self.slot = slot
        self.model_dense = [c for c in dense if c not in new_dense] + ([slot] if new_dense else [])
        self.model_sparse = [f for f in sparse if f not in new_sparse] + ([slot] if new_sparse else [])
        self.slots_dense = [slot] if new_dense else []
        self.slots_sparse = [slot] if new_sparse else []

    def model_sequences(self, seqs: dict[str, str]) -> dict[str, str]:
        """DIN's sequences among the model's inputs (``each=True`` takes no sequence candidate)."""
        return {k: v for k, v in seqs.items() if k in self.model_sparse}

    def select(self, batch: Batch, candidate: str | None) -> Batch:
        """``batch`` (the stream's) as the model's inputs, the slot filled from ``candidate``
        (``each=True``; None: from the first candidate, for an arm that reads none of them)."""
        from fbrapids.trainers.batch import Batch

        if not self.each:
            return batch
        source = candidate if candidate is not None else (self.new_dense or self.new_sparse)[0]
        cols = self._columns.get(source)
        if cols is None:
            cols = self._columns[source] = [self.dense.index(c) for c in self.model_dense if c != self.slot] + \
                ([self.dense.index(source)] if self.new_dense else [])
        sparse = {f: batch.sparse[f] for f in self.model_sparse if f != self.slot}
        if self.new_sparse:
            sparse[self.slot] = batch.sparse[source]
        # every dense column in order (the candidates sparse): the batch's own, no copy (a view that changes
        # dense columns clones them first: baseline_view, shuffled_view)
        whole = cols == list(range(batch.dense.shape[1]))
        return Batch(batch.dense if whole else batch.dense[:, cols], batch.label, sparse, batch.group)


class ArmView:
    """An arm's view of the stream's batch (module docstring): the model's inputs
    (:meth:`ModelLayout.select`), the candidates' slots as the arm's role has them
    (:func:`fbrapids.trainers.arms.baseline_view`, :func:`~fbrapids.trainers.arms.shuffled_view`:
    permutations drawn from a generator seeded with the arm's seed)."""

    def __init__(self, layout: ModelLayout, arm: Arm, seed: int) -> None:
        import torch

        self.layout, self.arm, self.seed = layout, arm, seed
        self.generator = torch.Generator().manual_seed(seed) if arm.role == "aa" else None

    def sources(self, features: Sequence[str]) -> dict[str, str]:
        """What this arm reads in each of the model's sparse ``features``
        (:func:`fbrapids.trainers.arms_batched.sources`): the stream's feature, the placebo
        (every baseline arm alike), or its own shuffled copy.

        Example:
            >>> lay = ModelLayout([], ["s0", "a", "b"], [], ["a", "b"], each=True)
            >>> ArmView(lay, Arm("candidate:b", "candidate", ("b",)), 0).sources(["s0", "candidate"])
            {'s0': 's0', 'candidate': 'b'}
            >>> ArmView(lay, Arm("baseline", "baseline"), 3).sources(["candidate"])
            {'candidate': 'placebo'}
        """
        lay, arm = self.layout, self.arm
        out = {}
        for f in features:
            if f not in lay.slots_sparse:
                out[f] = f
            elif arm.role == "baseline":
                out[f] = "placebo"
            elif arm.role == "aa":
                out[f] = f"shuffled/{arm.name}/{self.seed}"
            else:
                out[f] = arm.reads[0] if lay.each else f
        return out

    def __call__(self, batch: Batch) -> Batch:
        from fbrapids.trainers.arms import baseline_view, shuffled_view

        lay = self.layout
        b = lay.select(batch, self.arm.reads[0] if self.arm.reads and lay.each else None)
        if self.arm.role == "baseline":
            return baseline_view(b, lay.model_dense, lay.slots_dense, lay.slots_sparse)
        if self.arm.role == "aa":
            return shuffled_view(b, lay.model_dense, lay.slots_dense, lay.slots_sparse, self.generator)
        return b


class _DropView:
    """An unpaired baseline's view of a batch: the candidates' dense columns left out (its
    model reads only its own sparse features)."""

    def __init__(self, dense: list[str], new_dense: list[str]) -> None:
        self.keep = [i for i, c in enumerate(dense) if c not in new_dense]

    def __call__(self, batch: Batch) -> Batch:
        from fbrapids.trainers.batch import Batch

        return Batch(batch.dense[:, self.keep], batch.label, batch.sparse, batch.group)
