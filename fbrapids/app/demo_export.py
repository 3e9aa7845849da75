"""From the main job to the service: the demo's model as a serving export.

``fbrapids demo`` trains on the joined workload (impressions x users x ads + basic
features) and leaves a checkpoint.  :func:`demo_spec` is the same feature plan split for
serving: a request carries the impression context, the user and the basic features; an
item is an ad; a null is filled as training's cleaning filled it (:func:`training_fills`); features reading both (``user_ad_h``, ``cat_city_h``, ``hour_cat_h``,
``qxt_cross_h``, ``qt_first_eq``) are pair features.  :func:`export_demo_checkpoint` rebuilds the demo's
model, restores the checkpoint and exports it (``fbrapids export CHECKPOINT DIR`` or
``fbrapids demo --export DIR``), for each of the demo's models.

DIN (``--model din``) attends over the user's behaviour sequence ``hist_cat``: in training,
the user's last 50 clicked ad categories strictly before the impression, oldest first
(:func:`fbrapids.app.pipeline.din_history`).  A served request carries that list itself, as the
request column ``hist_cat`` (a JSON array of category ids; ``[]`` or null for a user with no
clicks): the service has no log to rebuild it from.

Example:
    >>> spec = demo_spec()
    >>> spec.side_of("user_id_h") if "user_id_h" in spec.features else spec.side_of("user_id")
    'request'
    >>> sorted(spec.pair_features)
    ['cat_city_h', 'hour_cat_h', 'qt_first_eq', 'qxt_cross_h', 'user_ad_h']
    >>> din = demo_spec(model="din")
    >>> din.schema["hist_cat"], din.side_of("hist_cat"), din.sparse[-1]
    ('list<int64>', 'request', 'hist_cat')
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from fbrapids.datasets.synthetic import features as demo_features, views as workload
from fbrapids.errors import CheckpointMismatchError, ExportError
from fbrapids.kernels import columns_of
from fbrapids.serving.export import export_model
from fbrapids.serving.spec import ServingSpec
from fbrapids.trainers.checkpoint.model_state import load_checkpoint
from fbrapids.trainers.sparse import StoreConfig

if TYPE_CHECKING:
    from fbrapids.kernels import Expr

REQUEST_SCHEMA = {"user_id": "int64", "ts": "int64", "slot": "int64", "query": "str", "os": "str",
                  "geo_city": "str", "age": "int64", "gender": "str", "city": "str", "interests": "str",
                  **{f"d{j}": "float64" for j in range(10)}, **{f"b{j}": "int64" for j in range(5)}}
ITEM_SCHEMA = {"ad_id": "int64", "advertiser_id": "int64", "category": "int64", "price": "float64", "title": "str"}


def demo_inputs(model: str = "dlrm") -> tuple[list[str], list[str], dict[str, str] | None]:
    """The model inputs ``(dense, sparse, sequences)`` the demo trains ``model`` on: the
    pipeline's ``DENSE`` / ``SPARSE``, and for a model reading sequences (``din``) its
    behaviour sequence too.

    Example:
        >>> demo_inputs("din")[2]
        {'hist_cat': 'category'}
    """
    from fbrapids.app.pipeline import DENSE, DIN_SEQUENCE, DIN_TARGET, MODELS, SPARSE
    from fbrapids.trainers.models import model_for

    if model not in MODELS:
        raise ExportError(f"unknown demo model {model!r}; expected one of {', '.join(MODELS)}")
    if model_for(model).reads_sequences:  # (DIN) the demo's behaviour sequence
        return list(DENSE), [*SPARSE, DIN_SEQUENCE], {DIN_SEQUENCE: DIN_TARGET}
    return list(DENSE), list(SPARSE), None


def demo_spec(dense: list[str] | None = None, sparse: list[str] | None = None, model: str = "dlrm") -> ServingSpec:
    """The demo's feature plan (:func:`fbrapids.datasets.synthetic.views.features`) split by side for the
    model inputs ``dense`` / ``sparse`` (default: those the demo trains ``model`` on,
    :func:`demo_inputs`); a behaviour sequence of ``din`` is a ``list<int64>`` request column."""
    d_dense, d_sparse, sequences = demo_inputs(model)
    dense, sparse = list(dense or d_dense), list(sparse or d_sparse)
    request_schema = {**REQUEST_SCHEMA, **{seq: "list<int64>" for seq in sequences or {} if seq in sparse}}
    used = set(dense) | set(sparse)
    sides: dict[str, dict[str, Expr]] = {"request": {}, "item": {}, "pair": {}}
    for name, e in demo_features().items():  # the workload's and the trial-found ones (qt_first_eq)
        if name not in used:
            continue
        cols = columns_of(e)
        side = "request" if cols <= set(request_schema) else "item" if cols <= set(ITEM_SCHEMA) else "pair"
        sides[side][name] = e
    schema = {**request_schema, **ITEM_SCHEMA}
    return ServingSpec(schema=schema, request_columns=list(request_schema),
                       item_columns=list(ITEM_SCHEMA), item_key="ad_id", request_features=sides["request"],
                       item_features=sides["item"], pair_features=sides["pair"], dense=dense, sparse=sparse,
                       fill=training_fills(schema))


def training_fills(schema: dict[str, str]) -> dict[str, str | float]:
    """The demo's cleaning fills (:mod:`fbrapids.datasets.synthetic.views`: impressions, users, ads, join
    misses) of the columns in ``schema``: what training gave a null, served the same way.

    Example:
        >>> fills = training_fills({"price": "float64", "gender": "str", "os": "str", "city": "str"})
        >>> fills == {"price": 0.0, "gender": "unk", "os": "", "city": ""}
        True
    """
    fills = {**workload.IMPRESSION_CLEAN["fill"], **workload.JOIN_MISS_FILL, **workload.USER_FILL,
             **workload.AD_FILL}
    return {c: (float(v) if schema[c] == "float64" else v) for c, v in fills.items() if c in schema}


def export_demo_checkpoint(checkpoint: str | os.PathLike, out: str | os.PathLike, model: str = "dlrm",
                           embedding_dim: int = 16, seed: int = 0, signing_key: bytes | None = None) -> Path:
    """Export the demo model of ``checkpoint`` (a checkpoint directory, or a root with a
    ``latest`` pointer, e.g. ``WORK_DIR/checkpoints``) to ``out`` (its manifest signed with
    ``signing_key`` when given); returns ``out``."""
    from fbrapids.app.pipeline import model_arguments

    dense, sparse, sequences = demo_inputs(model)
    spec = demo_spec(model=model)
    cls, kwargs = model_arguments(model, len(dense), sparse, StoreConfig(cache_rows=1 << 16, seed=seed),
                                  embedding_dim, sequences=sequences)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} is not empty (an export is written into a new or empty directory)")
    net = cls(**kwargs)
    try:
        load_checkpoint(net, None, checkpoint)
    except (RuntimeError, CheckpointMismatchError) as exc:  # another model or embedding size
        first = str(exc).strip().splitlines()[0][:200]
        raise ExportError(f"{checkpoint} does not hold the demo's {model} model with embedding_dim={embedding_dim} "
                          f"(pass the demo's --model / --embedding-dim): {first}") from None
    return export_model(out, net.eval(), spec, kwargs, signing_key=signing_key)
