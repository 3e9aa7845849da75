"""Fit once, apply everywhere: :func:`fit`, :class:`Fitted` and the frame-level stage of ``extract``.

``fitted = fit(train, features)`` computes every fitted operator's inputs with the
meta-kernels and all their statistics in ONE pass (one ``dask.compute``) and returns a
:class:`Fitted` holding the frozen states.  ``extract(frame, fitted)`` applies them and
never refits; ``training=True`` (only on the frame it was fitted on) gives target
encodings their out-of-fold statistics.  Extracting a fitted operator without a state is a
:class:`~fbrapids.errors.NotFittedError` naming the feature, unless ``allow_unfitted=True``.

History operators (``history``, ``window_count``, ``window_mean``, ``time_since``) need no
state: they are computed on the frame itself.  On dask only their input columns are
shuffled by the key (dask's own shuffle), and the results go back to their rows: the
frame keeps its partitions and row order.

Example:
    >>> import pandas as pd, fbrapids
    >>> from fbrapids import ops
    >>> train = pd.DataFrame({"city": ["a", "b", "a"], "ts": [1, 2, 3]})
    >>> fitted = train.fbx.fit(c=ops.categorify("city"))
    >>> pd.DataFrame({"city": ["b", "a", "z"], "ts": [9, 9, 9]}).fbx.extract(fitted)["c"].tolist()
    [4, 3, 2]
    >>> pd.DataFrame({"city": ["b"]}).fbx.extract(c=ops.categorify("city"))
    Traceback (most recent call last):
    ...
    fbrapids.errors.NotFittedError: feature 'c': categorify(city, ...) has no fitted state; fit it on the training frame first: fitted = train.fbx.fit(**features), then frame.fbx.extract(fitted) (or pass allow_unfitted=True to fit on this very frame)
"""

from __future__ import annotations

import hashlib
import logging
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Iterator, Mapping, TypeAlias, TypedDict

import numpy as np
import pandas as pd

from fbrapids.errors import FeatureError, NotFittedError
from fbrapids.features.run import run_features
from fbrapids.features.schema import check_columns
from fbrapids.fitting import history as H, rowops as R
from fbrapids.fitting.encoders import spec_of
from fbrapids.fitting.params import as_int
from fbrapids.fitting.registry import frame_operator
from fbrapids.fitting.state import FittedState, load_states, read_document, save_states
from fbrapids.frames import backend as _backend
from fbrapids.kernels import Call, Col, Expr, as_expr, find_operator, operators
from fbrapids.kernels.expr_json import expr_from_json, expr_to_json

if TYPE_CHECKING:  # (annotations only: no import at run time)
    import dask.dataframe as dd

    from fbrapids.features.feature_map import FeatureMap
    from fbrapids.frames.backend import EagerFrame, FrameLike, SeriesLike

log = logging.getLogger(__name__)



class OperatorsOfStage:
    """The registered operators of some stages, by name: ``name in FITTED_OPS`` asks the
    operator (its ``stage``); no list of names is kept.

    Example:
        >>> "categorify" in FITTED_OPS, "hour" in FRAME_OPS, sorted(ROW_OPS)
        (True, False, ['lookup_value', 'overlap_count', 'pad'])
    """

    def __init__(self, *stages: str) -> None:
        self.stages = stages

    def __contains__(self, name: object) -> bool:
        op = find_operator(name) if isinstance(name, str) else None
        return op is not None and op.stage in self.stages

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, op in operators().items() if op.stage in self.stages])


FITTED_OPS = OperatorsOfStage("fitted")
HISTORY_OPS = OperatorsOfStage("history")
ROW_OPS = OperatorsOfStage("row")
FRAME_OPS = OperatorsOfStage("fitted", "history", "row")
_TMP = "__fbx_"


# -- expressions ---------------------------------------------------------------------------
def frame_calls(e: Expr) -> list[Call]:
    """The fitted and history calls in ``e``, innermost first.

    Example:
        >>> from fbrapids import ops
        >>> [c.op for c in frame_calls(ops.hash_bucket(ops.count_encode("u"), 10))]
        ['count_encode']
    """
    out: list[Call] = []

    def walk(x: Expr) -> None:
        if isinstance(x, Call):
            for a in x.args:
                walk(a)
            if x.op in FRAME_OPS and x not in out:
                out.append(x)

    walk(e)
    return out


