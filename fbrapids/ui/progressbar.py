"""A tqdm progress bar over the tasks of dask computes on this process's schedulers.

``with progress(): frame.compute()`` shows the tasks done out of the total, and the time
left, for any compute in the block (threads, processes or synchronous scheduler: dask's
local callbacks; a distributed ``Client`` has its own dashboard and
``distributed.progress``).  Large ``compute`` / lazy ``extract`` results are where it
helps; ``fit`` / ``predict`` and ``fbrapids gen`` have their own bars, and an eager
``extract`` of a large frame has its own over row chunks (:func:`row_chunks`).

Example:
    >>> import dask.dataframe as dd, pandas as pd
    >>> frame = dd.from_pandas(pd.DataFrame({"a": range(100)}), npartitions=4)
    >>> with progress(disable=True) as bar:
    ...     total = int(frame["a"].sum().compute())
    >>> total, bar.tasks_done > 0
    (4950, True)
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterator, Mapping
from typing import TYPE_CHECKING

from dask.callbacks import Callback

if TYPE_CHECKING:
    from tqdm.std import tqdm as Bar

log = logging.getLogger(__name__)


def row_chunks(rows: int, chunk_rows: int, desc: str, show: bool | None = True,
               delay: float = 0.0) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of consecutive chunks of at most ``chunk_rows`` over ``rows`` rows,
    under a ``tqdm.auto`` bar counting rows (total known: it shows the time left); each
    chunk is counted once the caller asks for the next.  ``show``: True draws the bar,
    False never, None lets tqdm decide (a terminal or a notebook); ``delay``: seconds
    before the bar first appears (a quick run shows none).

    Example:
        >>> list(row_chunks(10, 4, "demo", show=False))
        [(0, 4), (4, 8), (8, 10)]
    """
    from fbrapids.ui.autobar import tqdm

    with tqdm(total=rows, desc=desc, unit="rows", unit_scale=True, disable=None if show is None else not show,
              delay=delay) as bar:
        for start in range(0, rows, max(1, chunk_rows)):
            stop = min(rows, start + max(1, chunk_rows))
            yield start, stop
            bar.update(stop - start)


class progress(Callback):  # noqa: N801 - used as a context manager, like dask's ProgressBar
    """A dask local-scheduler callback drawing a ``tqdm.auto`` bar (total tasks, time left).

    Under a distributed ``Client`` (the scheduler in force when the block is entered) local
    callbacks see no task: entering logs a warning saying so and where to look instead,
    rather than showing nothing silently.
    """

    def __enter__(self) -> "progress":
        import dask

        owner = getattr(dask.base.get_scheduler(), "__self__", None)
        if owner is not None and type(owner).__name__ == "Client":
            log.warning("fbrapids.progress(): computes run on the distributed Client %s, whose tasks a local "
                        "progress bar cannot see; follow them on its dashboard (%s) or with "
                        "distributed.progress(client.compute(frame))", owner.scheduler.address, owner.dashboard_link)
        return super().__enter__()

    def __init__(self, desc: str = "compute", disable: bool = False) -> None:
        super().__init__()
        self.desc, self.disable = desc, disable
        self.tasks_done = 0
        self._bar: Bar | None = None

    def _start_state(self, dsk: Mapping[Hashable, object], state: dict) -> None:
        from fbrapids.ui.autobar import tqdm

        total = sum(len(state[k]) for k in ("ready", "waiting", "running", "finished") if k in state)
        self._bar = tqdm(total=total, desc=self.desc, unit="task", disable=self.disable)

    def _posttask(self, key: Hashable, result: object, dsk: Mapping[Hashable, object], state: dict,
                  worker_id: object) -> None:
        self.tasks_done += 1
        if self._bar is not None:
            self._bar.update(1)

    def _finish(self, dsk: Mapping[Hashable, object], state: dict, errored: bool) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
