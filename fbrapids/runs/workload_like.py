"""What the runs floor reads of a workload, as Protocols: sizing its views
(:mod:`fbrapids.runs.view_sizes`) and estimating a run's memory
(:mod:`fbrapids.runs.memory_budget`) take a :class:`fbrapids.workloads.spec.Workload`, whose
floor stands above this one, so they name the part of it they read instead.

Example:
    >>> sorted(n for n in dir(WorkloadLike) if not n.startswith("_"))
    ['joins', 'log', 'resolve', 'split', 'time', 'views']
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence


class ViewLike(Protocol):
    """A view of a workload: its name, its files, its reader options and its sort column."""

    @property
    def name(self) -> str: ...

    @property
    def paths(self) -> tuple[str, ...]: ...

    @property
    def options(self) -> Mapping[str, Any]:
        """The reader's keyword arguments (``format``, ``columns``, ``dtype`` ...), each of its own type."""

    @property
    def sorted_by(self) -> str | None: ...


class JoinLike(Protocol):
    """A join of a workload: the view it joins into the log."""

    @property
    def view(self) -> str: ...


class SplitLike(Protocol):
    """A workload's held-out split: its rule and what the rule reads."""

    @property
    def rule(self) -> str: ...

    @property
    def fraction(self) -> float | None: ...

    @property
    def files(self) -> tuple[str, ...]: ...

    def cutoff(self) -> int:
        """The ``at`` split's cutoff, as epoch seconds."""


class WorkloadLike(Protocol):
    """A workload: its views (the log first), joins, split and time column, and its paths' root."""

    @property
    def views(self) -> Sequence[ViewLike]: ...

    @property
    def log(self) -> ViewLike: ...

    @property
    def joins(self) -> Sequence[JoinLike]: ...

    @property
    def split(self) -> SplitLike: ...

    @property
    def time(self) -> str | None: ...

    def resolve(self, path: str) -> str:
        """``path`` under the workload's root when relative."""
