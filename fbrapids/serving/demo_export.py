"""From the main job to the service: the demo's model as a serving export.

``fbrapids demo`` trains on the joined workload (impressions x users x ads + basic
features) and leaves a checkpoint.  :func:`demo_spec` is the same feature plan split for
serving: a request carries the impression context, the user and the basic features; an
item is an ad; features reading both (``user_ad_h``, ``cat_city_h``, ``hour_cat_h``,
``qxt_cross_h``) are pair features.  :func:`export_demo_checkpoint` rebuilds the demo's
model, restores the checkpoint and exports it (``fbrapids export CHECKPOINT DIR`` or
``fbrapids demo --export DIR``).

Example:
    >>> spec = demo_spec()
    >>> spec.side_of("user_id_h") if "user_id_h" in spec.features else spec.side_of("user_id")
    'request'
    >>> sorted(spec.pair_features)
    ['cat_city_h', 'hour_cat_h', 'qxt_cross_h', 'user_ad_h']
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fbrapids import workload
from fbrapids.errors import ExportError
from fbrapids.kernels import columns_of
from fbrapids.serving.export import export_model
from fbrapids.serving.spec import ServingSpec
from fbrapids.trainers.fit import load_checkpoint
from fbrapids.trainers.sparse import StoreConfig

REQUEST_SCHEMA = {"user_id": "int64", "ts": "int64", "slot": "int64", "query": "str", "os": "str",
                  "geo_city": "str", "age": "int64", "gender": "str", "city": "str", "interests": "str",
                  **{f"d{j}": "float64" for j in range(10)}, **{f"b{j}": "int64" for j in range(5)}}
ITEM_SCHEMA = {"ad_id": "int64", "advertiser_id": "int64", "category": "int64", "price": "float64", "title": "str"}


def demo_spec(dense: list[str] | None = None, sparse: list[str] | None = None) -> ServingSpec:
    """The demo's feature plan (:func:`fbrapids.workload.features`) split by side for the
    model inputs ``dense`` / ``sparse`` (default: the pipeline's ``DENSE`` / ``SPARSE``)."""
    from fbrapids.pipeline import DENSE, SPARSE

    dense, sparse = list(dense or DENSE), list(sparse or SPARSE)
    used = set(dense) | set(sparse)
    sides: dict[str, dict[str, Any]] = {"request": {}, "item": {}, "pair": {}}
    for name, e in workload.features().items():
        if name not in used:
            continue
        cols = columns_of(e)
        side = "request" if cols <= set(REQUEST_SCHEMA) else "item" if cols <= set(ITEM_SCHEMA) else "pair"
        sides[side][name] = e
    return ServingSpec(schema={**REQUEST_SCHEMA, **ITEM_SCHEMA}, request_columns=list(REQUEST_SCHEMA),
                       item_columns=list(ITEM_SCHEMA), item_key="ad_id", request_features=sides["request"],
                       item_features=sides["item"], pair_features=sides["pair"], dense=dense, sparse=sparse)


def export_demo_checkpoint(checkpoint: str | os.PathLike, out: str | os.PathLike, model: str = "dlrm",
                           embedding_dim: int = 16, seed: int = 0) -> Path:
    """Export the demo model of ``checkpoint`` (a checkpoint directory, or a root with a
    ``latest`` pointer, e.g. ``WORK_DIR/checkpoints``) to ``out``; returns ``out``."""
    from fbrapids.pipeline import DENSE, SPARSE, model_arguments

    spec = demo_spec()
    cls, kwargs = model_arguments(model, len(DENSE), SPARSE, StoreConfig(cache_rows=1 << 16, seed=seed),
                                  embedding_dim)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} is not empty (an export is written into a new or empty directory)")
    net = cls(**kwargs)
    try:
        load_checkpoint(net, None, checkpoint)
    except RuntimeError as exc:  # torch's state-dict mismatch: another model or embedding size
        first = str(exc).strip().splitlines()[0][:200]
        raise ExportError(f"{checkpoint} does not hold the demo's {model} model with embedding_dim={embedding_dim} "
                          f"(pass the demo's --model / --embedding-dim): {first}") from None
    return export_model(out, net.eval(), spec, kwargs)
