"""A trial from its seeds to its verdicts: passes, looks, the work dir, the family, the cost.

:func:`run_trial` is :func:`fbrapids.app.trials.trial`'s body once its arguments are
checked.  It trains the seeds in passes (:mod:`fbrapids.app.trial_training`), keeps every
finished seed in the work dir when there is one (:mod:`fbrapids.app.trial_workdir`: a
resumed trial trains only the seeds missing), scores each seed's arms on the held-out
users' bootstrap resamples once (:class:`~fbrapids.app.trial_stats.UserResamples`), and
compares: the candidates together (one :class:`~fbrapids.app.trial_stats.TrialResult`) or
each against the shared baseline (a :class:`~fbrapids.app.trial_family.CandidateTrials`,
corrected for the family).  A sequential design
(:mod:`fbrapids.app.trial_sequential`) looks after each seed from the second.  The cost
(wall time, models trained, passes, and one plain training's time when asked) goes into
the result.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from fbrapids.app.trial_family import CandidateTrials, adjust_p, family_p, verdict_of
from fbrapids.app.trial_stats import METRICS, Scored, TrialResult, UserResamples, compare
from fbrapids.app.trial_training import OPTIONS, Arm, ArmsSession, SeedRun, TrialOptions, plan_arms, plan_passes
from fbrapids.errors import TrialError

if TYPE_CHECKING:
    from tqdm.std import tqdm

    from fbrapids.app.trial_sequential import SequentialDesign
    from fbrapids.app.trial_workdir import TrialWorkDir
    from fbrapids.kernels import Expr
    from fbrapids.workloads import Workload
    from fbrapids.workloads.split_check import SplitCheck

log = logging.getLogger(__name__)


@dataclass
class TrialSpec:
    """What :func:`run_trial` runs: the checked arguments of :func:`fbrapids.app.trials.trial`."""

    candidates: dict[str, Expr]
    seeds: list[int]
    kind: str = "sparse"
    model: str = "dlrm"
    n_boot: int = 200
    boot_seed: int = 0
    level: float = 0.95
    sequences: dict[str, str] | None = None
    paired: bool = True
    aa: bool = True
    each: bool = False
    correction: str = "holm"
    design: SequentialDesign | None = None  #: a sequential trial's design, or None (fixed K)
    resume: bool = False
    reference: bool = False
    options: TrialOptions = field(default_factory=TrialOptions)


@dataclass
class _Comparison:
    """One comparison of a trial: ``names`` (its candidates), its candidate arm and A/A arm."""

    names: list[str]
    cand: str
    aa: str | None


def comparisons(arms: Sequence[Arm]) -> dict[str, _Comparison]:
    """The comparisons the arms make against the baseline, by label.

    Example:
        >>> from fbrapids.app.trial_training import plan_arms
        >>> sorted(comparisons(plan_arms(["a", "b"], each=True, aa=False)))
        ['a', 'b']
        >>> comparisons(plan_arms(["a", "b"], each=False, aa=True))["a + b"].aa
        'aa'
    """
    by_name = {a.name: a for a in arms}
    out = {}
    for a in arms:
        if a.role == "candidate":
            aa = "aa" + a.name[len("candidate"):]
            out[" + ".join(a.reads)] = _Comparison(list(a.reads), a.name, aa if aa in by_name else None)
    return out


class _Seeds:
    """The seeds a trial has finished (trained here or kept in its work dir), each scored
    once on the users' resamples.  A seed trained in a pass another follows is scored as it
    finishes, on a thread of its own (one core's work: sorting, every round's AUC), while the
    next pass trains (the training leaves part of a core idle); what the verdicts wait for is
    the rest."""

    def __init__(self, spec: TrialSpec, session: ArmsSession, keep: TrialWorkDir | None) -> None:
        self.spec, self.session, self.keep = spec, session, keep
        self.runs: dict[int, SeedRun] = keep.finished(spec.seeds) if keep is not None else {}
        self.resumed = set(self.runs)  #: the seeds kept in the work dir by an earlier run
        self.label: np.ndarray = keep.label if keep is not None else np.zeros(0)
        self.group: np.ndarray = keep.group if keep is not None else np.zeros(0)
        self.scores: dict[tuple[int, str], dict[str, np.ndarray]] = {}
        self.resamples: UserResamples | None = None
        self.scoring_s = 0.0  #: the time the verdicts waited for the scores (the rest ran beside the training)
        self._scoring: ThreadPoolExecutor | None = None
        self._pending: dict[tuple[int, str], Future[Scored]] = {}

    def close(self) -> None:
        """Stop the scoring thread (scores not yet begun are dropped)."""
        for f in self._pending.values():
            f.cancel()
        self._pending.clear()
        if self._scoring is not None:
            self._scoring.shutdown(wait=True)
            self._scoring = None

    def _resamples(self) -> UserResamples:
        if self.resamples is None:
            self.resamples = UserResamples(self.group, self.spec.n_boot, self.spec.boot_seed)
        return self.resamples

    def ensure(self, seeds: Sequence[int], progress: bool, bar: tqdm) -> None:
        """Train the seeds of ``seeds`` not yet finished, in passes (:func:`plan_passes`)."""
        missing = [s for s in seeds if s not in self.runs]
        per_pass = int(self.session.opt["models_per_pass"])
        groups = plan_passes(missing, len(self.session.arms), per_pass)
        for k, group in enumerate(groups):
            if bar.total is not None and bar.n + 1 >= bar.total:  # a look asked for one more pass
                bar.total = bar.n + 2
            bar.set_postfix_str(f"seed(s) {', '.join(map(str, group))}: {len(group) * len(self.session.arms)} "
                                "models side by side")
            # a pass another may follow (this plan's, or a look's) keeps its batches for it
            more = k + 1 < len(groups) or self.spec.design is not None
            for run in self.session.train(group, progress=progress, keep=more):
                self._finished(run, score_beside=more)
            bar.update(1)

    def _finished(self, run: SeedRun, score_beside: bool = False) -> None:
        """Record a finished seed (and keep it in the work dir); ``score_beside``: another pass
        trains next, so its arms are scored on the scoring thread meanwhile (else the verdicts
        score them at once, on every core)."""
        label, group = self.session.label, self.session.group
        if len(self.label) and not (np.array_equal(label, self.label) and np.array_equal(group, self.group)):
            raise TrialError("trial: the held-out rows differ from those the work dir's finished seeds predicted "
                             "(another data set or order); start the trial in a new work dir")
        self.label, self.group = label, group
        self.runs[run.seed] = run
        if self.keep is not None:
            self.keep.save(run, label, group)
        if score_beside and len(label):  # beside the next pass's training (one thread: no second team of threads)
            resamples = self._resamples()
            if self._scoring is None:
                self._scoring = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fbrapids-trial-scores")
            for arm, p in run.preds.items():
                self._pending[(run.seed, arm)] = self._scoring.submit(resamples.scored, label, p, 1)

    def check(self, seeds: Sequence[int], where: str, rule: str) -> None:
        """No verdict from arms that trained on 0 rows or were judged on none; one training
        order for every seed."""
        trained, held = self.runs[seeds[0]].rows, len(self.label)
        if trained == 0 or held == 0:
            raise TrialError(f"trial on {where}: no verdict: the arms trained on {trained:,} rows and were judged on "
                             f"{held:,} held-out rows (split: held out {rule}, after cleaning and joins)")
        orders = {self.runs[s].order for s in seeds}
        if len(orders) > 1:
            raise TrialError("trial: the seeds read the training batches in different orders (a seed kept in the "
                             "work dir came from another stream); start the trial in a new work dir")

    def rounds(self, seeds: Sequence[int], arm: str) -> dict[str, np.ndarray]:
        """``arm``'s rows ``[len(seeds), 1 + n_boot]`` per metric, scored once per seed."""
        resamples = self._resamples()
        t = time.perf_counter()
        for s in seeds:
            if (s, arm) not in self.scores:
                pending = self._pending.pop((s, arm), None)
                part = pending.result() if pending is not None else resamples.scored(self.label, self.runs[s].preds[arm])
                self.scores[(s, arm)] = resamples.finish(part)
        self.scoring_s += time.perf_counter() - t
        return {m: np.vstack([self.scores[(s, arm)][m] for s in seeds]) for m in METRICS}


