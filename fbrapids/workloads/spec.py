"""``Workload``: a typed, validated spec of a CTR log, the one input of ``run_pipeline``,
``trial``, ``fbrapids demo`` / ``trial --workload`` and the models' ``from_workload``.

A workload says where the views are (files or globs, with their reader options), how each
is cleaned, how they are joined, which column is the label, the time and the group (for
GAUC), which rows are held out, and the features by kind: the extracted ones as
:mod:`fbrapids.ops` expressions (fitted and history operators included), the sparse ids
and dense values the model reads, and the behaviour sequences DIN attends over.  It is
built in Python or read from a TOML file (:func:`fbrapids.workloads.load_workload`); every
error is a :class:`~fbrapids.errors.WorkloadError` naming the field (and the file).

Example:
    >>> from fbrapids import ops
    >>> w = Workload(views=[View("log", "clicks.csv")], label="click", split=Split("fraction", fraction=0.2),
    ...              features={"pid_h": ops.hash_bucket("pid", 64)}, sparse=["user", "pid_h"], dense=["price"])
    >>> w.sparse, w.log.name
    (('user', 'pid_h'), 'log')
    >>> Workload(views=[View("log", "c.csv")], label="click", split=Split("fraction", fraction=0.2), dense="price")
    Traceback (most recent call last):
    ...
    fbrapids.errors.WorkloadError: workload 'workload': dense must be a list of column / feature names, got the str 'price' (write ['price'])
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence, TypedDict

from fbrapids.errors import WorkloadError

if TYPE_CHECKING:
    from fbrapids.ops import ExprLike
    from fbrapids.trainers.models.base import CTRModel

SPLIT_RULES = ("at", "last_day", "fraction", "files")
JOIN_HOWS = ("left", "inner")
#: the column :mod:`fbrapids.workloads.frames` marks held-out rows with (``fraction`` / ``files`` splits)
HELD_OUT = "fbx_held_out"


def _names(value: Iterable[str], what: str, where: str) -> tuple[str, ...]:
    """``value`` as a tuple of names: a str (one name given bare) or a non-str item is an error."""
    if isinstance(value, str):
        raise WorkloadError(f"{where}: {what} must be a list of column / feature names, got the str {value!r} "
                            f"(write [{value!r}])")
    try:
        out = tuple(value)
    except TypeError:
        raise WorkloadError(f"{where}: {what} must be a list of column / feature names, got {value!r}") from None
    bad = [v for v in out if not isinstance(v, str) or not v]
    if bad:
        raise WorkloadError(f"{where}: {what} must hold names (non-empty str), got {bad[0]!r}")
    dup = sorted({v for v in out if out.count(v) > 1})
    if dup:
        raise WorkloadError(f"{where}: {what} lists {dup} more than once")
    return out


def _mapping(value: object, what: str, where: str) -> dict[str, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise WorkloadError(f"{where}: {what} must be a table (name -> value), got {value!r}")
    return dict(value)


def reader_options() -> set[str]:
    """The options a view's ``options`` may set: :func:`fbrapids.read_view`'s keyword
    arguments but the path, ``eager`` and ``backend`` (the run's)."""
    import inspect

    from fbrapids.views.read import read_view

    return set(inspect.signature(read_view).parameters) - {"path_or_glob", "eager", "backend"}


def clean_options() -> set[str]:
    """The options a view's ``clean`` may set: :func:`fbrapids.views.clean.clean`'s, but the frame."""
    import inspect

    from fbrapids.views.clean import clean

    return set(inspect.signature(clean).parameters) - {"df"}


@dataclass(frozen=True)
class View:
    """One view of the log: ``path`` (a file, a glob, or a list; relative paths are under
    the workload's ``root``), read with ``options`` (:func:`fbrapids.read_view`'s keyword
    arguments: ``format``, ``sep``, ``columns``, ``dtype``, ...), cleaned with ``clean``
    (``.fbx.clean``'s: ``where``, ``json``, ``fill``, ``drop``, ...).

    ``distinct``: keep one row per value of these key column(s) (a dictionary view split
    off an already joined log).  ``sorted_by``: the files are sorted by this key, so the
    view is indexed by it with known divisions and joined partition by partition, with no
    shuffle (the generated data's impressions and basic features).
    """

    name: str
    path: str | tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)
    clean: dict[str, Any] = field(default_factory=dict)
    distinct: tuple[str, ...] = ()
    sorted_by: str | None = None

    def __post_init__(self) -> None:
        where = f"view {self.name!r}"
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise WorkloadError(f"view: name must be an identifier, got {self.name!r}")
        path = self.path
        if isinstance(path, Path):
            path = str(path)
        if not isinstance(path, str):
            path = tuple(str(p) for p in _names([str(p) if isinstance(p, Path) else p for p in path], "path", where))
            if not path:
                raise WorkloadError(f"{where}: path lists no file")
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "options", _mapping(self.options, "options", where))
        object.__setattr__(self, "clean", _mapping(self.clean, "clean", where))
        distinct = (self.distinct,) if isinstance(self.distinct, str) else _names(self.distinct, "distinct", where)
        object.__setattr__(self, "distinct", distinct)
        known = reader_options()
        unknown = sorted(set(self.options) - known)
        if unknown:
            raise WorkloadError(f"{where}: unknown reader option(s) {unknown}; read_view takes {sorted(known)}")
        unknown = sorted(set(self.clean) - clean_options())
        if unknown:
            raise WorkloadError(f"{where}: unknown clean option(s) {unknown}; clean takes {sorted(clean_options())}")

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.path,) if isinstance(self.path, str) else tuple(self.path)


