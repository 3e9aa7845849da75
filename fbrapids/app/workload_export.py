"""From your own log to a served model: a workload's model as a serving export.

:func:`workload_spec` is the :class:`~fbrapids.serving.spec.ServingSpec` of a declared
:class:`~fbrapids.workloads.Workload`: the model inputs it trains ``model`` on, each
feature's expression as training extracts it (a fitted feature with the state fitted on
the training rows, frozen), and the raw columns they read, typed as the views read them:

* the **item columns** are those the features read from the workload's ``item_view``
  (the joined view of the candidate items, e.g. the ads) and its join key, the
  ``item_key``; the **request columns** are every other column they read: the log's, and
  those of the views joined on the request's side (a user profile).  A served request
  carries what the joins added in training: the service has no view to join.  Without an
  ``item_view`` every column is a request column and a call scores each request alone
  (its items are empty objects);
* a feature reading only request columns is a request feature, only item columns an item
  feature, both a pair feature;
* the time column is served in the form the log writes it (``time_form``): a served row's
  ``hour`` is ``14102100``, read as UTC epoch seconds by the code that read the log;
* a null is filled with the value training's cleaning gave it (the views' ``clean``
  fills, the joins' ``fill``).

So a raw log row (the log's columns and the joined views') is a served call, and its score
is the offline prediction of that row (``fbrapids demo --workload F --export DIR``, then
``fbrapids serve DIR``).  A history feature (``ops.history``, ``time_since`` ...) reads the
log itself and cannot be computed from one request: a workload whose model reads one is
refused (an :class:`~fbrapids.errors.ExportError` naming it), before training.

Example:
    >>> import tempfile, pandas as pd
    >>> from fbrapids import ops
    >>> from fbrapids.workloads import Join, Split, View, Workload
    >>> d = tempfile.mkdtemp()
    >>> pd.DataFrame({"click": [0, 1] * 4, "u": [1, 2] * 4, "ad": [5, 6, 7, 8] * 2}).to_csv(f"{d}/log.csv", index=False)
    >>> pd.DataFrame({"ad": [5, 6, 7, 8], "cat": ["a", "b", "a", "c"]}).to_csv(f"{d}/ads.csv", index=False)
    >>> w = Workload([View("log", "log.csv"), View("ads", "ads.csv")], "click", Split("fraction", fraction=0.5),
    ...              joins=[Join("ads", "ad")], features={"c": ops.hash_bucket("cat", 64),
    ...              "uc": ops.cross("u", "cat", buckets=64)}, sparse=["u", "c", "uc"], item_view="ads", root=d)
    >>> spec = workload_spec(w)
    >>> spec.request_columns, spec.item_columns, spec.item_key, sorted(spec.pair_features)
    (['u'], ['ad', 'cat'], 'ad', ['uc'])
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from fbrapids.errors import CheckpointMismatchError, ExportError
from fbrapids.kernels import as_expr, columns_of
from fbrapids.serving.spec import ServingSpec
from fbrapids.workloads import Workload

if TYPE_CHECKING:
    import numpy as np
    from pandas.api.extensions import ExtensionDtype

    from fbrapids.features.fitted import Fitted
    from fbrapids.kernels import Expr
    from fbrapids.workloads.split_check import SplitCheck

#: a cleaning fill: the value a null becomes
FillValue: TypeAlias = str | float | None


def check_exportable(w: Workload, model: str = "dlrm") -> None:
    """An :class:`~fbrapids.errors.ExportError` naming the model inputs a served request
    cannot compute (history features: they read the log), or a model no scorer serves
    (one not ``exportable``: ``logreg``), before any work."""
    from fbrapids.trainers.models import model_for
    from fbrapids.workloads.frames import split_fitted

    if not model_for(model).exportable:  # (the logistic regression, the screening model: no scorer serves it yet)
        raise ExportError(f"serving has no scorer for the model {model!r}; export another model")
    dense, sparse, sequences, features = w.model_inputs(model)
    used = {n: e for n, e in features.items() if n in dense or n in sparse}
    history = sorted(n for n in split_fitted(used)[1] if n not in sequences)
    if history:
        raise ExportError(f"{w.where}: model inputs {history} are history features (they read the log, not one "
                          "request); an export cannot serve them: leave them out of the model to export it")


def _schema_type(dtype: np.dtype | ExtensionDtype, column: str, where: str) -> str:
    """A served column's type (:data:`fbrapids.serving.spec.TYPES`) for a view's dtype."""
    import pandas as pd

    from fbrapids.views.inputs import is_datetime

    if is_datetime(dtype):
        return "str"  # ISO 8601 text, read by the time form
    text = str(dtype)
    kind = getattr(getattr(dtype, "numpy_dtype", dtype), "kind", None)
    if kind == "b" or pd.api.types.is_bool_dtype(dtype):
        raise ExportError(f"{where}: column {column!r} is {text}; a served column is int64, uint64, float64, str or "
                          "a list of int64 (cast it to an int in the workload's features)")
    if kind == "u" and text.lower().startswith("uint64"):
        return "uint64"
    if kind in ("i", "u"):
        return "int64"
    if kind == "f":
        return "float64"
    if text.startswith("list") or "list<" in text:
        return "list<int64>"
    return "str"


def _raw_time_type(w: Workload, check: SplitCheck) -> str | None:
    """The served type of the time column as the log writes it (before it is read as
    epoch seconds)."""
    from fbrapids.views.read import read_view

    if w.time is None or check.time_form is None:
        return None
    opts = {k: v for k, v in w.log.options.items() if k != "columns"}
    meta = read_view(check.files, backend="cpu", **opts)._meta
    return _schema_type(meta[w.time].dtype, w.time, w.where)


def _fills(w: Workload) -> dict[str, FillValue]:
    """Training's cleaning fills: each view's ``clean`` fill, then each join's ``fill``."""
    out: dict[str, FillValue] = {}
    for given in [*(v.clean.get("fill") or {} for v in w.views), *(j.fill for j in w.joins)]:
        for column, value in given.items():
            if value is not None and not isinstance(value, (str, int, float)):
                raise ExportError(f"{w.where}: the fill of column {column!r} is {value!r}; serving fills a null "
                                  "with a string or a number")
            out[column] = value
    return out