def state_id(call: Call) -> str:
    """The id a fitted call's state is stored under (shared vocabularies share one)."""
    shared = frame_operator(call.op).state_key(call)
    if shared:
        return shared
    return call.op + "-" + hashlib.sha1(repr(call.key).encode()).hexdigest()[:16]


def _substitute(e: Expr, done: Mapping[Call, str]) -> Expr:
    if not isinstance(e, Call):
        return e
    if e in done:
        return Col(done[e])
    args = tuple(_substitute(a, done) for a in e.args)
    return Call(e.op, args, e.params) if args != e.args else e


def _roles(call: Call, training: bool = True) -> list[str]:
    """Input column names of ``call``'s arguments, by role."""
    return frame_operator(call.op).role_names(len(_inputs(call, training)))


def _inputs(call: Call, training: bool = True) -> list[Expr]:
    """The expressions the kernels compute for ``call`` (its frame operator's inputs)."""
    return frame_operator(call.op).input_exprs(call, training)


def _params(call: Call) -> dict[str, object]:
    return frame_operator(call.op).params(call)


# -- the Fitted object -------------------------------------------------------------------------
@dataclass
class Fitted:
    """Feature expressions and the frozen states of their fitted operators.

    ``info`` holds what the fit saw: ``rows``, the ``time_column`` and its ``time_min`` /
    ``time_max``, and ``seconds``.
    """

    features: dict[str, Expr]
    states: dict[str, FittedState] = field(default_factory=dict)
    info: dict[str, object] = field(default_factory=dict)
    _source: weakref.ref[FrameLike] | None = field(default=None, repr=False, compare=False)

    def extract(self, frame: FrameLike, training: bool = False, fused: bool = True) -> FrameLike:
        """``frame`` with the features added, the fitted states applied (see :func:`extract`)."""
        return extract_frame(frame, self, training=training, fused=fused)

    def explain(self) -> str:
        """Each fitted state: operator, sizes, and the rows and time range it was fitted on.

        Example:
            >>> import pandas as pd
            >>> from fbrapids import ops
            >>> f = fit(pd.DataFrame({"x": [1.0, 3.0], "ts": [5, 9]}), {"z": ops.normalize("x")})
            >>> print(f.explain().splitlines()[1])
              z: normalize: 0 bytes; fitted on 2 rows; time [5, 9] (ts); mean=2; std=1; min=1; max=3; median=2
        """
        i = self.info
        head = f"fitted features: {len(self.states)} state(s), {sum(s.nbytes for s in self.states.values()):,} bytes"
        if i:
            head += (f"; fitted on {i.get('rows', 0):,} rows" +
                     (f", {i['time_column']} in [{i['time_min']}, {i['time_max']}]" if i.get("time_column") else "") +
                     f" in {i.get('seconds', 0.0):.2f} s (one pass)")
        lines = [head]
        for name, e in self.features.items():
            for c in frame_calls(e):
                if c.op in FITTED_OPS:
                    lines.append(f"  {name}: {self.states[state_id(c)].describe()}")
                elif c.op in HISTORY_OPS:
                    lines.append(f"  {name}: {c.op} over the frame itself (no state; strictly earlier events)")
        return "\n".join(lines)

    def frozen(self) -> dict[str, Expr]:
        """The features with each fitted call carrying its state as a ``state`` parameter
        (numpy arrays, tuples of strings and JSON scalars: data a serving spec stores as JSON).
        Extracting them applies those states; nothing is refitted.

        Example:
            >>> import pandas as pd
            >>> from fbrapids import ops
            >>> f = fit(pd.DataFrame({"c": ["a", "b", "a"]}), {"cid": ops.categorify("c")})
            >>> feats = f.frozen()
            >>> feats["cid"].param_dict()["state"]["tables"]["values"]
            ('a', 'b')
            >>> extract_frame(pd.DataFrame({"c": ["b", "z"]}), feats)["cid"].tolist()
            [4, 2]
        """
        def freeze(e: Expr) -> Expr:
            if not isinstance(e, Call):
                return e
            args = tuple(freeze(a) for a in e.args)
            if e.op in FITTED_OPS and "state" not in e.param_dict():
                return Call(e.op, args, e.params + (("state", state_param(self.states[state_id(e)])),))
            return Call(e.op, args, e.params) if args != e.args else e

        return {name: freeze(e) for name, e in self.features.items()}

    def save(self, directory: str | Path) -> None:
        """Write the states (npz + JSON) and the feature expressions (JSON); no pickle."""
        features = {k: expr_to_json(e, f"feature {k!r}", FeatureError) for k, e in self.features.items()}
        save_states(self.states, directory, extra={"features": features,
                                                   "info": self.info})

    @classmethod
    def load(cls, directory: str | Path) -> "Fitted":
        """Read what :meth:`save` wrote (runs no code: JSON and ``allow_pickle=False`` npz)."""
        doc = read_document(directory)
        return cls({k: expr_from_json(v, f"{directory}: feature {k!r}") for k, v in doc.get("features", {}).items()},
                   load_states(directory),
                   dict(doc.get("info", {})))