@dataclass(frozen=True)
class Join:
    """Join ``view`` into the log on ``on`` (``how``: ``"left"`` / ``"inner"``; ``validate``:
    ``"many_to_one"`` ... as :func:`fbrapids.joins.strategies.join`, None for its automatic check),
    then fill the misses with ``fill`` (column -> value).  ``after_features``: joined after
    the features are extracted (columns the expressions do not read, e.g. precomputed
    features sorted like the log)."""

    view: str
    on: str | tuple[str, ...]
    how: str = "left"
    validate: str | None = None
    fill: dict[str, object] = field(default_factory=dict)
    after_features: bool = False

    def __post_init__(self) -> None:
        where = f"join of view {self.view!r}"
        if not isinstance(self.on, str):
            object.__setattr__(self, "on", _names(self.on, "on", where))
        if self.how not in JOIN_HOWS:
            raise WorkloadError(f"{where}: how must be one of {list(JOIN_HOWS)}, got {self.how!r}")
        object.__setattr__(self, "fill", _mapping(self.fill, "fill", where))


@dataclass(frozen=True)
class Split:
    """Which rows are held out for evaluation (the rest train).

    ``rule``: ``"at"`` (rows with ``time >= at``; ``at`` epoch seconds or an ISO date),
    ``"last_day"`` (rows of the log's last calendar day, UTC, of the time column read in its
    form), ``"fraction"`` (the last ``fraction`` of the log's rows in file order: the files
    in time order, else in natural name order) or
    ``"files"`` (the log view's rows read from ``files`` instead of its ``path``, with the
    same options).

    Example:
        >>> Split("at", at="2017-05-07").cutoff()
        1494115200
    """

    rule: str = "last_day"
    at: int | str | None = None
    fraction: float | None = None
    files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.rule not in SPLIT_RULES:
            raise WorkloadError(f"split: rule must be one of {list(SPLIT_RULES)}, got {self.rule!r}")
        if self.rule == "at" and (self.at is None or isinstance(self.at, bool)):
            raise WorkloadError("split: rule 'at' needs at = epoch seconds or an ISO date")
        if self.rule == "at":
            self.cutoff()  # checked here
        if self.rule == "fraction" and not (isinstance(self.fraction, (int, float)) and 0 < self.fraction < 1):
            raise WorkloadError(f"split: rule 'fraction' needs 0 < fraction < 1, got {self.fraction!r}")
        files = (self.files,) if isinstance(self.files, str) else _names(self.files, "files", "split")
        object.__setattr__(self, "files", files)
        if self.rule == "files" and not files:
            raise WorkloadError("split: rule 'files' needs files = the held-out files of the log view")

    def cutoff(self) -> int:
        """``at`` as epoch seconds."""
        if isinstance(self.at, (int, float)) and not isinstance(self.at, bool):
            return int(self.at)
        import datetime as dt

        try:
            d = dt.datetime.fromisoformat(str(self.at))
        except ValueError as e:
            raise WorkloadError(f"split: at must be epoch seconds or an ISO date, got {self.at!r}") from e
        if d.tzinfo is None:
            d = d.replace(tzinfo=dt.timezone.utc)
        return int(d.timestamp())