def workload_spec(w: Workload, model: str = "dlrm", fitted: Fitted | None = None,
                  check: SplitCheck | None = None) -> ServingSpec:
    """The serving spec of ``w``'s ``model`` (module docstring); ``fitted``: the run's fitted
    states (:class:`~fbrapids.features.fitted.Fitted`, saved under its work dir's ``fitted``)
    when the model reads fitted features; ``check``: the split's check (made when not given:
    it reads the log's label and time columns)."""
    from fbrapids.workloads import frames
    from fbrapids.workloads.split_check import check_split

    check_exportable(w, model)
    dense, sparse, sequences, features = w.model_inputs(model)
    used = {n: as_expr(e) for n, e in features.items() if (n in dense or n in sparse) and n not in sequences}
    _, _, to_fit = frames.split_fitted(used)
    if to_fit:
        if fitted is None:
            raise ExportError(f"{w.where}: model inputs {sorted(to_fit)} are fitted features: export the run's "
                              "checkpoint with its fitted states (the work dir's fitted/ folder)")
        frozen = fitted.frozen()
        used.update({n: frozen[n] for n in to_fit})
    check = check if check is not None else check_split(w)
    joined = frames.feature_frame(w, features={}, check=check)[1]["joined"]._meta
    read = sorted({c for e in used.values() for c in columns_of(e)}
                  | {c for c in [*dense, *sparse] if c not in used and c not in sequences})
    missing = [c for c in read if c not in joined.columns]
    if missing:
        raise ExportError(f"{w.where}: model inputs read {missing}, which no view holds")
    item_cols: list[str] = []
    key = None
    if w.item_view is not None:
        join = next(j for j in w.joins if j.view == w.item_view)
        key = join.on if isinstance(join.on, str) else join.on[0]
        opts = w.view(w.item_view).options
        from fbrapids.views.read import read_view

        view_cols = list(opts.get("columns") or read_view([w.resolve(p) for p in w.view(w.item_view).paths],
                                                          backend="cpu", **opts)._meta.columns)
        item_cols = [key] + [c for c in read if c in view_cols and c != key]
    request_cols = [c for c in read if c not in item_cols]
    schema = {c: _schema_type(joined[c].dtype, c, w.where) for c in [*request_cols, *item_cols]}
    time = {}
    if w.time is not None and w.time in schema and check.time_form is not None:
        schema[w.time] = _raw_time_type(w, check) or schema[w.time]
        time = {w.time: check.time_form.name}
    for s in sequences:  # DIN's behaviour sequence: the request carries it (a list of ids, oldest first)
        schema[s] = "list<int64>"
        request_cols.append(s)
    sides: dict[str, dict[str, Expr]] = {"request": {}, "item": {}, "pair": {}}
    for n, e in used.items():
        cols = columns_of(e)
        side = "request" if cols <= set(request_cols) else "item" if cols <= set(item_cols) else "pair"
        sides[side][n] = e
    fill = {c: (float(v) if schema[c] == "float64" else int(v) if schema[c] in ("int64", "uint64") else v)
            for c, v in _fills(w).items() if c in schema and v is not None}
    return ServingSpec(schema=schema, request_columns=request_cols, item_columns=item_cols, item_key=key,
                       request_features=sides["request"], item_features=sides["item"], pair_features=sides["pair"],
                       dense=list(dense), sparse=list(sparse), fill=fill, time=time)