class StateParam(TypedDict):
    """A fitted state as a call's ``state`` parameter (:meth:`Fitted.frozen`): data a serving
    spec stores as JSON."""

    op: str
    tables: dict[str, tuple[object, ...] | np.ndarray]  # text tables as tuples of strings
    meta: dict[str, object]  # the JSON scalars of the state's meta


def state_param(state: FittedState) -> StateParam:
    """A state as an expression parameter: numeric tables as arrays, text tables as tuples."""
    tables: dict[str, tuple[object, ...] | np.ndarray] = {
        k: (tuple(v.tolist()) if v.dtype.kind in "UO" else v) for k, v in state.tables.items()}
    meta: dict[str, object] = {k: v for k, v in state.meta.items()
                               if v is None or isinstance(v, (bool, int, float, str))}
    return {"op": state.op, "tables": tables, "meta": meta}


def state_from_param(p: StateParam) -> FittedState:
    """The :class:`FittedState` a ``state`` parameter carries."""
    tables = {k: (np.asarray(v, dtype=object) if isinstance(v, tuple) and v and isinstance(v[0], str)
                  else np.asarray(v)) for k, v in p["tables"].items()}  # object: a trailing NUL stays
    return FittedState(p["op"], {}, tables, dict(p["meta"]))


# -- computing inputs --------------------------------------------------------------------------

def _with_inputs(frame: FrameLike, calls: list[Call], fused: bool, training: bool = True
                 ) -> tuple[FrameLike, dict[Call, dict[str, str]]]:
    """``frame`` with each call's inputs as temporary columns (kernel-computed where needed)."""
    names: dict[Call, dict[str, str]] = {}
    direct: dict[str, str] = {}
    computed: dict[str, Expr] = {}
    by_expr: dict[Expr, str] = {}
    for c in calls:
        cols = {}
        for role, e in zip(_roles(c, training), _inputs(c, training)):
            if e not in by_expr:
                tmp = f"{_TMP}in{len(by_expr)}"
                by_expr[e] = tmp
                if isinstance(e, Col):
                    direct[tmp] = e.name
                else:
                    computed[tmp] = e
            cols[role] = by_expr[e]
        names[c] = cols
    if computed:
        frame = run_features(frame, computed, fused)
    if direct:
        frame = copy_columns(frame, direct)
    return frame, names


def _inputs_frame(part: pd.DataFrame, cols: Mapping[str, str]) -> pd.DataFrame:
    return pd.DataFrame({role: part[c] for role, c in cols.items()}, index=part.index)