@dataclass(frozen=True)
class SequenceFeature:
    """A behaviour sequence (a list of ids per row) and the sparse feature DIN attends with
    over it (``target``); ``expression`` builds it (None: a column of the views)."""

    target: str
    expression: ExprLike | None = None


class StreamArgs(TypedDict):
    """The stream arguments a workload gives a model (:meth:`Workload.stream_args`)."""

    label: str
    dense: list[str]
    sparse: list[str]
    group: str | None


@dataclass(frozen=True)
class Workload:
    """A CTR log, declared (module docstring).  The first view is the log; ``joins`` join
    the others into it, in order.

    Attributes:
        views: the views, the log first.
        label: the 0/1 click column.
        split: the held-out rule (:class:`Split`).
        time: the time column (``at`` / ``last_day`` splits, the order of the log's files,
            ``ops.hour`` / ``day`` / ``weekday`` and history features read it), read as UTC
            epoch seconds in its ``time_form``.
        time_form: the time column's form (:mod:`fbrapids.views.times`): ``"s"``, ``"ms"``,
            ``"us"``, ``"ns"``, ``"datetime"``, ``"iso8601"`` or a strptime format
            (``"%y%m%d%H"``); None: inferred from its values where only one form fits.
        group: the column GAUC groups by (None: no GAUC).
        item_view: the view of the candidate items (its columns are a served call's item
            columns: :func:`fbrapids.app.workload_export.workload_spec`); None: none.
        joins: :class:`Join` s, in order.
        features: extracted features, name -> :mod:`fbrapids.ops` expression.
        sparse / dense: the names the models read (view columns or extracted features).
        sequences: name -> :class:`SequenceFeature`, for DIN (other models leave them out).
        root: the folder relative view paths are under (a TOML file's: its own folder).
        name / source: how errors and summaries name the workload (source: its file).
    """

    views: tuple[View, ...]
    label: str
    split: Split = field(default_factory=Split)
    time: str | None = None
    group: str | None = None
    joins: tuple[Join, ...] = ()
    features: dict[str, ExprLike] = field(default_factory=dict)
    sparse: tuple[str, ...] = ()
    dense: tuple[str, ...] = ()
    sequences: dict[str, SequenceFeature] = field(default_factory=dict)
    root: str | None = None
    name: str = "workload"
    source: str | None = None
    time_form: str | None = None
    item_view: str | None = None

    def __post_init__(self) -> None:
        self._check_views()
        self._check_columns()
        self._check_joins()
        self._check_features()
        self._check_inputs()
        self._check_sequences()
        if self.root is not None:
            object.__setattr__(self, "root", str(self.root))

    def _check_views(self) -> None:
        """``views``: a non-empty tuple of :class:`View` of distinct names."""
        where = self.where
        views = tuple(self.views) if not isinstance(self.views, View) else (self.views,)
        if not views or not all(isinstance(v, View) for v in views):
            raise WorkloadError(f"{where}: views must be a non-empty list of View")
        object.__setattr__(self, "views", views)
        names = [v.name for v in views]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise WorkloadError(f"{where}: views {dup} are declared more than once")

    def _check_columns(self) -> None:
        """``label`` (and ``time`` / ``group`` when given): column names; ``split``: a
        :class:`Split`, with the time column its rule needs."""
        where = self.where
        for f in ("label", "time", "group"):
            v = getattr(self, f)
            if (v is not None or f == "label") and (not isinstance(v, str) or not v):
                raise WorkloadError(f"{where}: {f} must be a column name, got {v!r}")
        if not isinstance(self.split, Split):
            raise WorkloadError(f"{where}: split must be a Split, got {self.split!r}")
        if self.split.rule in ("at", "last_day") and self.time is None:
            raise WorkloadError(f"{where}: split rule {self.split.rule!r} needs the time column (time = ...)")
        if self.time_form is not None:
            from fbrapids.views.times import TimeForm

            if self.time is None:
                raise WorkloadError(f"{where}: time_form {self.time_form!r} is given, but no time column (time = ...)")
            try:
                TimeForm(self.time_form)
            except WorkloadError as e:
                raise WorkloadError(f"{where}: {e}") from None

    def _check_joins(self) -> None:
        """``joins``: a tuple of :class:`Join`, each of a declared view other than the log."""
        where, names = self.where, [v.name for v in self.views]
        joins = tuple(self.joins)
        for j in joins:
            if not isinstance(j, Join):
                raise WorkloadError(f"{where}: joins must hold Join, got {j!r}")
            if j.view not in names:
                raise WorkloadError(f"{where}: join of view {j.view!r}: no such view (views: {names})")
            if j.view == names[0]:
                raise WorkloadError(f"{where}: join of view {j.view!r}: the log itself cannot be joined in")
        object.__setattr__(self, "joins", joins)
        joined = [j.view for j in joins]
        if self.item_view is not None and self.item_view not in joined:
            raise WorkloadError(f"{where}: item_view {self.item_view!r} must name a joined view (joined: {joined})")

    def _check_features(self) -> None:
        """``features``: identifier names to feature expressions."""
        from fbrapids.kernels import as_expr

        where = self.where
        feats = _mapping(self.features, "features", where)
        for n, e in feats.items():
            if not isinstance(n, str) or not n.isidentifier():
                raise WorkloadError(f"{where}: feature name {n!r} must be an identifier")
            try:
                as_expr(e)
            except Exception as err:
                raise WorkloadError(f"{where}: feature {n!r} is not a feature expression ({err})") from err
        object.__setattr__(self, "features", feats)

    def _check_inputs(self) -> None:
        """``sparse`` and ``dense``: lists of names, none in both, the label in neither."""
        where = self.where
        sparse = _names(self.sparse, "sparse", where)
        dense = _names(self.dense, "dense", where)
        both = sorted(set(sparse) & set(dense))
        if both:
            raise WorkloadError(f"{where}: {both} listed as both sparse and dense")
        if self.label is not None and (self.label in sparse or self.label in dense):
            raise WorkloadError(f"{where}: the label {self.label!r} is also a model input")
        object.__setattr__(self, "sparse", sparse)
        object.__setattr__(self, "dense", dense)

    def _check_sequences(self) -> None:
        """``sequences``: names to :class:`SequenceFeature` (or its target's name), each
        attending with a sparse feature."""
        where, seqs = self.where, {}
        for n, s in _mapping(self.sequences, "sequences", where).items():
            if isinstance(s, str):
                s = SequenceFeature(s)
            if not isinstance(s, SequenceFeature):
                raise WorkloadError(f"{where}: sequence {n!r} must be a SequenceFeature or its target's name")
            if s.target not in self.sparse:
                raise WorkloadError(f"{where}: sequence {n!r} attends with {s.target!r}, which is not a sparse feature")
            seqs[n] = s
        object.__setattr__(self, "sequences", seqs)

    # -- reading ------------------------------------------------------------------------
    @property
    def where(self) -> str:
        """How errors name this workload: its name, and its file when read from one."""
        return f"workload {self.name!r}" + (f" ({self.source})" if self.source else "")

    @property
    def origin(self) -> str:
        """Where the workload comes from, as messages name it: its file, else its root folder."""
        return self.source or self.root or self.where

    @property
    def log(self) -> View:
        """The log view (the first)."""
        return self.views[0]

    def view(self, name: str) -> View:
        for v in self.views:
            if v.name == name:
                return v
        raise WorkloadError(f"{self.where}: no view {name!r}")

    def resolve(self, path: str) -> str:
        """``path`` under ``root`` when relative."""
        p = Path(path).expanduser()
        return str(p if p.is_absolute() or self.root is None else Path(self.root) / p)

    def files(self) -> list[Path]:
        """Every file the views (and a ``files`` split) read, globs expanded."""
        import glob

        out: list[Path] = []
        paths = [p for v in self.views for p in v.paths] + list(self.split.files)
        for p in paths:
            full = self.resolve(p)
            hits = sorted(glob.glob(full)) if any(c in full for c in "*?[") else [full]
            for h in hits:
                hp = Path(h)
                out.extend(sorted(x for x in hp.rglob("*") if x.is_file()) if hp.is_dir() else [hp])
        return out

    def check_files(self) -> None:
        """A :class:`~fbrapids.errors.WorkloadError` naming the view and the path when a
        view's files are missing (before any work)."""
        import glob

        for v in self.views:
            for p in v.paths:
                full = self.resolve(p)
                if not (glob.glob(full) if any(c in full for c in "*?[") else Path(full).exists()):
                    hint = ("; a plain folder stands for the generated data (impressions / users / ads / basic "
                            "parquet): declare your own log as a Workload or a TOML file (README: Your own log)"
                            if self.name == "generated" else "")
                    raise WorkloadError(f"{self.where}: view {v.name!r}: no file matches {full!r}{hint}")
        for p in self.split.files:
            if not Path(self.resolve(p)).exists() and not __import__("glob").glob(self.resolve(p)):
                raise WorkloadError(f"{self.where}: split files: no file matches {self.resolve(p)!r}")

    # -- deriving -----------------------------------------------------------------------
    def with_features(self, features: Mapping[str, ExprLike] | None = None, *, sparse: Sequence[str] = (),
                      dense: Sequence[str] = (), sequences: Mapping[str, SequenceFeature] | None = None
                      ) -> "Workload":
        """This workload with more extracted ``features`` and more model inputs (appended).

        Example:
            >>> from fbrapids import ops
            >>> w = Workload([View("log", "l.csv")], "click", Split("fraction", fraction=0.5), sparse=["a"])
            >>> w.with_features({"h": ops.hash_bucket("b", 8)}, sparse=["h"]).sparse
            ('a', 'h')
        """
        for what, names in (("sparse", sparse), ("dense", dense)):
            _names(names, what, self.where)
        return dataclasses.replace(
            self, features={**self.features, **dict(features or {})},
            sparse=self.sparse + tuple(s for s in sparse if s not in self.sparse),
            dense=self.dense + tuple(d for d in dense if d not in self.dense),
            sequences={**self.sequences, **dict(sequences or {})})

    def replace(self, **changes: Any) -> "Workload":  # (each a field's value: the fields' types, checked again)
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)

    def inputs(self, sequences: bool = False) -> tuple[list[str], list[str], dict[str, str], dict[str, ExprLike]]:
        """``(dense, sparse, sequences, features)`` of a model over this workload: with
        ``sequences`` the behaviour sequences are added (to the sparse inputs, their
        expressions to the features); without, they are left out.

        Example:
            >>> w = Workload([View("log", "l.csv")], "click", Split("fraction", fraction=0.5), sparse=["cat"],
            ...              sequences={"hist": SequenceFeature("cat")})
            >>> w.inputs(sequences=True)[1:3], w.inputs()[1:3]
            ((['cat', 'hist'], {'hist': 'cat'}), (['cat'], {}))
        """
        dense, sparse, feats = list(self.dense), list(self.sparse), dict(self.features)
        seqs: dict[str, str] = {}
        if sequences:
            for n, s in self.sequences.items():
                seqs[n] = s.target
                if n not in sparse:
                    sparse.append(n)
                if s.expression is not None and n not in feats:
                    feats = {n: s.expression, **feats}
        return dense, sparse, seqs, feats

    def model_inputs(self, model: str | type[CTRModel]
                     ) -> tuple[list[str], list[str], dict[str, str], dict[str, ExprLike]]:
        """``(dense, sparse, sequences, features)`` that ``model`` (a registered model's short
        name, or its class) trains on: the model says
        (:meth:`~fbrapids.trainers.models.base.CTRModel.workload_inputs`; DIN adds the
        sequences, the others leave them out).

        Example:
            >>> w = Workload([View("log", "l.csv")], "click", Split("fraction", fraction=0.5), sparse=["cat"],
            ...              sequences={"hist": SequenceFeature("cat")})
            >>> w.model_inputs("din")[1:3], w.model_inputs("dlrm")[1:3]
            ((['cat', 'hist'], {'hist': 'cat'}), (['cat'], {}))
        """
        from fbrapids.trainers.models import model_for

        cls = model_for(model) if isinstance(model, str) else model
        return cls.workload_inputs(self)

    def stream_args(self, model: str | type[CTRModel] = "dlrm") -> StreamArgs:
        """``label``, ``dense``, ``sparse`` and ``group`` of the stream feeding ``model``
        (:meth:`model_inputs`: the same lists ``Model.from_workload`` builds the model from).

        Example:
            >>> w = Workload([View("log", "l.csv")], "click", Split("fraction", fraction=0.5), sparse=["ad"],
            ...              dense=["price"], group="user")
            >>> w.stream_args()
            {'label': 'click', 'dense': ['price'], 'sparse': ['ad'], 'group': 'user'}
        """
        dense, sparse, _, _ = self.model_inputs(model)
        return {"label": self.label, "dense": dense, "sparse": sparse, "group": self.group}