def _compare_all(spec: TrialSpec, seeds: _Seeds, used: Sequence[int], level: float) -> dict[str, TrialResult]:
    """Every comparison on the seeds ``used``, at ``level``."""
    out = {}
    for label, c in comparisons(seeds.session.arms).items():
        rounds = {"base": seeds.rounds(used, "baseline"), "cand": seeds.rounds(used, c.cand)}
        if c.aa is not None:
            rounds["aa"] = seeds.rounds(used, c.aa)
        base = [seeds.runs[s].preds["baseline"] for s in used]
        cand = [seeds.runs[s].preds[c.cand] for s in used]
        out[label] = compare(c.names, seeds.label, base, cand, rounds, level)
    return out


def correct(results: dict[str, TrialResult], correction: str, alpha: float, looks: int = 1) -> None:
    """The family's verdicts, in place: per metric, each candidate's family p-value
    (:func:`~fbrapids.app.trial_family.family_p`: the larger of its own test's and the test
    with the training noise pooled over the candidates) adjusted by ``correction`` over the
    family and multiplied by ``looks`` (a sequential trial's share), the verdict
    ``p_adjusted < alpha``.  One candidate keeps its own test and verdict (the same, from its
    interval at the look's level)."""
    n = len(results)
    names = list(results)
    for m in METRICS:
        own = [results[k].p_value[m] for k in names]
        if n > 1:
            table = np.array([results[k].seed_deltas[m] for k in names])
            pooled = family_p(own, table, [results[k].se_users[m] ** 2 for k in names])
            adjusted = adjust_p(pooled, correction)
        else:
            pooled, adjusted = own, own
        for k, p_family, p in zip(names, pooled, adjusted):
            r = results[k]
            r.p_family[m], r.p_adjusted[m] = p_family, min(1.0, p * looks)
            if n > 1:
                r.verdict[m] = verdict_of(r.delta[m], r.p_adjusted[m], alpha)
    for r in results.values():
        r.family = n
        r.correction = correction if n > 1 else ("bonferroni over the looks" if looks > 1 else "none")