def fitted_beside(checkpoint: str | os.PathLike) -> Path | None:
    """The ``fitted`` folder of the run whose checkpoint this is (``WORK/checkpoints[/...]``
    -> ``WORK/fitted``), or None."""
    p = Path(checkpoint).resolve()
    for parent in (p, *p.parents[:2]):
        if parent.name == "checkpoints" and (parent.parent / "fitted").is_dir():
            return parent.parent / "fitted"
    return None


def export_workload_checkpoint(checkpoint: str | os.PathLike, out: str | os.PathLike, w: Workload,
                               model: str = "dlrm", embedding_dim: int = 16, seed: int = 0,
                               signing_key: bytes | None = None) -> Path:
    """Export the model a run of ``w`` left in ``checkpoint`` (a checkpoint directory, or a
    root with a ``latest`` pointer, e.g. ``WORK_DIR/checkpoints``) to ``out``, its spec
    :func:`workload_spec` (the fitted states from the run's ``fitted`` folder beside the
    checkpoints); returns ``out``."""
    from fbrapids.app.pipeline import model_arguments
    from fbrapids.serving.export import export_model
    from fbrapids.trainers.checkpoint.model_state import load_checkpoint
    from fbrapids.trainers.sparse import StoreConfig

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} is not empty (an export is written into a new or empty directory)")
    fitted = None
    folder = fitted_beside(checkpoint)
    if folder is not None:
        from fbrapids.features.fitted import Fitted

        fitted = Fitted.load(folder)
    spec = workload_spec(w, model, fitted=fitted)
    dense, sparse, sequences, _ = w.model_inputs(model)
    cls, kwargs = model_arguments(model, len(dense), sparse, StoreConfig(cache_rows=1 << 16, seed=seed),
                                  embedding_dim, sequences=sequences or None)
    net = cls(**kwargs)
    try:
        load_checkpoint(net, None, checkpoint)
    except (RuntimeError, CheckpointMismatchError, KeyError) as exc:  # another model, inputs or embedding size
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ExportError(f"{checkpoint} does not hold {w.where}'s {model} model with embedding_dim={embedding_dim} "
                          f"(pass the run's --model / --embedding-dim): {first}") from None
    return export_model(out, net.eval(), spec, kwargs, signing_key=signing_key)