# -- fit ----------------------------------------------------------------------------------------
def fit(frame: FrameLike, features: FeatureMap, time_column: str | None = "ts", fused: bool = True) -> Fitted:
    """Fit every fitted operator of ``features`` over ``frame`` in one pass.

    Args:
        frame: the training frame (pandas, cudf, dask or dask-cudf).
        features: output name -> expression; operators that need no fit are kept as they are.
        time_column: recorded with the state (its min and max) when ``frame`` has it.

    Returns:
        A :class:`Fitted` to extract on any frame.

    Raises:
        FeatureError: a fitted operator nested inside another one's inputs (fit the inner
            one first, extract it, then fit the outer one on that frame).

    Example:
        >>> import pandas as pd
        >>> from fbrapids import ops
        >>> f = fit(pd.DataFrame({"u": [1, 1, 2], "y": [1, 0, 1]}), {"n": ops.count_encode("u")})
        >>> f.extract(pd.DataFrame({"u": [1, 3]}))["n"].tolist()
        [2, 0]
    """
    import dask

    t0 = time.perf_counter()
    exprs = {name: as_expr(e) for name, e in features.items()}
    check_columns(frame, exprs)
    calls: list[Call] = []
    for name, e in exprs.items():
        for c in frame_calls(e):
            if c.op not in FITTED_OPS:
                continue
            inner = [a for a in c.args for x in frame_calls(a) if x.op in FITTED_OPS]
            if inner:
                raise FeatureError(f"feature {name!r}: {c.op} reads another fitted operator ({inner[0]}); fit the "
                                   "inner one first and extract it, then fit the outer one on that frame")
            if c not in calls:
                calls.append(c)
    base = frame
    if any(c.args and frame_calls(a) for c in calls for a in c.args):  # history feeding a fitted operator
        frame = _apply_frame_ops(frame, [x for c in calls for a in c.args for x in frame_calls(a)], {}, False, fused)
        calls = [_substitute_history(c) for c in calls]
    work, names = _with_inputs(frame, calls, fused)
    groups: dict[str, list[Call]] = {}
    for c in calls:
        groups.setdefault(state_id(c), []).append(c)
    lazy: dict[str, dict[str, list[SeriesLike]]] = {}  # computed (eager series) below, on dask
    for sid, members in groups.items():
        spec = spec_of(members[0].op, _params(members[0]))
        _check_shared(sid, members)
        for c in members:
            cols = names[c]
            inp = copy_columns(work, cols)[list(cols)]  # by role: one column may fill two (label = key)
            for k, v in spec.stats(inp).items():
                lazy.setdefault(sid, {}).setdefault(k, []).append(v)
    extras: dict[str, object] = {"rows": work.shape[0] if _backend.is_dask(work) else len(work)}
    cols_of = getattr(base, "columns", [])
    if time_column and time_column in cols_of:
        extras["time_min"] = base[time_column].min()
        extras["time_max"] = base[time_column].max()
    if _backend.is_dask(work):
        lazy, extras = dask.compute(lazy, extras)  # every fitted operator's statistics: one pass
    rows = as_int(extras["rows"], "rows")
    states: dict[str, FittedState] = {}
    for sid, parts in lazy.items():
        spec = spec_of(groups[sid][0].op, _params(groups[sid][0]))
        state = spec.finish(parts, rows)
        if "time_min" in extras:
            state.meta.update(time_column=time_column, time_min=_scalar(extras["time_min"]),
                              time_max=_scalar(extras["time_max"]))
        states[sid] = state
    info: dict[str, object] = {"rows": rows, "seconds": time.perf_counter() - t0}
    if "time_min" in extras:
        info.update(time_column=time_column, time_min=_scalar(extras["time_min"]), time_max=_scalar(extras["time_max"]))
    out = Fitted(exprs, states, info)
    try:
        out._source = weakref.ref(base)
    except TypeError:
        out._source = None
    log.info("fitted %d state(s) over %d rows in %.2f s", len(states), rows, info["seconds"])
    return out


def _scalar(v: object) -> object:
    """A computed statistic (numpy, pandas or cudf scalar) as a Python value (whole floats as ints)."""
    v = _backend.to_host(v) if hasattr(v, "dtype") and _backend.is_gpu_object(v) else v
    v = v.item() if hasattr(v, "item") else v
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _check_shared(sid: str, members: list[Call]) -> None:
    params = {tuple((k, v) for k, v in c.params) for c in members}
    if len(params) > 1:
        raise FeatureError(f"shared vocabulary {sid!r}: its categorify calls disagree on parameters {sorted(params)}")


def _substitute_history(c: Call) -> Call:
    done = {x: _history_column(x) for a in c.args for x in frame_calls(a)}
    return Call(c.op, tuple(_substitute(a, done) for a in c.args), c.params)


def _history_column(c: Call) -> str:
    return f"{_TMP}h_{hashlib.sha1(repr(c.key).encode()).hexdigest()[:12]}"


# -- apply --------------------------------------------------------------------------------------------
#: one frame-level call to apply: (output column, operator, its parameters, its input columns
#: by role, its fitted state: None for a history or row operator)
_Job: TypeAlias = tuple[str, str, dict[str, object], dict[str, str], "FittedState | None"]


