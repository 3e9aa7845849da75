"""Export a trained model and its feature plan for inference, and load them back.

An export directory holds data only; loading it runs no code from it:

* ``serving.json``: the format, the model's registry name (``"WideAndDeep"``; see
  :mod:`fbrapids.trainers.models.registry`, where a custom model is registered in code)
  and its constructor arguments (a :class:`~fbrapids.trainers.sparse.StoreConfig` is
  written as ``{"StoreConfig": {...}}``; an :class:`~fbrapids.ams.ImageEmbedder` (DICM's
  images) as its sub-model sizes and its vector store, written to ``images/`` in the
  export; the sub-model's weights are in the checkpoint);
* ``spec.json``: the :class:`~fbrapids.serving.spec.ServingSpec` (feature expressions,
  schema, model inputs) as JSON data (:mod:`fbrapids.serving.spec_json`), and
  ``plan.txt``, its human-readable explanation;
* ``model/``: a ``fit`` checkpoint (dense weights, read with ``torch.load(weights_only=True)``,
  and every embedding table);
* ``MANIFEST.json``: the sha256 digest of every other file (:mod:`fbrapids.manifest`).

Loading verifies the manifest (a changed, missing or added file is a
:class:`~fbrapids.errors.ManifestError`), builds the registered model class from its
arguments and restores the checkpoint.  A path read from the export (the checkpoint's
``latest`` pointer, the image store) must resolve inside it, and an export of format 1
(a pickled spec) is refused: each is an :class:`~fbrapids.errors.UnsafeFileError`.
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
import json
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
import torch

from fbrapids.errors import ExportError, NotAnExportError, UnsafeFileError
from fbrapids.features import FeatureSet, needs_fit
from fbrapids.manifest import resolve_inside, verify_manifest, write_manifest
from fbrapids.serving.spec import ServingSpec
from fbrapids.serving.spec_json import spec_from_json, spec_to_json
from fbrapids.trainers.fit import load_checkpoint, save_checkpoint
from fbrapids.trainers.models import model_class, model_name
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.sparse import StoreConfig

FORMAT = 2
IMAGES = "images"


def _encode(v: Any, d: Path) -> Any:
    from fbrapids.ams.embedding import ImageEmbedder

    if isinstance(v, StoreConfig):
        return {"StoreConfig": v.to_dict()}
    if isinstance(v, ImageEmbedder):
        store = v.store  # written into the export (paths read at load time stay inside it)
        if store.path is None or not Path(store.path).resolve().is_relative_to(d.resolve()):
            store = store.save(d / IMAGES)
        return {"ImageEmbedder": {"vectors": Path(store.path).resolve().relative_to(d.resolve()).as_posix(),
                                  "sizes": list(v.model.sizes),
                                  "final_prelu": isinstance(v.model.net[-1], torch.nn.PReLU), "dedup": v.dedup,
                                  "default": store.default.tolist()}}
    if isinstance(v, Mapping):
        return {str(k): _encode(x, d) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_encode(x, d) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise ExportError(f"export_model: model argument of type {type(v).__name__} cannot be written as JSON")


def _decode(v: Any, keep_ssd: bool, d: Path) -> Any:
    if isinstance(v, dict) and set(v) == {"StoreConfig"}:
        try:
            cfg = StoreConfig(**v["StoreConfig"])
        except TypeError as exc:
            raise UnsafeFileError(f"{d / 'serving.json'}: bad StoreConfig ({exc})") from None
        return cfg if keep_ssd else cfg.with_(host_rows=None, ssd_dir=None)
    if isinstance(v, dict) and set(v) == {"ImageEmbedder"}:
        from fbrapids.ams import ImageEmbedder, ImageEmbeddingMLP, ImageVectorStore

        e = v["ImageEmbedder"]
        vectors = resolve_inside(d, e["vectors"], what=f"{d / 'serving.json'}: image vector store")
        store = ImageVectorStore.open(vectors, default=np.asarray(e["default"], dtype=np.float32))
        return ImageEmbedder(store, ImageEmbeddingMLP(e["sizes"], final_prelu=e["final_prelu"]), dedup=e["dedup"])
    if isinstance(v, dict):
        return {k: _decode(x, keep_ssd, d) for k, x in v.items()}
    if isinstance(v, list):
        return [_decode(x, keep_ssd, d) for x in v]
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
    spec_data = spec_to_json(spec)
    d = Path(path)
    if d.exists() and any(d.iterdir()):
        raise ExportError(f"export_model: {d} is not empty (an export is written into a new or empty directory)")
    d.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "model": model_name(type(model)), "model_kwargs": _encode(dict(model_kwargs), d)}
    save_checkpoint(model, None, d / "model", step=0, keep=1)
    (d / "spec.json").write_text(json.dumps(spec_data, indent=1))
    lines = [f"request features: {', '.join(spec.request_features) or '-'}",
             f"item features (cached by {spec.item_key}): {', '.join(spec.item_features) or '-'}",
             f"pair features: {', '.join(spec.pair_features) or '-'}",
             f"model dense inputs: {spec.dense}", f"model sparse inputs: {spec.sparse}"]
    lines += [f"  {k} = {e}" for k, e in spec.features.items()]
    if sample is not None and spec.features:
        lines += ["", sample.fbx.explain(**spec.features)]
    (d / "plan.txt").write_text("\n".join(lines) + "\n")
    (d / "serving.json").write_text(json.dumps(meta, indent=1))
    write_manifest(d)
    return d


def _fitted(spec: ServingSpec, sample: pd.DataFrame | None) -> ServingSpec:
    """``spec`` with its ``categorify`` features fitted over ``sample`` (vocabularies frozen)."""
    sides = ("request_features", "item_features", "pair_features")
    pending = [f for side in sides for f, e in getattr(spec, side).items() if needs_fit(e)]
    if not pending:
        return spec
    if sample is None:
        raise ExportError(f"export_model: features {pending} use categorify; pass sample= (the training frame) "
                         "so that their states are fitted once and served as data")
    out = copy.copy(spec)
    for side in sides:
        setattr(out, side, FeatureSet(**getattr(spec, side)).fit(sample).frozen())  # states carried as data
    return out


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise UnsafeFileError(f"{path}: not JSON ({exc})") from None


def load_model(path: str | os.PathLike, keep_ssd: bool = False, verify: bool = True) -> tuple[CTRModel, ServingSpec]:
    """The model (in eval mode) and spec of an export directory (module docstring).

    ``verify``: check every file against ``MANIFEST.json`` first (the default).
    """
    d = Path(path)
    if not (d / "serving.json").is_file():
        hint = (": it is a fit checkpoint; export it first with `fbrapids export CHECKPOINT DIR`"
                if (d / "latest").is_file() or (d / "meta.json").is_file() or (d / "checkpoints").is_dir() else "")
        raise NotAnExportError(f"{d} is not a serving export (no serving.json){hint}")
    meta = _read_json(d / "serving.json")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        fmt = meta.get("format") if isinstance(meta, dict) else None
        why = " (a pickled spec: loading it could run code; export the model again)" if fmt == 1 else ""
        raise UnsafeFileError(f"{d / 'serving.json'}: export format {fmt}, this version reads {FORMAT}{why}")
    if verify:
        verify_manifest(d)
    if "model" not in meta or not isinstance(meta.get("model_kwargs"), dict):
        raise UnsafeFileError(f"{d / 'serving.json'}: needs 'model' (a registered model name) and 'model_kwargs'")
    cls = model_class(meta["model"])
    kwargs = _decode(meta["model_kwargs"], keep_ssd, d)
    try:
        model = cls(**kwargs)
    except TypeError as exc:
        raise UnsafeFileError(f"{d / 'serving.json'}: model_kwargs do not fit {meta['model']} ({exc})") from None
    load_checkpoint(model, None, resolve_inside(d, "model", what="checkpoint directory"))
    spec = spec_from_json(_read_json(d / "spec.json"), source=str(d / "spec.json"))
    return model.eval(), spec


def load_scorer(path: str | os.PathLike, **scorer_options: Any):
    """A :class:`~fbrapids.serving.scorer.Scorer` over an export directory."""
    from fbrapids.serving.scorer import Scorer

    model, spec = load_model(path)
    return Scorer(model, spec, **scorer_options)


def export_checkpoint(checkpoint: str | os.PathLike, path: str | os.PathLike, model: CTRModel, spec: ServingSpec,
                      model_kwargs: Mapping[str, Any], sample: pd.DataFrame | None = None) -> Path:
    """Restore ``checkpoint`` (a ``fit`` checkpoint directory, or a root with ``latest``) into
    ``model`` (built as ``type(model)(**model_kwargs)``) and export it to ``path``."""
    load_checkpoint(model, None, checkpoint)
    return export_model(path, model.eval(), spec, model_kwargs, sample=sample)
