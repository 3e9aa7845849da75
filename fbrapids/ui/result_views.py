"""What the notebook displays and figures read of the results they show.

The results themselves live floors above (:class:`fbrapids.app.pipeline.PipelineResult`,
:class:`fbrapids.app.trials.TrialResult`, :class:`fbrapids.app.trial_family.CandidateTrials`,
a trained model's tables); this floor may not import them, so it names the parts it reads
as protocols, which those classes satisfy by having them.

Example:
    >>> from fbrapids.app.trials import TrialResult
    >>> r: TrialView = TrialResult(["x"], {"auc": 0.7}, {"auc": 0.71}, delta={"auc": 0.01})
    >>> r.delta["auc"]
    0.01
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


class PipelineView(Protocol):
    """A pipeline run as :func:`fbrapids.ui.display.pipeline_html` shows it."""

    @property
    def backend(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def rows(self) -> Mapping[str, int]: ...
    @property
    def seconds(self) -> Mapping[str, float]: ...
    @property
    def store(self) -> Mapping[str, object]: ...  # tier -> its totals (hits, misses, hit_rate, ...)
    @property
    def metrics(self) -> Mapping[str, float]: ...
    @property
    def kernel(self) -> Mapping[str, object]: ...


class TrialView(Protocol):
    """One candidate against the baseline, as the trial table and the deltas' chart read it."""

    @property
    def candidates(self) -> Sequence[str]: ...
    @property
    def baseline(self) -> Mapping[str, float]: ...
    @property
    def candidate(self) -> Mapping[str, float]: ...
    @property
    def delta(self) -> Mapping[str, float]: ...
    @property
    def interval(self) -> Mapping[str, tuple[float, float]]: ...
    @property
    def p_better(self) -> Mapping[str, float]: ...
    @property
    def p_value(self) -> Mapping[str, float]: ...
    @property
    def p_family(self) -> Mapping[str, float]: ...
    @property
    def p_adjusted(self) -> Mapping[str, float]: ...
    @property
    def verdict(self) -> Mapping[str, str]: ...
    @property
    def aa_spread(self) -> Mapping[str, float]: ...
    @property
    def level(self) -> float: ...
    @property
    def seeds(self) -> Sequence[int]: ...
    @property
    def n_boot(self) -> int: ...
    @property
    def n_users(self) -> int: ...


class FamilyView(Protocol):
    """Many candidates against one baseline, as the family's table and chart read them."""

    @property
    def results(self) -> Mapping[str, TrialView]: ...
    @property
    def seeds(self) -> Sequence[int]: ...
    @property
    def n_boot(self) -> int: ...
    @property
    def n_users(self) -> int: ...
    @property
    def method(self) -> str: ...

    def ranking(self, metric: str = "auc") -> list[str]: ...


class StatsTable(Protocol):
    """An embedding table, as far as its hit rates go: per-tier counters."""

    def stats(self) -> Mapping[str, object]: ...


class HasStores(Protocol):
    """A model with embedding tables (:meth:`~fbrapids.trainers.models.base.CTRModel.stores`)."""

    def stores(self) -> Mapping[str, StatsTable]: ...