def _apply_partition(part: EagerFrame, jobs: list[_Job], training: bool) -> EagerFrame:
    """One partition with the fitted / history outputs of ``jobs`` added as columns.  A cudf
    partition sends only the jobs' input columns to the host and takes only their outputs
    back (not every column both ways); the outputs join it by position."""
    gpu = _backend.is_gpu_object(part)
    host = _backend.to_host(part[sorted({c for *_, cols, _ in jobs for c in cols.values()})]) if gpu else part
    out = {}
    for name, op, params, cols, state in jobs:
        inp = _inputs_frame(host, cols)
        if op in FITTED_OPS:
            assert state is not None  # (extract_frame refuses a fitted call without a state)
            out[name] = spec_of(op, params).apply(inp, state, training=training)
        elif op in ROW_OPS:
            out[name] = R.compute(op, inp, params)
        else:
            out[name] = H.compute(op, inp, params)
    if not gpu:
        return host.assign(**out)
    positions = pd.RangeIndex(len(host))
    by_position = {n: _backend.on_index(v if isinstance(v, pd.Series) else pd.Series(v), positions) for n, v in out.items()}
    moved = _backend.to_backend(pd.DataFrame(by_position), _backend.backend_of(part))
    return part.assign(**{n: _backend.on_index(moved[n], part.index) for n in out})


def _apply_frame_ops(frame: FrameLike, calls: list[Call], states: Mapping[str, FittedState], training: bool,
                     fused: bool) -> FrameLike:
    """``frame`` with a column per call (named by :func:`_column_of`), inputs computed first."""
    frame, names = _with_inputs(frame, calls, fused, training)
    fitted_jobs: list[_Job] = []
    history_by_key: dict[str, list[_Job]] = {}
    meta = getattr(frame, "_meta", frame)
    for c in calls:
        state = states.get(state_id(c)) if c.op in FITTED_OPS else None
        check = frame_operator(c.op).check
        if check is not None:
            check(meta, names[c], c)
        params = ({**_params(c), "_labels": tuple(str(a) for a in c.args)} if c.op in FITTED_OPS or c.op in HISTORY_OPS
                  else _params(c))  # the columns' names, for errors
        job: _Job = (_column_of(c), c.op, params, names[c], state)
        if c.op in FITTED_OPS or c.op in ROW_OPS:
            fitted_jobs.append(job)
        else:
            history_by_key.setdefault(names[c]["a0"], []).append(job)
    inputs = {col for cols in names.values() for col in cols.values()}
    if _backend.is_dask_frame(frame):
        import dask

        for key, jobs in history_by_key.items():
            frame = _history_in_place(frame, key, jobs, dask)
        if fitted_jobs:
            frame = _map(frame, fitted_jobs, training, dask)
    else:
        jobs = fitted_jobs + [j for js in history_by_key.values() for j in js]
        frame = _apply_partition(frame, jobs, training)
    return frame.drop(columns=sorted(inputs))


_ROW = f"{_TMP}row"
_PART = f"{_TMP}part"
_POS_BITS = 40  # rows per partition below 2**40


def _tag_rows(part: EagerFrame, partition_info: dict[str, int] | None = None) -> EagerFrame:
    number = (partition_info or {}).get("number", 0)
    return part.assign(**{_ROW: (np.int64(number) << _POS_BITS) + np.arange(len(part), dtype=np.int64)})


