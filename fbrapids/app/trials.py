"""Feature trials: does a candidate feature help?  The question FeatureBox exists to answer.

``trial`` trains a baseline and a baseline + candidates arm for each of K seeds, side by
side from one extraction plan (:mod:`fbrapids.app.trial_training`), and compares them on the
held-out last day.  ``each=True`` tries every candidate on its own against one shared
baseline and corrects the verdicts for the family (:mod:`fbrapids.app.trial_family`:
Holm's or Benjamini-Hochberg's method); ``min_effect`` runs a sequential design, adding
seeds only while an interval straddles the margin (:mod:`fbrapids.app.trial_sequential`);
a ``work_dir`` keeps finished seeds so that ``resume=True`` continues a killed trial
(:mod:`fbrapids.app.trial_workdir`).  The statistics' parts are in
:mod:`fbrapids.app.trial_stats`; the orchestration in :mod:`fbrapids.app.trial_run`.

**The interval.**  Two sources of noise move a measured delta: the training draw (the
seed: initial weights; the batches come in one order, shuffled within windows as a plain
run streams them) and the
held-out users sampled.  Per seed ``k`` the delta ``d_k`` (candidate minus baseline, both
trained from seed ``k``, starting as the same function, reading the same batches in the
same order: :mod:`fbrapids.trainers.arms`) is
measured on the same users; the estimate is their mean ``d``.  Its variance is estimated
as ``s^2 / K + v_users``: ``s^2`` the sample variance of the ``d_k`` (training noise, the
users held fixed) and ``v_users`` the variance of the seed-averaged delta over a paired
bootstrap of held-out users (each round resamples users with replacement and recomputes
every arm's AUC and GAUC on the same rows, so user-level correlation is respected).  The
interval is ``d +- t * se`` with Student's t at Welch-Satterthwaite's degrees of freedom
(``(K - 1) * (se^2 / (s^2 / K))^2``: the bootstrap term counts as known), and
``P(better)`` is that t distribution's probability that the true delta is above 0.  With
``K = 1`` there is no estimate of training noise: the interval is the bootstrap's alone
(normal), and the result says so.

Assumptions: the per-seed deltas are independent draws, normal enough for a t interval
(the calibration, ``benchmarks/trial_calibration.py``, checks the false-positive rate on
planted noise); users are independent units; the question is about the training recipe
as run (same data order), not about other orders.  The verdict: **helps** when the
interval lies above 0, **hurts** when below, else **no detectable effect** at that level.

**The A/A check.**  With ``aa=True`` (the default) each seed also trains an A/A arm: the
candidate arm's architecture and start, fed the candidates' values shuffled across each
batch's rows (:func:`fbrapids.trainers.arms.shuffled_view`), so it carries the candidate's
ids and their frequencies but not their link to the click.  Its deltas against the
baseline go through the same test: ``aa_delta`` / ``aa_interval`` / ``aa_verdict`` (a
trial whose A/A verdict is not "no detectable effect" is logged as a warning) and the
**A/A spread**, the largest per-seed |A/A delta|: what a seed's paired comparison shows
for a candidate that tells nothing.  ``seed_spread`` is the largest difference between two
baseline seeds' metric: one model's training noise, which the pairing cancels (it used to
be the A/A spread of trials whose arms were independent draws).

**What an A/A verdict means.**  The shuffled copy is not a placebo: the A/A arm's extra
table and weights fit the shuffled values' noise, and a model that reads an input telling
nothing can predict a little worse.  So the A/A check measures what an input of the
candidate's shape costs when it tells nothing; a "hurts" A/A verdict may be that cost
detected rather than a failure of the interval.  The calibration
(``benchmarks/trial_calibration.py``: ``aa.mean_delta`` / ``aa.se_mean`` over trials, and
the noise trials' ``delta / se``, whose SD is about 1 under a calibrated interval)
separates the two.  Trained in time order (before the stream shuffled its rows), 20 trials at 100k
rows gave a mean A/A AUC delta of -0.0006 +- 0.0002 (3 of 20 "hurts"); with the shuffled
stream, -0.0002 +- 0.0002 (3 of 20 called: 2 "helps", 1 "hurts"), while 40 noise trials'
``delta / se`` had SD 1.09 (AUC) and 0.82 (GAUC) and 1 and 2 of 40 were called: the
interval is not too narrow, and of the 60 null comparisons 4 were called on AUC.  A true
no-information arm (a constant in the candidate's slot) would be the baseline arm itself,
whose delta is 0 by construction.

Example:
    >>> import tempfile
    >>> from fbrapids import ops
    >>> from fbrapids.datasets.synthetic.generate import generate
    >>> d = tempfile.mkdtemp(); _ = generate(3000, d)
    >>> r = trial(d, {"slot_x_os": ops.cross("slot", "os")}, n_boot=20, progress=False)  # doctest: +SKIP
    >>> sorted(r.delta)  # doctest: +SKIP
    ['auc', 'gauc']
    >>> f = trial(d, {"a": ops.cross("slot", "os"), "b": ops.hour("ts")}, each=True, progress=False)  # doctest: +SKIP
    >>> f.ranking("auc"), f.correction  # doctest: +SKIP
    (['b', 'a'], 'holm')
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Sequence, Unpack, overload

import numpy as np

from fbrapids.app.trial_family import CandidateTrials
from fbrapids.app.trial_stats import (  # noqa: F401
    METRICS,
    VERDICTS,
    TrialResult,
    UserResamples,
    arm_rounds,
    combine,
    compare,
    paired_bootstrap,
    user_aucs,
)
from fbrapids.errors import ArgumentError, FeatureError
from fbrapids.kernels import Expr

if TYPE_CHECKING:
    from fbrapids.app.trial_training import TrialOptions
    from fbrapids.workloads import Workload

log = logging.getLogger(__name__)

#: seeds per arm when ``trial(seeds=...)`` is not given (``benchmarks/trial_calibration.py``)
DEFAULT_SEEDS = 3


@overload
def trial(workload: Workload | str | Path, candidates: dict[str, Expr], *, kind: str = "sparse", model: str = "dlrm",
          seeds: int | Sequence[int] | None = None, n_boot: int = 200, seed: int = 0, level: float = 0.95,
          progress: bool = True, sequences: dict[str, str] | None = None, paired: bool = True,
          aa: bool = True, each: Literal[False] = False, correction: str = "holm", min_effect: float | None = None,
          resume: bool = False, reference: bool = False, **options: Unpack[TrialOptions]) -> TrialResult: ...


@overload
def trial(workload: Workload | str | Path, candidates: dict[str, Expr], *, kind: str = "sparse", model: str = "dlrm",
          seeds: int | Sequence[int] | None = None, n_boot: int = 200, seed: int = 0, level: float = 0.95,
          progress: bool = True, sequences: dict[str, str] | None = None, paired: bool = True,
          aa: bool = True, each: Literal[True], correction: str = "holm", min_effect: float | None = None,
          resume: bool = False, reference: bool = False, **options: Unpack[TrialOptions]) -> CandidateTrials: ...


def trial(workload: Workload | str | Path, candidates: dict[str, Expr], *, kind: str = "sparse", model: str = "dlrm",
          seeds: int | Sequence[int] | None = None, n_boot: int = 200, seed: int = 0, level: float = 0.95,
          progress: bool = True, sequences: dict[str, str] | None = None, paired: bool = True,
          aa: bool = True, each: bool = False, correction: str = "holm", min_effect: float | None = None,
          resume: bool = False, reference: bool = False,
          **options: Unpack[TrialOptions]) -> TrialResult | CandidateTrials:
    """Train baseline vs baseline + ``candidates`` over K seeds, paired; compare them (the
    method and its assumptions: the module docstring).

    Args:
        workload: a :class:`~fbrapids.workloads.Workload` (a declared log: views, joins,
            label, split, group, baseline features; ``load_workload("my.toml")``), or a
            folder of generated data (:func:`fbrapids.datasets.synthetic.workload`).  Its
            group column is the bootstrap's unit.
        candidates: new feature name -> expression over the joined views (``fbrapids.ops``).
        kind: ``"sparse"`` (ids, embedded) or ``"dense"`` (numbers) for the candidates.
        model: the model every arm trains: a registered model's short name
            (:data:`fbrapids.workloads.run_config.MODELS`; ``"dlrm"``, ``"din"``...).
        seeds: K (seeds ``seed, seed + 1, ...``) or the seeds themselves; default
            :data:`DEFAULT_SEEDS` (a sequential trial: the most seeds, default
            :data:`fbrapids.app.trial_sequential.DEFAULT_MAX_SEEDS`).
        n_boot: paired bootstrap rounds over held-out users.
        seed: the first seed, and the bootstrap's.
        level: the interval's coverage (the verdict's test is at ``1 - level``).
        sequences: ``model="din"``: candidate behaviour sequences -> the sparse feature each
            attends to (the baseline arm trains DIN with no sequence).  Candidates may be
            fitted operators (fitted on the training days only) or history operators.
        paired: the arms of a seed start as one function (:mod:`fbrapids.trainers.arms`);
            False trains them as separate models (to measure what the pairing buys).
        aa: train an A/A arm per seed (the candidates shuffled across rows: the module
            docstring), one per candidate with ``each=True``; False leaves the A/A check out.
        each: try each candidate on its own against one shared baseline (N + 1 arms per
            seed, and N A/A arms with ``aa``); returns a
            :class:`~fbrapids.app.trial_family.CandidateTrials`, the candidates ranked, the
            verdicts corrected for the family.
        correction: ``"holm"`` (family-wise error rate) or ``"bh"`` (false discovery rate),
            with ``each=True`` (:mod:`fbrapids.app.trial_family`).
        min_effect: the smallest AUC gain worth having: a sequential trial that starts with
            2 seeds and adds one while an interval straddles it
            (:mod:`fbrapids.app.trial_sequential`).
        resume: continue from the finished seeds kept in ``work_dir``
            (:mod:`fbrapids.app.trial_workdir`).
        reference: also time one plain training of the baseline on the same data, right
            after, for the cost report (``result.cost``).
        options: ``backend``, ``epochs``, ``batch_size``, ``embedding_dim``, ``cache_rows``,
            ``host_rows``, ``train_threads`` (default: every core when several models train
            side by side, every core but one for one), ``nan``, ``work_dir`` (the finished seeds kept
            there), ``models_per_pass`` (:data:`fbrapids.app.trial_training.OPTIONS`;
            ``count_clean`` is accepted and unused).

    Raises:
        FeatureError: a candidate name collides with a baseline column.
        ArgumentError: a bad ``kind``, ``seeds``, ``level``, ``correction``, ``min_effect``
            or option, ``resume`` without ``work_dir``, ``each`` with DIN sequence
            candidates or unpaired arms.
        TrialError: arms that trained on no rows; a work dir holding another trial.
    """
    from fbrapids.app.trial_run import TrialSpec, run_trial
    from fbrapids.app.trial_sequential import DEFAULT_MAX_SEEDS, SequentialDesign
    from fbrapids.datasets.synthetic import as_workload
    from fbrapids.workloads.split_check import check_split

    w = as_workload(workload)
    _check_arguments(w, candidates, kind, level)
    _check_design(each, sequences, paired, correction, resume, options)
    seed_list = _seed_list(seeds if seeds is not None or min_effect is None else DEFAULT_MAX_SEEDS, seed)
    design = SequentialDesign(float(min_effect), len(seed_list)) if min_effect is not None else None
    spec = TrialSpec(dict(candidates), seed_list, kind=kind, model=model, n_boot=n_boot, boot_seed=seed, level=level,
                     sequences=sequences, paired=paired, aa=aa, each=each, correction=correction, design=design,
                     resume=resume, reference=reference, options=options)
    check = check_split(w)  # a split that cannot be right: one line before any bar or model
    return run_trial(w, spec, split_check=check, progress=progress)


def _check_arguments(w: Workload, candidates: object, kind: str, level: float) -> None:
    """What :func:`trial` refuses before any work: no candidates, a candidate named like a
    baseline column, a bad ``kind`` or ``level``, missing files, no group column."""
    if not isinstance(candidates, dict) or not candidates:
        raise ArgumentError(f"candidates must be a non-empty dict of name -> feature expression, got {candidates!r}")
    clash = [n for n in candidates if n in w.features or n in w.sparse or n in w.dense]
    if clash:
        raise FeatureError(f"candidate feature name(s) {clash} already name baseline columns; rename them")
    if kind not in ("sparse", "dense"):
        raise ArgumentError(f"kind must be 'sparse' or 'dense', got {kind!r}")
    if not 0 < level < 1:
        raise ArgumentError(f"level must be in (0, 1), got {level!r}")
    w.check_files()
    if w.group is None:
        raise ArgumentError(f"trial: {w.where} declares no group column; the trial's bootstrap resamples groups "
                            "(users): set group = ...")


def _check_design(each: bool, sequences: dict[str, str] | None, paired: bool, correction: str, resume: bool,
                  options: TrialOptions) -> None:
    """The many-candidate, sequential and resume options :func:`trial` refuses together."""
    from fbrapids.app.trial_family import CORRECTIONS

    if correction not in CORRECTIONS:
        raise ArgumentError(f"correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    if each and sequences:
        raise ArgumentError("each=True tries sparse or dense candidates each against the baseline; DIN sequence "
                            "candidates (sequences=...) are tried together (each=False)")
    if each and not paired:
        raise ArgumentError("each=True needs paired arms (paired=True): the baseline is shared by every candidate")
    if resume and options.get("work_dir") is None:
        raise ArgumentError("resume=True needs work_dir, the work dir of the trial to continue")
    per_pass = options.get("models_per_pass")
    if per_pass is not None and (not isinstance(per_pass, (int, np.integer)) or per_pass < 1):
        raise ArgumentError(f"models_per_pass must be a positive integer, got {per_pass!r}")


def _seed_list(seeds: int | Sequence[int] | None, first: int) -> list[int]:
    if seeds is None:
        seeds = DEFAULT_SEEDS
    if isinstance(seeds, (int, np.integer)):
        if seeds < 1:
            raise ArgumentError(f"seeds must be at least 1, got {seeds}")
        return [first + i for i in range(int(seeds))]
    out = [int(s) for s in seeds]
    if not out or len(set(out)) != len(out):
        raise ArgumentError(f"seeds must be distinct and at least one, got {list(seeds)}")
    return out