def _looks(spec: TrialSpec, seeds: _Seeds, progress: bool, bar: tqdm) -> tuple[list[int], dict[str, TrialResult]]:
    """Train and compare: all the seeds (a fixed K), or look after each from the design's
    first until no interval straddles the margin."""
    design, alpha = spec.design, 1 - spec.level
    where, rule = seeds.session.w.where, str(seeds.session.split.get("rule", seeds.session.w.split.rule))
    if design is None:
        seeds.ensure(spec.seeds, progress, bar)
        seeds.check(spec.seeds, where, rule)
        results = _compare_all(spec, seeds, spec.seeds, spec.level)
        correct(results, spec.correction, alpha)
        return list(spec.seeds), results
    k = design.first
    while True:
        used = spec.seeds[:k]
        seeds.ensure(used, progress, bar)
        seeds.check(used, where, rule)
        results = _compare_all(spec, seeds, used, 1 - design.alpha_share(alpha))
        correct(results, spec.correction, alpha, design.looks)
        if not design.look(k, {n: r.interval["auc"] for n, r in results.items()}):
            return list(used), results
        k += 1


def run_trial(w: Workload, spec: TrialSpec, split_check: SplitCheck | None = None,
              progress: bool = True) -> TrialResult | CandidateTrials:
    """The trial of ``spec`` on the workload ``w`` (module docstring): a
    :class:`~fbrapids.app.trial_stats.TrialResult`, or with ``spec.each`` a
    :class:`~fbrapids.app.trial_family.CandidateTrials`."""
    from fbrapids.app.trial_workdir import TrialWorkDir, trial_identity
    from fbrapids.ui.autobar import tqdm

    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    arms = plan_arms(list(spec.candidates), spec.each, spec.aa)
    per_pass = int(spec.options.get("models_per_pass", OPTIONS["models_per_pass"]))
    planned = len(plan_passes(spec.seeds if spec.design is None else spec.seeds[:spec.design.first], len(arms),
                              per_pass))
    bar = tqdm(total=planned + 1, disable=not progress, desc="trial", unit="step", position=1, leave=False)
    with ArmsSession(w, spec.candidates, arms, kind=spec.kind, model=spec.model, sequences=spec.sequences,
                     paired=spec.paired, split_check=split_check, order_seed=spec.seeds[0],
                     **spec.options) as session, contextlib.ExitStack() as stack:
        keep = None
        work_dir = spec.options.get("work_dir")
        if work_dir is not None:
            identity = trial_identity(session.run_settings, arms=[a.name for a in arms], kind=spec.kind,
                                      each=spec.each, paired=spec.paired, epochs=session.opt["epochs"],
                                      nan=session.opt["nan"])
            keep = stack.enter_context(TrialWorkDir(work_dir, identity, spec.resume))
        seeds = _Seeds(spec, session, keep)
        stack.callback(seeds.close)
        used, results = _looks(spec, seeds, progress, bar)
        bar.total = bar.n + 1
        bar.set_postfix_str(f"bootstrap x{spec.n_boot}")
        bar.update(1)
        bar.refresh()  # the last step drawn even when it came within tqdm's redraw interval of the one before
        bar.close()
        out = _result(spec, seeds, used, results)
    out.cost = _cost(spec, w, seeds, t0, load0, used, progress)
    log.info("%s", out.render())
    return out