def _part_of_row(part: EagerFrame) -> EagerFrame:
    return part.assign(**{_PART: part[_ROW].to_numpy() // (1 << _POS_BITS)})


def _copy(part: EagerFrame, mapping: Mapping[str, str]) -> EagerFrame:
    # the series itself relabelled, never ``to_numpy()`` (a nullable / Arrow int column with
    # nulls came out as float64: 2^53 + 1 -> 2^53, 2^64 - 1 -> 2^64, while the meta kept its
    # dtype) and never ``.array`` / ``set_axis`` (cudf series have neither)
    return part.assign(**{new: _backend.on_index(part[src], part.index) for new, src in mapping.items()})


def copy_columns(frame: FrameLike, mapping: Mapping[str, str]) -> FrameLike:
    """``frame`` with column ``src`` copied as ``new`` for each ``new: src``, per partition and
    by position (a dask-level ``assign`` of one column to another aligns indexes, which
    fails on the duplicate labels partition-local indexes have)."""
    if not _backend.is_dask(frame):
        return frame.assign(**{new: frame[src] for new, src in mapping.items()})
    meta = frame._meta.assign(**{new: frame._meta[src] for new, src in mapping.items()})
    return frame.map_partitions(_copy, mapping, meta=meta)


def _attach(part: EagerFrame, results: EagerFrame, names: list[str]) -> EagerFrame:
    """``part`` with the ``names`` columns of ``results`` (its own rows, in any order) put back in row order."""
    host = _backend.to_host(results) if _backend.is_gpu_object(results) else results
    if len(host) != len(part):
        raise FeatureError(f"history: {len(host)} results for a partition of {len(part)} rows")
    order = np.argsort(host[_ROW].to_numpy(), kind="stable")
    index = part.index if not _backend.is_gpu_object(part) else pd.RangeIndex(len(part))
    cols = {n: pd.Series(host[n].iloc[order].array, index=index, name=n) for n in names}
    if _backend.is_gpu_object(part):
        cols = {n: _backend.on_index(_backend.to_backend(pd.DataFrame({n: c}), _backend.backend_of(part))[n], part.index)
                for n, c in cols.items()}
    return part.drop(columns=[_ROW]).assign(**cols)


def _history_in_place(frame: dd.DataFrame, key: str, jobs: list[_Job], dask: ModuleType) -> dd.DataFrame:
    """History jobs over one key on a dask frame, rows kept in their partitions and order.

    Only the jobs' input columns travel: tagged with their (partition, position), shuffled by
    the key with dask's own shuffle (each key's events in one partition), computed, and sent
    back to their partition by ``set_index`` on the partition number with exact divisions.
    """
    n = frame.npartitions
    tagged = frame.map_partitions(_tag_rows, meta=frame._meta.assign(**{_ROW: np.zeros(0, dtype=np.int64)}))
    inputs = sorted({c for *_, cols, _ in jobs for c in cols.values()})
    narrow = tagged[inputs + [_ROW]].shuffle(on=key)
    computed = _map(narrow, jobs, False, dask)
    names = [job[0] for job in jobs]
    results = computed[[_ROW] + names]
    results = results.map_partitions(_part_of_row, meta=results._meta.assign(**{_PART: np.zeros(0, np.int64)}))
    results = results.set_index(_PART, divisions=list(range(n)) + [n - 1] if n > 1 else [0, 0])
    meta = frame._meta.assign(**{name: results._meta[name] for name in names})
    # partition i of the output = partition i of ``tagged`` + its results; built from delayed
    # pairs so the output is ONE collection (a dask map_partitions over two frames is not
    # co-aligned with its own columns: a later ``frame[mask]`` would re-align by the index)
    from dask.dataframe import from_delayed

    pairs = zip(tagged.to_delayed(optimize_graph=False), results.to_delayed(optimize_graph=False))
    pieces = [dask.delayed(_attach, pure=True)(t, r, names) for t, r in pairs]
    return from_delayed(pieces, meta=meta, divisions=frame.divisions if frame.known_divisions else None,
                        verify_meta=False)


def _map(frame: dd.DataFrame, jobs: list[_Job], training: bool, dask: ModuleType) -> dd.DataFrame:
    meta = frame._meta
    host_meta = _backend.to_host(meta) if _backend.is_gpu_object(meta) else meta
    new = {}
    for name, op, params, cols, state in jobs:
        new[name] = pd.Series([], dtype=frame_operator(op).dtype(cols, host_meta), name=name)
    out_meta = host_meta.assign(**new)
    if host_meta is not meta:
        out_meta = _backend.to_backend(out_meta, _backend.backend_of(meta))
    shared = dask.delayed(jobs, pure=True)  # one graph key: the states travel once, not once per partition
    return frame.map_partitions(_apply_partition, shared, training, meta=out_meta)


def _column_of(c: Call) -> str:
    return _history_column(c) if c.op in HISTORY_OPS else f"{_TMP}f_{state_id(c)}_{hashlib.sha1(repr(c.key).encode()).hexdigest()[:8]}"


# -- extract --------------------------------------------------------------------------------------------
def has_frame_ops(features: FeatureMap) -> bool:
    """Whether any feature uses a fitted, history or row operator.

    Example:
        >>> from fbrapids import ops
        >>> has_frame_ops({"h": ops.hour("ts")}), has_frame_ops({"s": ops.time_since("u", "ts")})
        (False, True)
    """
    return any(frame_calls(as_expr(e)) for e in features.values())


def extract_frame(frame: FrameLike, features: FeatureMap | Fitted, training: bool = False,
                  allow_unfitted: bool = False, fused: bool = True, progress: bool | None = False) -> FrameLike:
    """Add the features to ``frame``: fitted and history operators at frame level, the rest
    through the meta-kernels.

    Args:
        features: a :class:`Fitted` (states applied, never refitted) or name -> expression.
        training: ``frame`` is the one the states were fitted on: target encodings use
            their out-of-fold statistics.
        allow_unfitted: fit fitted operators that have no state on ``frame`` itself
            (explicit opt-in; never the default).

    Raises:
        NotFittedError: a fitted operator without a state (names the feature and says how to fit).
        FeatureError: ``frame`` is the very frame the target encodings were fitted on and
            ``training`` is False (its own labels would leak into its encodings).

    Example:
        >>> import pandas as pd
        >>> from fbrapids import ops
        >>> log = pd.DataFrame({"u": [1, 1, 1], "ts": [5, 9, 9]})
        >>> extract_frame(log, {"since": ops.time_since("u", "ts")})["since"].tolist()
        [<NA>, 4, 4]
    """
    if isinstance(features, Fitted):
        fitted = features
        source = fitted._source() if fitted._source is not None else None
        if source is not None and source is frame and not training and any(
                frame_operator(c.op).uses_labels for e in fitted.features.values() for c in frame_calls(e)):
            raise FeatureError("this is the frame the target encodings were fitted on: extracting it with the frozen "
                               "statistics would put each row's own label in its encoding; pass training=True for "
                               "out-of-fold encodings")
        exprs, states = dict(fitted.features), fitted.states
    else:
        exprs = {name: as_expr(e) for name, e in features.items()}
        states = {}
        missing = [(n, c) for n, e in exprs.items() for c in frame_calls(e)
                   if c.op in FITTED_OPS and "state" not in c.param_dict()]
        if missing and not allow_unfitted:
            name, c = missing[0]
            raise NotFittedError(f"feature {name!r}: {c.op}({c.args[0]}, ...) has no fitted state; fit it on the "
                                 "training frame first: fitted = train.fbx.fit(**features), then "
                                 "frame.fbx.extract(fitted) (or pass allow_unfitted=True to fit on this very frame)")
        if missing:
            log.warning("fitting %d operator(s) on the frame being extracted (allow_unfitted=True)", len(missing))
            fitted = fit(frame, {n: e for n, e in exprs.items()}, fused=fused)
            states, training = fitted.states, True
    carried = {state_id(c): state_from_param(c.param_dict()["state"]) for e in exprs.values()
               for c in frame_calls(e) if c.op in FITTED_OPS and "state" in c.param_dict()}
    states = {**states, **carried}
    for name, e in exprs.items():
        for c in frame_calls(e):
            if c.op in FITTED_OPS and state_id(c) not in states:
                raise NotFittedError(f"feature {name!r}: {c.op}({c.args[0]}, ...) is not in the fitted state; "
                                     "refit with it: fitted = train.fbx.fit(**features)")
    made: list[str] = []
    while True:
        pending = [c for e in exprs.values() for c in frame_calls(e)]
        leaves = []
        for c in pending:
            if not any(frame_calls(a) for a in c.args) and c not in leaves:
                leaves.append(c)
        if not leaves:
            break
        frame = _apply_frame_ops(frame, leaves, states, training, fused)
        done = {c: _column_of(c) for c in leaves}
        made += list(done.values())
        exprs = {n: _substitute(e, done) for n, e in exprs.items()}
    direct = {n: e.name for n, e in exprs.items() if isinstance(e, Col) and e.name in made}
    rest = {n: e for n, e in exprs.items() if n not in direct}
    if direct:
        frame = copy_columns(frame, direct)
    if rest:
        frame = run_features(frame, rest, fused, progress)
    names = list(exprs)
    return frame[[c for c in frame.columns if c not in names and c not in made] + names]
