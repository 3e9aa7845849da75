"""A workload's split, checked before any training: the log's files in order, its time
column read in its form, and the rows each side gets.

:func:`check_split` reads the log view's label and time columns (only those, every file
once, on the CPU) and decides, before any feature is extracted or any model built:

* **the time column's form** (:mod:`fbrapids.views.times`): the declared ``time_form``,
  else the one its values leave (inferred, and said so), else one
  :class:`~fbrapids.errors.WorkloadError` naming the field, the file and the values seen;
* **the order of the log's files**: by their time column when it has one (each file's
  first time), else by the natural order of their names (``part_2`` before ``part_10``);
  the order is part of the report;
* **the split**: the first held-out time of an ``at`` / ``last_day`` rule, or the rows a
  ``fraction`` / ``files`` rule holds out, and each side's rows and time range.

It refuses, as one :class:`~fbrapids.errors.WorkloadError` naming the rule: a log with no
rows (an empty or header-only file); a split with no training rows or no held-out rows;
a held-out set of one class, or under :func:`held_out_floor` rows; a split whose training
rows reach past the first held-out time (for a ``fraction`` split over several files: the
files whose times overlap, named).

Example:
    >>> import tempfile, pandas as pd
    >>> from fbrapids.workloads import Split, View, Workload
    >>> d = tempfile.mkdtemp()
    >>> pd.DataFrame({"click": [0, 1] * 48, "hour": [14102100 + h for h in range(24)] * 2 + [14102200 + h
    ...               for h in range(24)] * 2}).to_csv(f"{d}/log.csv", index=False)
    >>> w = Workload([View("log", "log.csv")], "click", Split("last_day"), time="hour", time_form="%y%m%d%H", root=d)
    >>> c = check_split(w)
    >>> c.rule, c.train_rows, c.held_rows, when(c.held_range[0])
    ('last day 2014-10-22', 48, 48, '2014-10-22 00:00:00')
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fbrapids.errors import WorkloadError
from fbrapids.views.times import PLAUSIBLE, TimeForm, infer_form, when
from fbrapids.workloads.spec import Workload

if TYPE_CHECKING:  # (annotations only)
    from fbrapids.frames.backend import FrameLike

log = logging.getLogger(__name__)
#: where :meth:`SplitCheck.announce` reports a checked split, before training (``fbrapids demo`` /
#: ``trial`` print it)
report_log = logging.getLogger(__name__ + ".report")

DAY = 86400
#: a held-out set must hold at least this many rows, or :data:`FLOOR_SHARE` of the log's if fewer
FLOOR_ROWS = 1000
FLOOR_SHARE = 0.01


def held_out_floor(rows: int) -> int:
    """The fewest held-out rows a split of a ``rows``-row log may leave: 1,000, or 1% of the
    rows when that is fewer (a small sample keeps a small held-out set).

    Example:
        >>> held_out_floor(30_000), held_out_floor(10_000_000), held_out_floor(100)
        (300, 1000, 1)
    """
    return min(FLOOR_ROWS, max(1, math.ceil(FLOOR_SHARE * rows)))


def natural_key(path: str) -> list[int | str]:
    """A file name's sort key with its runs of digits as numbers (``part_2`` < ``part_10``).

    Example:
        >>> sorted(["p_10.csv", "p_9.csv", "p_1.csv"], key=natural_key)
        ['p_1.csv', 'p_9.csv', 'p_10.csv']
    """
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", Path(path).name)] + [path]


@dataclass
class _File:
    """One file of the log as the check read it."""

    path: str
    times: np.ndarray | None  #: UTC epoch seconds, in file order
    labels: np.ndarray | None

    @property
    def rows(self) -> int:
        return len(self.times) if self.times is not None else len(self.labels) if self.labels is not None else 0

    @property
    def span(self) -> tuple[int, int] | None:
        return (int(self.times.min()), int(self.times.max())) if self.times is not None and len(self.times) else None


@dataclass
class SplitCheck:
    """What :func:`check_split` found (module docstring).

    ``rule``: the split's own name (``"last day 2014-10-29"``, ``"fraction 0.125"``, ``"at
    2014-10-29"``, ``"files test.csv"``); ``files``: the log's files in the order read
    (``held_files``: a ``files`` rule's); ``order``: ``"time"`` or ``"name"``;
    ``time_form``: the time column's (None without one); ``cutoff``: the first held-out
    time (epoch seconds) of an ``at`` / ``last_day`` rule; ``*_rows`` / ``*_range``: each
    side's rows and first / last time; ``held_classes``: the held-out rows per label value
    (None when the label is not a log column)."""

    rule: str
    view: str
    files: list[str]
    order: str
    time: str | None = None
    time_form: TimeForm | None = None
    cutoff: int | None = None
    rows: int = 0
    train_rows: int = 0
    held_rows: int = 0
    train_range: tuple[int, int] | None = None
    held_range: tuple[int, int] | None = None
    held_classes: dict[str, int] | None = None
    held_files: list[str] = field(default_factory=list)

    def render(self) -> str:
        """The check as the run reports it before training.

        Example:
            >>> print(SplitCheck("fraction 0.2", "log", ["a.csv"], "name", rows=10, train_rows=8, held_rows=2).render())
            split: held out fraction 0.2; view 'log' read from a.csv (10 rows)
              training   8 rows
              held out   2 rows
        """
        files = _names(self.files)
        if len(self.files) > 1:
            files = f"{len(self.files)} files in {'time' if self.order == 'time' else 'natural name'} order ({files})"
        lines = [f"split: held out {self.rule}; view {self.view!r} read from {files} ({self.rows:,} rows)"
                 + (f"; time {self.time!r} as {self.time_form.describe()}" if self.time_form is not None else "")]
        width = len(f"{max(self.train_rows, self.held_rows):,}")
        for side, n, span in (("training", self.train_rows, self.train_range), ("held out", self.held_rows,
                                                                                self.held_range)):
            line = f"  {side:<10} {n:>{width},} rows"
            if span is not None:
                line += f"  {when(span[0])} .. {when(span[1])}"
            if side == "held out" and self.held_classes is not None:
                line += "  (label " + ", ".join(f"{k}: {v:,}" for k, v in self.held_classes.items()) + ")"
            lines.append(line)
        return "\n".join(lines)

    def announce(self, origin: str) -> None:
        """Report the check (:data:`report_log`, INFO): a run does when its training is about
        to start, every other check passed."""
        report_log.info("%s", self.render().replace("split:", f"split of {origin}:", 1))

    def as_dict(self) -> dict[str, object]:
        """The check as JSON-ready values (a summary's ``split``)."""
        return {"rule": self.rule, "view": self.view, "files": list(self.files), "order": self.order,
                "time": self.time, "time_form": self.time_form.name if self.time_form is not None else None,
                "time_form_inferred": bool(self.time_form is not None and self.time_form.inferred),
                "cutoff": self.cutoff, "rows": self.rows, "train_rows": self.train_rows, "held_rows": self.held_rows,
                "train_range": [when(t) for t in self.train_range] if self.train_range else None,
                "held_range": [when(t) for t in self.held_range] if self.held_range else None,
                "held_classes": self.held_classes, "held_files": list(self.held_files)}


def _names(files: list[str], limit: int = 5) -> str:
    names = [Path(f).name for f in files]
    if len(names) > limit:
        names = names[:3] + ["..."] + names[-2:]
    return ", ".join(names)


def log_files(w: Workload, paths: tuple[str, ...]) -> list[str]:
    """The files ``paths`` of ``w`` name (relative to its root; globs and folders expanded)."""
    from fbrapids.views.paths import expand_paths

    out: list[str] = []
    for p in paths:
        try:
            out.extend(expand_paths(w.resolve(p)))
        except Exception as e:  # a ViewError: nothing matches
            raise WorkloadError(f"{w.where}: view {w.log.name!r}: {e}") from None
    return list(dict.fromkeys(out))


def _read_options(w: Workload, needed: list[str]) -> dict[str, Any]:
    opts = {k: v for k, v in w.log.options.items() if k != "columns"}
    if isinstance(opts.get("dtype"), dict):
        opts["dtype"] = {c: t for c, t in opts["dtype"].items() if c in needed}
    return opts


def _columns(w: Workload, files: list[str]) -> list[str]:
    """The log view's columns (its ``columns`` option, else the first file's)."""
    from fbrapids.views.read import read_view

    given = w.log.options.get("columns")
    if given:
        return list(given)
    try:
        return list(read_view(files, backend="cpu", **_read_options(w, []))._meta.columns)
    except Exception as e:
        if type(e).__name__ == "ViewError":
            raise WorkloadError(f"{w.where}: view {w.log.name!r}: {e}") from None
        raise


def _read_file(w: Workload, path: str, needed: list[str]) -> FrameLike:
    from fbrapids.views.read import read_view

    try:
        return read_view(path, columns=needed, eager=True, backend="cpu", **_read_options(w, needed))
    except Exception as e:
        if type(e).__name__ == "ViewError":
            raise WorkloadError(f"{w.where}: view {w.log.name!r}: {e}") from None
        raise


def _scan(w: Workload, files: list[str], label: str | None, form: TimeForm | None) -> tuple[list[_File], TimeForm | None]:
    """Each file's times (read in ``form``; None: inferred from the first file with rows)
    and labels."""
    needed = [c for c in (w.time, label) if c is not None]
    out: list[_File] = []
    for path in files:
        frame = _read_file(w, path, needed) if needed else None
        times = labels = None
        if w.time is not None and frame is not None:
            where = f"{w.where}: time {w.time!r} in {path}"
            if form is None and len(frame):
                form = infer_form(frame[w.time], where)
                log.info("%s: time %r read as %s", w.origin, w.time, form.describe())
            times = (form.seconds(frame[w.time], where, bounds=PLAUSIBLE if form.inferred else None).to_numpy()
                     if form is not None else np.zeros(0, dtype=np.int64))
        if label is not None and frame is not None:
            labels = frame[label].to_numpy()
        if times is None and labels is None:  # neither column in the log: count its rows
            from fbrapids.views.read import read_view

            times = np.zeros(len(read_view(path, eager=True, backend="cpu", **_read_options(w, []))), dtype=np.int64)
        out.append(_File(path, times, labels))
    return out, form


def _ordered(scanned: list[_File], by_time: bool) -> list[_File]:
    if by_time:
        return sorted(scanned, key=lambda f: (f.span[0] if f.span else math.inf, natural_key(f.path)))
    return sorted(scanned, key=lambda f: natural_key(f.path))


def check_split(w: Workload) -> SplitCheck:
    """The split of ``w`` checked (module docstring); returns what was found, logged."""
    files = log_files(w, w.log.paths)
    columns = _columns(w, files)
    if w.time is not None and w.time not in columns:
        raise WorkloadError(f"{w.where}: time {w.time!r} is not a column of view {w.log.name!r} ({_names(files)}); "
                            f"its columns: {', '.join(columns)}")
    label = w.label if w.label in columns else None
    form = TimeForm(w.time_form) if w.time_form is not None else None
    if w.split.rule == "at" and w.time is not None and form is not None and form.name == "s":
        from fbrapids.runs.plan_checks import check_held_out

        for f in files:  # the footers say the held-out day is empty: refused before reading a row
            if f.endswith(".parquet"):
                check_held_out(f, w.time, w.split.cutoff())
    scanned, form = _scan(w, files, label, form)
    held: list[_File] = []
    if w.split.rule == "files":
        held, form = _scan(w, log_files(w, w.split.files), label, form)
    scanned, held = _ordered(scanned, w.time is not None), _ordered(held, w.time is not None)
    rows = sum(f.rows for f in scanned) + sum(f.rows for f in held)
    if rows == 0:
        raise WorkloadError(f"{w.where}: view {w.log.name!r}: {_names([f.path for f in scanned + held])} hold no "
                            "rows (empty, or a header only)")
    check = SplitCheck(_rule_name(w, scanned), w.log.name, [f.path for f in scanned],
                       "time" if w.time is not None else "name", w.time, form, rows=rows,
                       held_files=[f.path for f in held])
    _split_rows(w, check, scanned, held)
    _refuse(w, check, scanned)
    log.debug("%s:\n%s", w.origin, check.render())
    return check


def _rule_name(w: Workload, scanned: list[_File]) -> str:
    s = w.split
    if s.rule == "at":
        t = s.cutoff()
        return f"at {when(t)[:10] if t % DAY == 0 else when(t)}"
    if s.rule == "last_day":
        last = max((f.span[1] for f in scanned if f.span), default=None)
        return f"last day {when(last // DAY * DAY)[:10]}" if last is not None else "last day"
    if s.rule == "fraction":
        return f"fraction {s.fraction:g}"
    return f"files {_names(list(s.files))}"


def _concat(files: list[_File], attr: str) -> np.ndarray | None:
    parts = [getattr(f, attr) for f in files]
    if not parts or any(p is None for p in parts):
        return None
    return np.concatenate(parts) if parts else None


def _split_rows(w: Workload, check: SplitCheck, scanned: list[_File], held_files: list[_File]) -> None:
    """Each side's rows, time range and held-out labels into ``check``."""
    times, labels = _concat(scanned, "times"), _concat(scanned, "labels")
    n = sum(f.rows for f in scanned)
    rule = w.split.rule
    if rule in ("at", "last_day"):
        assert times is not None
        check.cutoff = w.split.cutoff() if rule == "at" else (int(times.max()) // DAY * DAY if len(times) else 0)
        is_held = times >= check.cutoff
    elif rule == "fraction":
        is_held = np.arange(n) >= n - max(1, math.floor(n * (w.split.fraction or 0)))
    else:
        is_held = np.zeros(n, dtype=bool)
        h_times, h_labels = _concat(held_files, "times"), _concat(held_files, "labels")
        if w.time is not None and times is not None and h_times is not None:
            times = np.concatenate([times, h_times])
        if labels is not None and h_labels is not None:
            labels = np.concatenate([labels, h_labels])
        is_held = np.concatenate([is_held, np.ones(sum(f.rows for f in held_files), dtype=bool)])
    check.train_rows, check.held_rows = int((~is_held).sum()), int(is_held.sum())
    if w.time is not None and times is not None and len(times) == len(is_held):
        for side, mask in (("train_range", ~is_held), ("held_range", is_held)):
            if mask.any():
                setattr(check, side, (int(times[mask].min()), int(times[mask].max())))
    if labels is not None and len(labels) == len(is_held):
        values, counts = np.unique(labels[is_held][~_isnull(labels[is_held])], return_counts=True)
        check.held_classes = {_label_text(v): int(c) for v, c in zip(values, counts)}


def _isnull(a: np.ndarray) -> np.ndarray:
    import pandas as pd

    return pd.isna(a)


def _label_text(v: object) -> str:
    return str(v.item() if hasattr(v, "item") else v)


def _refuse(w: Workload, c: SplitCheck, scanned: list[_File]) -> None:
    """One :class:`~fbrapids.errors.WorkloadError` naming the rule for a split that cannot be right."""
    head = f"{w.where}: split (held out {c.rule})"
    span = f" ({when(c.train_range[0])} .. {when(c.train_range[1])})" if c.train_range else ""
    if c.held_rows == 0:
        why = (f": the last training row is at {when(c.train_range[1])}" if c.train_range else "")
        raise WorkloadError(f"{head} holds out no rows: all {c.rows:,} rows of view {c.view!r} train{why}; choose "
                            "another rule or cutoff")
    if c.train_rows == 0:
        why = (f" {when(c.held_range[0])} .. {when(c.held_range[1])}" if c.held_range else "")
        hint = ("; is the time column in another form? declare time_form" if w.split.rule in ("at", "last_day")
                else "")
        raise WorkloadError(f"{head} leaves no training rows: all {c.rows:,} rows of view {c.view!r} are held "
                            f"out{why}{hint}")
    if c.held_classes is not None and len(c.held_classes) < 2:
        only = next(iter(c.held_classes), "none")
        raise WorkloadError(f"{head}: the {c.held_rows:,} held-out rows all have label {w.label!r} = {only}: AUC is "
                            "undefined on one class")
    floor = held_out_floor(c.rows)
    if c.held_rows < floor:
        raise WorkloadError(f"{head} holds out {c.held_rows:,} of {c.rows:,} rows, under the floor of {floor:,} "
                            f"(1% of the rows, at most {FLOOR_ROWS:,}): the metrics would be noise; is the time column "
                            "in another unit?")
    if w.split.rule == "fraction" and len(scanned) > 1 and c.time is not None:
        spans = [(f.path, f.span) for f in scanned if f.span]
        for (a, sa), (b, sb) in zip(spans, spans[1:]):
            if sa[1] > sb[0]:
                raise WorkloadError(f"{head}: the files' order disagrees with their times: {a} reaches "
                                    f"{when(sa[1])}, after {b} begins ({when(sb[0])}); a fraction of rows in file "
                                    "order would train on rows newer than it holds out: split by time (rule = "
                                    "\"at\" or \"last_day\")")
    if c.train_range and c.held_range and c.train_range[1] > c.held_range[0]:
        raise WorkloadError(f"{head}: the training rows{span} reach past the first held-out time "
                            f"{when(c.held_range[0])}: the model would train on rows newer than rows it is judged on; "
                            "split by time (rule = \"at\" or \"last_day\"), or order the log by time")
