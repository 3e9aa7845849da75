"""The memory of a running run, watched against its budget: sampled, said, never silent.

:class:`MemoryWatch` samples the resident memory (RSS) of this process and every process
under it (a local cluster's workers included) every ``every`` seconds while it is entered,
and keeps the peak overall and per stage (:meth:`MemoryWatch.stage`: ``plan``,
``extract+train``, ``extract+evaluate``...).  Once the tree passes :data:`NEAR` of the
budget it says so (one warning, naming the stage); past the budget (once the allocator has
handed back the free pages it kept), :meth:`MemoryWatch.check` raises
:class:`~fbrapids.errors.MemoryBudgetError` naming the budget, the stage and what the run
held, so the run stops with that line between two partitions rather than growing until the
kernel kills it without a word.

Example:
    >>> with MemoryWatch(1 << 40, every=0.01) as watch:
    ...     watch.stage("plan")
    ...     watch.check()
    >>> s = watch.summary()
    >>> s["peak_bytes"] == max(s["peak_by_stage"].values()) > 0, list(s["peak_by_stage"])
    (True, ['start', 'plan'])
"""

from __future__ import annotations

import logging
import threading

from fbrapids.errors import MemoryBudgetError

log = logging.getLogger(__name__)

#: the share of the budget past which a run says that it is near it
NEAR = 0.9


def tree_rss(pid: int | None = None) -> int:
    """The resident bytes of process ``pid`` (default: this one) and all its descendants.

    Example:
        >>> tree_rss() > 0
        True
    """
    import psutil

    root = psutil.Process(pid)
    total = 0
    for p in [root, *root.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return total


class MemoryWatch:
    """Sample the process tree's memory against ``budget`` bytes (module doc); ``source``
    says where the budget came from (in the messages)."""

    def __init__(self, budget: int, every: float = 0.5, source: str = "default") -> None:
        self.budget, self.every, self.source = int(budget), float(every), source
        self.current = "start"
        self.peak, self.peak_stage = 0, "start"
        self.by_stage: dict[str, int] = {}
        self.warned = False
        self.over: str | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def stage(self, name: str) -> None:
        """Attribute the samples from now on to stage ``name`` (and check the budget); the
        heap the last stage freed goes back to the system first (:func:`~fbrapids.runs.heap.release_memory`)."""
        from fbrapids.runs.heap import release_memory

        self.sample()
        release_memory()
        with self._lock:
            self.current = name
        self.sample()
        self.check()

    def sample(self) -> int:
        """Take one sample now; returns the tree's bytes.  A sample past the budget first has
        the allocator hand its free pages back (:func:`~fbrapids.runs.heap.release_memory`:
        freed blocks a run keeps for reuse, :func:`~fbrapids.runs.heap.keep_freed_blocks`, are
        resident but held by no one) and is taken again: the budget is judged on what the run
        holds."""
        rss = tree_rss()
        if rss > self.budget and self.over is None:
            from fbrapids.runs.heap import release_memory

            if release_memory():
                before, rss = rss, tree_rss()
                log.debug("memory: %s past the budget of %s, %s once the allocator handed back its free pages",
                          _human(before), _human(self.budget), _human(rss))
        with self._lock:
            stage = self.current
            self.by_stage[stage] = max(self.by_stage.get(stage, 0), rss)
            if rss > self.peak:
                self.peak, self.peak_stage = rss, stage
            near = not self.warned and rss >= NEAR * self.budget
            self.warned = self.warned or near
            if rss > self.budget and self.over is None:
                self.over = (f"the run's memory reached {_human(rss)} in stage {stage}, past its memory budget of "
                             f"{_human(self.budget)} ({self.source}); it was stopped there. Raise the budget "
                             "(--memory-limit, RunConfig.memory_limit) or hold less: fewer host_rows / cache_rows "
                             "per embedding table, a smaller batch size")
        if near:
            log.warning("memory: the run holds %s in stage %s, %.0f%% of its memory budget of %s (%s)", _human(rss),
                        stage, 100 * rss / self.budget, _human(self.budget), self.source)
        return rss

    def check(self) -> None:
        """Raise :class:`~fbrapids.errors.MemoryBudgetError` once a sample passed the budget."""
        if self.over is not None:
            raise MemoryBudgetError(self.over)

    def summary(self) -> dict[str, object]:
        """The peak (bytes, and the stage it was in) and the peak of each stage."""
        with self._lock:
            return {"peak_bytes": self.peak, "peak_stage": self.peak_stage, "peak_by_stage": dict(self.by_stage)}

    def _run(self) -> None:
        while not self._done.wait(self.every):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a process gone between listing and reading: next sample
                continue

    def __enter__(self) -> "MemoryWatch":
        self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fbrapids-memory-watch")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(self.every + 5)
        self.sample()


def _human(n: float) -> str:
    from fbrapids.runs.memory_budget import human

    return human(n)
