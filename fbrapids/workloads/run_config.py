"""``RunConfig``: how :func:`fbrapids.app.pipeline.run_pipeline` trains on a workload (the model,
the batches, the store's tiers, the work dir, checkpoints), typed and validated like
:class:`~fbrapids.trainers.sparse.StoreConfig`.

Example:
    >>> RunConfig(model="deepfm", batch_size=512).with_(seed=3).seed
    3
    >>> RunConfig(batch_size="512")
    Traceback (most recent call last):
    ...
    fbrapids.errors.WorkloadError: RunConfig.batch_size must be an int >= 1, got '512'
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, overload

from fbrapids.errors import WorkloadError

if TYPE_CHECKING:  # (annotations only: the recipe is imported where a config is checked)
    from fbrapids.workloads.recipe import Recipe

#: where ``RunConfig.tiers`` may put the embedding rows
TIERS = ("auto", "ram", "tiered")


class ModelNames(Sequence[str]):
    """The registered models' short names (:func:`fbrapids.trainers.models.short_names`), those
    whose class has the attribute ``having`` true when given, read from the registry when
    first used: importing the models imports torch, which the command line's ``--help`` does
    not.

    Example:
        >>> names = ModelNames()
        >>> "dlrm" in names, "nope" in names, names[0]
        (True, False, 'dlrm')
        >>> "logreg" in ModelNames("exportable")
        False
    """

    def __init__(self, having: str | None = None) -> None:
        self.having = having

    def names(self) -> tuple[str, ...]:
        from fbrapids.trainers.models import short_names

        return short_names(self.having)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self.names()[index]

    def __len__(self) -> int:
        return len(self.names())

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, ModelNames)) else other)

    def __hash__(self) -> int:
        return hash(self.having)

    def __repr__(self) -> str:
        return repr(self.names())

    def argument(self, default: str) -> Callable[[str], str]:
        """A command line's ``type=`` for a model option whose default is ``default``: a name
        given is checked against the registry, argparse's refusal listing the names.  Not
        ``choices=``, which ``--help`` lists, nor a check of the default, which argparse
        converts too: a command that names no model imports none (nor torch); ``RunConfig``
        checks the default where the run starts.

        Example:
            >>> model = ModelNames().argument("dlrm")
            >>> model("din")
            'din'
            >>> model("nope")
            Traceback (most recent call last):
            ...
            argparse.ArgumentTypeError: invalid choice: 'nope' (choose from 'dlrm', 'wide_deep', 'deepfm', 'din', ...)
        """
        def model(value: str) -> str:
            if value != default and value not in self:
                raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from {', '.join(map(repr, self))})")
            return value

        return model


#: the models ``RunConfig.model`` may name (:func:`fbrapids.app.pipeline.build_model`): the registry's
MODELS = ModelNames()


@dataclass(frozen=True)
class RunConfig:
    """The run options of :func:`fbrapids.app.pipeline.run_pipeline`.

    Attributes:
        model: a registered model's short name (:data:`MODELS`: ``"dlrm"``, ``"din"``...).
        backend: ``"cpu"`` / ``"gpu"`` / None (automatic).
        epochs / batch_size / embedding_dim / seed: training (``epochs`` None: the recipe's).
        recipe: learning rates, weight decay, dropout and epochs
            (:class:`~fbrapids.workloads.recipe.Recipe`); None: the pipeline's for the model and
            the log's size (``fbrapids.app.pipeline.RECIPES``).
        tune: choose the recipe on the data first (:mod:`fbrapids.app.tuning`): the last
            training day held out as a validation day, a small grid tried on the days before
            it, the model refitted on every training day with the choice; ``True`` (the
            default grid) or a grid, recipe field -> values to try.
        cache_rows / host_rows: per-table rows of the device-cache and host-RAM tiers
            (``host_rows`` None: unbounded, no SSD tier); rows beyond them live in the SSD
            tier's files under ``work_dir``.
        tiers: ``"auto"`` (default): one RAM tier (no SSD files; on the CPU a cache that grows
            to hold every row) where every table at its bound fits in memory
            (:mod:`fbrapids.runs.ram_budget`), else the tiers of ``cache_rows`` /
            ``host_rows``; ``"ram"``: one RAM tier always; ``"tiered"``: those tiers always.
        work_dir: the store's SSD files and checkpoints (None: a temporary folder, removed
            on every exit path).
        checkpoint / checkpoint_every / resume: checkpoint at the end (and every this many
            steps); continue from the newest verified one under ``work_dir``.
        progress: progress bars.
        count_clean: compute the clean counts for the summary (one more pass).
        train_threads: torch threads while training (None: all cores but one on the CPU).
        nan: NaN / inf / null in a dense feature: ``"error"`` or ``"zero"``.
        calibrate: ``fit``'s post-hoc calibration.
        memory_limit: the run's memory budget (its whole process tree): bytes, a size
            (``"8GB"``, ``"6GiB"``) or a share of the machine's memory (``"40%"``); None:
            half the machine's (:mod:`fbrapids.runs.memory_budget`).  A run that cannot fit is
            refused before any work; one that gets near it says so; past it the run stops.
    """

    model: str = "dlrm"
    backend: str | None = None
    epochs: int | None = None
    batch_size: int = 2048
    embedding_dim: int = 16
    cache_rows: int = 1 << 17
    host_rows: int | None = 1 << 19
    tiers: str = "auto"
    work_dir: str | Path | None = None
    checkpoint: bool = True
    seed: int = 0
    progress: bool = True
    count_clean: bool = True
    checkpoint_every: int | None = None
    train_threads: int | None = None
    resume: bool = False
    nan: str = "error"
    calibrate: bool = True
    recipe: Recipe | None = None
    tune: Any = False
    memory_limit: int | str | None = None

    def __post_init__(self) -> None:
        def bad(name: str, want: str) -> WorkloadError:
            return WorkloadError(f"RunConfig.{name} must be {want}, got {getattr(self, name)!r}")

        if self.model not in MODELS:
            raise bad("model", f"one of {list(MODELS)}")
        if self.backend not in (None, "auto", "cpu", "gpu"):
            raise bad("backend", "'cpu', 'gpu', 'auto' or None")
        for name, lo, optional in (("epochs", 1, True), ("batch_size", 1, False), ("embedding_dim", 1, False),
                                   ("cache_rows", 1, False), ("host_rows", 1, True), ("seed", 0, False),
                                   ("checkpoint_every", 1, True), ("train_threads", 1, True)):
            v = getattr(self, name)
            if v is None and optional:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise bad(name, f"an int >= {lo}" + (" or None" if optional else ""))
        for name in ("checkpoint", "progress", "count_clean", "resume", "calibrate"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, "a bool")
        # imported here: fbrapids.trainers imports torch, and the CLI checks a RunConfig first
        from fbrapids.trainers.nan_policy import STREAM_NAN

        if self.nan not in STREAM_NAN:
            raise bad("nan", " or ".join(map(repr, STREAM_NAN)))
        if self.tiers not in TIERS:
            raise bad("tiers", " or ".join(map(repr, TIERS)))
        if self.work_dir is not None and not isinstance(self.work_dir, (str, Path)):
            raise bad("work_dir", "a path or None")
        from fbrapids.errors import ArgumentError
        from fbrapids.workloads.recipe import Recipe, check_grid

        if self.recipe is not None and not isinstance(self.recipe, Recipe):
            raise bad("recipe", "a fbrapids.workloads.recipe.Recipe or None")
        if not isinstance(self.tune, (bool, dict)):
            raise bad("tune", "a bool or a grid (a dict of recipe field -> values to try)")
        if isinstance(self.tune, dict):
            try:
                check_grid(self.tune)
            except ArgumentError as exc:
                raise WorkloadError(f"RunConfig.tune: {exc}") from None
        if self.memory_limit is not None:
            from fbrapids.errors import MemoryBudgetError
            from fbrapids.runs.memory_budget import parse_memory_limit

            try:
                parse_memory_limit(self.memory_limit)
            except MemoryBudgetError:
                raise bad("memory_limit", "bytes, a size such as '8GB' or '6GiB', a share such as '40%', or None") \
                    from None

    def with_(self, **changes: Any) -> "RunConfig":  # (each a field's value: the fields' types)
        """A copy with ``changes``; an unknown name is a :class:`~fbrapids.errors.WorkloadError`."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise WorkloadError(f"RunConfig has no option(s) {unknown}; known: {', '.join(sorted(known))}")
        return dataclasses.replace(self, **changes)