def _result(spec: TrialSpec, seeds: _Seeds, used: list[int],
            results: dict[str, TrialResult]) -> TrialResult | CandidateTrials:
    """The trial's result: what every comparison shares filled in; one comparison alone, or
    the family."""
    session = seeds.session
    n_users = int(len(np.unique(seeds.group)))
    rows = {"trained": seeds.runs[used[0]].rows, "held out": int(len(seeds.label))}
    extraction = {**session.extraction, "steps per model": seeds.runs[used[0]].steps}
    secs = {**session.seconds, "bootstrap": seeds.scoring_s}
    seq = spec.design.as_dict() if spec.design is not None else {}
    for r in results.values():
        r.n_boot, r.n_users, r.seeds, r.rows, r.split = spec.n_boot, n_users, list(used), dict(rows), dict(session.split)
        r.extraction, r.seconds, r.sequential = dict(extraction), dict(secs), seq
    if not spec.each:
        return next(iter(results.values()))
    return CandidateTrials(results, spec.correction, level=spec.level, seeds=list(used), n_boot=spec.n_boot,
                           n_users=n_users, rows=rows, split=dict(session.split), extraction=extraction,
                           seconds=secs, sequential=seq)


def _cost(spec: TrialSpec, w: Workload, seeds: _Seeds, t0: float, load0: float, used: list[int],
          progress: bool) -> dict[str, object]:
    """Wall time, models trained (here and resumed), passes (and those that extracted the rows:
    the others streamed the batches a pass before them kept); with ``spec.reference``, one
    plain training of the baseline on the same data, timed right after."""
    wall = time.perf_counter() - t0
    session = seeds.session
    plain = plain_training_seconds(w, spec, progress) if spec.reference else None
    cost: dict[str, object] = {"wall_s": wall, "models": session.extraction["models"],
                               "models_resumed": len(session.arms) * len(seeds.resumed.intersection(used)),
                               "passes": session.extraction["passes"],
                               "passes_extracted": session.extraction["passes extracted"], "plain_training_s": plain,
                               "ratio": wall / plain if plain is not None else None}
    cost["load"] = [load0, os.getloadavg()[0]]
    return cost


def plain_training_seconds(w: Workload, spec: TrialSpec, progress: bool = False) -> float:
    """Seconds of one plain training of the workload's baseline on the same data, as
    :func:`fbrapids.app.pipeline.run_pipeline` runs it (extraction, training and the
    held-out predictions; no checkpoints, no clean counts): what a trial's cost is set
    beside."""
    from fbrapids.app.pipeline import run_pipeline

    opt = spec.options
    keys = ("backend", "epochs", "batch_size", "embedding_dim", "train_threads", "nan")
    t = time.perf_counter()
    run_pipeline(w, None, client=None, model=spec.model, seed=spec.seeds[0], checkpoint=False, count_clean=False,
                 progress=progress, **{k: v for k, v in opt.items() if k in keys})
    return time.perf_counter() - t
