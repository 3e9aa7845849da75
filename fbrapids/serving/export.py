"""Export a trained model and its feature plan for inference, and load them back.

An export directory holds:

* ``serving.json``: the model class (``module:QualName``) and its constructor arguments
  (a :class:`~fbrapids.trainers.sparse.StoreConfig` is written as ``{"StoreConfig": {...}}``;
  an :class:`~fbrapids.ams.ImageEmbedder` (DICM's images) as its sub-model sizes and the
  path of its vector store: a disk store is referenced where it is, a RAM store is written
  to ``images/`` in the export; the sub-model's weights are in the checkpoint);
* ``spec.pkl``: the :class:`~fbrapids.serving.spec.ServingSpec` (feature expressions,
  schema, model inputs), pickled, and ``plan.txt``, its human-readable explanation;
* ``model/``: a ``fit`` checkpoint (dense weights and every embedding table).

Loading rebuilds the model from its class and arguments and restores the checkpoint.
Embedding tables are served from RAM: a ``StoreConfig`` with an SSD tier is loaded with
``host_rows=None, ssd_dir=None`` unless ``keep_ssd=True`` (the training run's files are
never opened by the server).

Example:
    >>> import tempfile
    >>> from fbrapids import ops
    >>> from fbrapids.trainers import WideAndDeep, StoreConfig
    >>> spec = ServingSpec(schema={"u": "int64", "a": "int64"}, request_columns=["u"], item_columns=["a"],
    ...                    item_key="a", request_features={"uh": ops.hash_bucket("u", 100)}, sparse=["uh", "a"])
    >>> kw = dict(dense_dim=0, sparse_features=["uh", "a"], embedding_dim=4, deep_mlp=[4],
    ...           store=StoreConfig(cache_rows=32))
    >>> d = tempfile.mkdtemp()
    >>> _ = export_model(d, WideAndDeep(**kw), spec, kw)
    >>> model, spec2 = load_model(d)
    >>> type(model).__name__, spec2.sparse
    ('WideAndDeep', ['uh', 'a'])
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import pickle
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
import torch

from fbrapids.kernels.expr import Call
from fbrapids.kernels.extract import FeatureSet
from fbrapids.serving.spec import ServingSpec
from fbrapids.trainers.fit import load_checkpoint, save_checkpoint
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.sparse import StoreConfig

FORMAT = 1


def _encode(v: Any, d: Path) -> Any:
    from fbrapids.ams.embedding import ImageEmbedder

    if isinstance(v, StoreConfig):
        return {"StoreConfig": v.to_dict()}
    if isinstance(v, ImageEmbedder):
        store = v.store
        if store.path is None:  # a RAM store: written into the export
            store = store.save(d / "images")
        return {"ImageEmbedder": {"vectors": str(Path(store.path).resolve()), "sizes": list(v.model.sizes),
                                  "final_prelu": isinstance(v.model.net[-1], torch.nn.PReLU), "dedup": v.dedup,
                                  "default": store.default.tolist()}}
    if isinstance(v, Mapping):
        return {str(k): _encode(x, d) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_encode(x, d) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise TypeError(f"export_model: model argument of type {type(v).__name__} cannot be written as JSON")


def _decode(v: Any, keep_ssd: bool) -> Any:
    if isinstance(v, dict) and set(v) == {"StoreConfig"}:
        cfg = StoreConfig(**v["StoreConfig"])
        return cfg if keep_ssd else cfg.with_(host_rows=None, ssd_dir=None)
    if isinstance(v, dict) and set(v) == {"ImageEmbedder"}:
        from fbrapids.ams import ImageEmbedder, ImageEmbeddingMLP, ImageVectorStore

        e = v["ImageEmbedder"]
        store = ImageVectorStore.open(e["vectors"], default=np.asarray(e["default"], dtype=np.float32))
        return ImageEmbedder(store, ImageEmbeddingMLP(e["sizes"], final_prelu=e["final_prelu"]), dedup=e["dedup"])
    if isinstance(v, dict):
        return {k: _decode(x, keep_ssd) for k, x in v.items()}
    if isinstance(v, list):
        return [_decode(x, keep_ssd) for x in v]
    return v


def export_model(path: str | os.PathLike, model: CTRModel, spec: ServingSpec, model_kwargs: Mapping[str, Any],
                 sample: pd.DataFrame | None = None) -> Path:
    """Write ``model`` (built as ``type(model)(**model_kwargs)``) and ``spec`` under ``path``.

    ``sample``: a training frame (raw columns).  ``categorify`` features are fitted over it
    here, once, so that serving looks values up in the training vocabulary (a spec with
    ``categorify`` and no ``sample`` is refused); ``plan.txt`` then also holds the explained
    meta-kernel plan of the features.  Returns the export directory.
    """
    spec = _fitted(spec, sample)
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    cls = type(model)
    meta = {"format": FORMAT, "model_class": f"{cls.__module__}:{cls.__qualname__}",
            "model_kwargs": _encode(dict(model_kwargs), d)}
    save_checkpoint(model, None, d / "model", step=0, keep=1)
    (d / "spec.pkl").write_bytes(pickle.dumps(spec))
    lines = [f"request features: {', '.join(spec.request_features) or '-'}",
             f"item features (cached by {spec.item_key}): {', '.join(spec.item_features) or '-'}",
             f"pair features: {', '.join(spec.pair_features) or '-'}",
             f"model dense inputs: {spec.dense}", f"model sparse inputs: {spec.sparse}"]
    lines += [f"  {k} = {e}" for k, e in spec.features.items()]
    if sample is not None and spec.features:
        lines += ["", sample.fbx.explain(**spec.features)]
    (d / "plan.txt").write_text("\n".join(lines) + "\n")
    (d / "serving.json").write_text(json.dumps(meta, indent=1))
    return d


def _uses_categorify(e: Any) -> bool:
    return isinstance(e, Call) and (e.op == "categorify" or any(_uses_categorify(a) for a in e.args))


def _fitted(spec: ServingSpec, sample: pd.DataFrame | None) -> ServingSpec:
    """``spec`` with its ``categorify`` features fitted over ``sample`` (vocabularies frozen)."""
    sides = ("request_features", "item_features", "pair_features")
    pending = [f for side in sides for f, e in getattr(spec, side).items() if _uses_categorify(e)]
    if not pending:
        return spec
    if sample is None:
        raise ValueError(f"export_model: features {pending} use categorify; pass sample= (the training frame) "
                         "so that their vocabularies are fitted once and served as lookups")
    out = copy.copy(spec)
    for side in sides:
        setattr(out, side, FeatureSet(**getattr(spec, side)).fit(sample).features)
    return out


def load_model(path: str | os.PathLike, keep_ssd: bool = False) -> tuple[CTRModel, ServingSpec]:
    """The model (in eval mode) and spec of an export directory."""
    d = Path(path)
    if not (d / "serving.json").exists():
        raise FileNotFoundError(f"{d} is not a serving export (no serving.json)")
    meta = json.loads((d / "serving.json").read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{d / 'serving.json'}: export format {meta.get('format')}, this version reads {FORMAT}")
    mod, _, qual = meta["model_class"].partition(":")
    cls: Any = importlib.import_module(mod)
    for part in qual.split("."):
        cls = getattr(cls, part)
    model = cls(**_decode(meta["model_kwargs"], keep_ssd))
    load_checkpoint(model, None, d / "model")
    spec = pickle.loads((d / "spec.pkl").read_bytes())
    return model.eval(), spec


def load_scorer(path: str | os.PathLike, **scorer_options: Any):
    """A :class:`~fbrapids.serving.scorer.Scorer` over an export directory."""
    from fbrapids.serving.scorer import Scorer

    model, spec = load_model(path)
    return Scorer(model, spec, **scorer_options)
