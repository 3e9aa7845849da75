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
* ``MANIFEST.json``: the sha256 digest of every other file (:mod:`fbrapids.files.manifest`).

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
import io
import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Unpack

import numpy as np
import pandas as pd
import torch

from fbrapids.errors import ExportError, ManifestError, NotAnExportError, UnsafeFileError
from fbrapids.features import FeatureSet, explain, needs_fit
from fbrapids.files.manifest import (
    checked_manifest,
    open_regular,
    read_bounded,
    read_manifest,
    read_verified,
    resolve_inside,
    write_manifest,
)
from fbrapids.serving.spec import ServingSpec
from fbrapids.serving.spec_json import spec_from_json, spec_to_json
from fbrapids.trainers.checkpoint.model_state import load_checkpoint, nonfinite_weights, save_checkpoint
from fbrapids.trainers.models import model_class, model_name
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.sparse import StoreConfig

if TYPE_CHECKING:  # (annotations only: the scorer is imported when one is loaded)
    from fbrapids.serving.scorer import Scorer, ScorerOptions

FORMAT = 2
IMAGES = "images"
MAX_JSON_BYTES = 256 << 20  #: serving.json / spec.json larger than this are refused before reading
MAX_ROW_BYTES = 64 << 20  #: an embedding row wider than this is refused before allocating
MAX_ARCHIVE_MEMBERS = 10_000
#: the most entries a list or object of ``serving.json``'s model arguments may hold; a list
#: of feature names may hold no more than the export has tables (``rows.f32`` files) either
MAX_KWARG_ITEMS = 4096


def _encode(v: object, d: Path) -> object:
    from fbrapids.ams.embedding import ImageEmbedder, ImageEmbeddingMLP

    if isinstance(v, StoreConfig):
        return {"StoreConfig": v.to_dict()}
    if isinstance(v, ImageEmbedder):
        mlp = v.model
        if not isinstance(mlp, ImageEmbeddingMLP):  # (its sizes and final PReLU are what the export records)
            raise ExportError(f"export: the image sub-model is a {type(mlp).__name__}; an export records and "
                              "rebuilds an ImageEmbeddingMLP only")
        store = v.store  # written into the export (paths read at load time stay inside it)
        if store.path is None or not Path(store.path).resolve().is_relative_to(d.resolve()):
            store = store.save(d / IMAGES)
        assert store.path is not None  # (a saved store is on its file)
        return {"ImageEmbedder": {"vectors": Path(store.path).resolve().relative_to(d.resolve()).as_posix(),
                                  "sizes": list(mlp.sizes),
                                  "final_prelu": isinstance(mlp.net[-1], torch.nn.PReLU), "dedup": v.dedup,
                                  "default": store.default.tolist()}}
    if isinstance(v, Mapping):
        return {str(k): _encode(x, d) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_encode(x, d) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise ExportError(f"export_model: model argument of type {type(v).__name__} cannot be written as JSON")


def _decode(v: object, keep_ssd: bool, d: Path, cache_rows: int | None = None) -> object:
    """``serving.json``'s model arguments as objects; ``cache_rows``: the cap on every
    table's cache rows, or None for a probe (cache tiers of one row on torch's meta device:
    nothing allocated)."""
    if isinstance(v, dict) and set(v) == {"StoreConfig"}:
        try:
            cfg = StoreConfig(**v["StoreConfig"])
        except (TypeError, ValueError) as exc:
            raise UnsafeFileError(f"{d / 'serving.json'}: bad StoreConfig ({exc})") from None
        if cache_rows is None:
            return cfg.with_(cache_rows=1, host_rows=None, ssd_dir=None, device="meta")
        cfg = cfg.with_(cache_rows=max(1, min(cfg.cache_rows, cache_rows)))
        if keep_ssd and cfg.ssd_dir is not None:  # rebuilt from the checkpoint: a private folder, never serving.json's
            return cfg.with_(ssd_dir=tempfile.mkdtemp(prefix="fbrapids-serve-ssd-"))
        return cfg.with_(host_rows=None, ssd_dir=None)
    if isinstance(v, dict) and set(v) == {"ImageEmbedder"}:
        from fbrapids.ams import ImageEmbedder, ImageEmbeddingMLP, ImageVectorStore

        e = v["ImageEmbedder"]
        vectors = resolve_inside(d, e["vectors"], what=f"{d / 'serving.json'}: image vector store")
        # copied into memory: a file edited or truncated after verification changes nothing
        store = ImageVectorStore.open(vectors, default=np.asarray(e["default"], dtype=np.float32), copy=True)
        return ImageEmbedder(store, ImageEmbeddingMLP(e["sizes"], final_prelu=e["final_prelu"]), dedup=e["dedup"])
    if isinstance(v, dict):
        return {k: _decode(x, keep_ssd, d, cache_rows) for k, x in v.items()}
    if isinstance(v, list):
        return [_decode(x, keep_ssd, d, cache_rows) for x in v]
    return v


def _decode_kwargs(kwargs: Mapping[str, object], keep_ssd: bool, d: Path,
                   cache_rows: int | None = None) -> dict[str, object]:
    """``serving.json``'s ``model_kwargs`` as the model's keyword arguments (each value by :func:`_decode`)."""
    return {k: _decode(x, keep_ssd, d, cache_rows) for k, x in kwargs.items()}


def export_model(path: str | os.PathLike, model: CTRModel, spec: ServingSpec, model_kwargs: Mapping[str, object],
                 sample: pd.DataFrame | None = None, signing_key: bytes | None = None) -> Path:
    """Write ``model`` (built as ``type(model)(**model_kwargs)``) and ``spec`` under ``path``.

    ``sample``: a training frame (raw columns).  ``categorify`` features are fitted over it
    here, once, so that serving looks values up in the training vocabulary (a spec with
    ``categorify`` and no ``sample`` is refused); ``plan.txt`` then also holds the explained
    meta-kernel plan of the features.  ``signing_key``: sign the manifest with this HMAC key
    (at least 16 bytes; read it from a file or the environment, never a command line), so
    that :func:`load_model` with the key refuses any edit.  Returns the export directory.
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
             f"item features (cached by {spec.item_key or 'nothing: no item columns'}): {', '.join(spec.item_features) or '-'}",
             f"pair features: {', '.join(spec.pair_features) or '-'}",
             f"model dense inputs: {spec.dense}", f"model sparse inputs: {spec.sparse}"]
    lines += [f"  {k} = {e}" for k, e in spec.features.items()]
    if sample is not None and spec.features:
        lines += ["", explain(sample, spec.features)]
    (d / "plan.txt").write_text("\n".join(lines) + "\n")
    (d / "serving.json").write_text(json.dumps(meta, indent=1))
    write_manifest(d, key=signing_key)
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


def _read_json(path: Path, limit: int = MAX_JSON_BYTES, manifest: Mapping[str, Any] | None = None) -> object:
    """``path`` parsed as JSON; with a checked ``manifest``, from one read whose bytes match it
    (:func:`~fbrapids.files.manifest.read_verified`: a file swapped after the check is refused)."""
    data = read_bounded(path, limit) if manifest is None else read_verified(path.parent, path.name, manifest, limit)
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise UnsafeFileError(f"{path}: not JSON ({str(exc)[:200]})") from None


def check_kwarg_sizes(kwargs: object, tables: int, source: Path) -> None:
    """Refuse ``serving.json``'s model arguments before anything is sized: a list or object of
    more than :data:`MAX_KWARG_ITEMS` entries, or more than ``tables`` (the embedding tables
    the export holds) when ``tables`` is more than 64 (a model has no more sparse features
    than tables, and no other argument is that long).  One line naming the file.

    Example:
        >>> check_kwarg_sizes({"sparse_features": [f"f{i}" for i in range(200_000)]}, 16, Path("serving.json"))
        Traceback (most recent call last):
        ...
        fbrapids.errors.UnsafeFileError: serving.json: model argument 'sparse_features' lists 200000 entries, more than the 64 allowed (the export holds 16 tables; at most 4096); refused before sizing the model
    """
    bound = min(MAX_KWARG_ITEMS, max(64, tables))
    todo: list[tuple[str, object]] = [("", kwargs)]
    while todo:
        name, v = todo.pop()
        if isinstance(v, (list, dict)):
            if len(v) > bound:
                raise UnsafeFileError(f"{source}: model argument {name.lstrip('.')!r} lists {len(v)} entries, more than "
                                      f"the {bound} allowed (the export holds {tables} tables; at most "
                                      f"{MAX_KWARG_ITEMS}); refused before sizing the model")
            items = v.items() if isinstance(v, dict) else enumerate(v)
            todo += [(f"{name}.{k}" if isinstance(v, dict) else f"{name}[{k}]", x) for k, x in items]


def _listed(d: Path, manifest: Mapping[str, Any] | None = None) -> dict[str, int]:
    """The export's files and their sizes, as its manifest lists them (``manifest``: the one
    checked), or as they are on disk when it has none (``verify=False``)."""
    try:
        return {rel: int(e.get("bytes", 0)) for rel, e in (manifest or read_manifest(d))["files"].items()}
    except ManifestError:
        return {p.relative_to(d).as_posix(): p.stat().st_size for p in d.rglob("*")
                if p.is_file() and not p.is_symlink()}


def check_archive(path: Path, data: bytes | None = None) -> None:
    """Refuse a zip archive (``.npz``, ``.pt``) that could expand while it is read: every
    member must be stored uncompressed (as ``np.savez`` and ``torch.save`` write them), so
    the bytes read are the bytes on disk, and each ``.npy`` member's header must describe
    no more data than the member holds.  One line naming the file.  ``data``: the file's
    bytes, already read (``path`` then only names it).

    Example:
        >>> import io, tempfile, zipfile, numpy as np
        >>> p = Path(tempfile.mkdtemp()) / "bomb.npz"
        >>> buf = io.BytesIO(); np.save(buf, np.zeros(1 << 20))
        >>> with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z: z.writestr("ids.npy", buf.getvalue())
        >>> check_archive(p)
        Traceback (most recent call last):
        ...
        fbrapids.errors.UnsafeFileError: .../bomb.npz: member 'ids.npy' is compressed (8388736 bytes from 8...); refused
    """
    size = path.stat().st_size if data is None else len(data)
    try:
        with (open_regular(path) if data is None else io.BytesIO(data)) as f, zipfile.ZipFile(f) as z:
            members = z.infolist()
            if len(members) > MAX_ARCHIVE_MEMBERS:
                raise UnsafeFileError(f"{path}: {len(members)} members in the archive; refused")
            for m in members:
                if m.compress_type != zipfile.ZIP_STORED or m.file_size != m.compress_size:
                    raise UnsafeFileError(f"{path}: member {m.filename!r} is compressed ({m.file_size} bytes from "
                                          f"{m.compress_size}); refused")
                if m.file_size > size:
                    raise UnsafeFileError(f"{path}: member {m.filename!r} claims {m.file_size} bytes, the archive "
                                          f"holds {size}; refused")
                if m.filename.endswith(".npy"):
                    with z.open(m) as member:
                        version = np.lib.format.read_magic(member)
                        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                       else np.lib.format.read_array_header_2_0)
                        shape, _, dtype = read_header(member)
                    need = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
                    if dtype.hasobject or need > m.file_size:
                        raise UnsafeFileError(f"{path}: member {m.filename!r} describes {need} bytes of {dtype}, it "
                                              f"holds {m.file_size}; refused")
    except UnsafeFileError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise UnsafeFileError(f"{path}: not a readable archive ({str(exc)[:200]})") from None


def _check_files(d: Path, listed: dict[str, int]) -> int:
    """Archives checked (:func:`check_archive`); returns the largest table's ``rows.f32`` bytes."""
    for rel in listed:
        if rel.endswith((".npz", ".pt")):
            check_archive(d / rel)
    return max([n for rel, n in listed.items() if rel.endswith("/rows.f32")] + [0])


def _probe(cls: type, kwargs: Mapping[str, object], source: Path) -> tuple[int, int]:
    """``(dense weight bytes, widest embedding row in bytes)`` of ``cls(**kwargs)``, the
    model built on torch's meta device with one-row caches (nothing allocated)."""
    try:
        with torch.device("meta"):
            m = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise UnsafeFileError(f"{source}: model_kwargs do not fit {cls.__name__} ({str(exc)[:300]})") from None
    except MemoryError:
        raise UnsafeFileError(f"{source}: model_kwargs ask for more memory than this machine has; refused") from None
    except (NotImplementedError, RuntimeError) as exc:  # a model that cannot be built on the meta device
        raise UnsafeFileError(f"{source}: {cls.__name__} cannot be sized before loading ({str(exc)[:200]}); "
                              "a served model must build on torch's meta device") from None
    dense = sum(t.numel() * t.element_size() for t in m.state_dict().values() if torch.is_tensor(t))
    return dense, max([s.config.width * 4 for s in m.stores().values()] + [0])


def _verified_reader(d: Path, manifest: Mapping[str, Any], listed: Mapping[str, int]) -> Callable[[Path], bytes]:
    """A checkpoint reader (:func:`~fbrapids.trainers.checkpoint.model_state.load_checkpoint`'s ``read``): each
    file of the export read once, through one open descriptor, its bytes checked against the
    export's checked ``manifest`` before they are returned (a file swapped after the check is
    a :class:`~fbrapids.errors.ManifestError`, never loaded); an archive is checked again
    (:func:`check_archive`) on those bytes."""
    root = Path(os.path.realpath(d))

    def read(path: Path) -> bytes:
        rel = Path(os.path.realpath(path)).relative_to(root).as_posix()
        data = read_verified(d, rel, manifest, listed.get(rel, 0))
        if rel.endswith((".npz", ".pt")):
            check_archive(d / rel, data)
        return data

    return read


def load_model(path: str | os.PathLike, keep_ssd: bool = False, verify: bool = True,
               signing_key: bytes | None = None, admit_new_ids: bool = False) -> tuple[CTRModel, ServingSpec]:
    """The model (in eval mode) and spec of an export directory (module docstring).

    The model's embedding tables are read-only, as the server's: scoring with it adds no row
    and counts no sighting, so its scores are the server's (an unseen id reads the default
    row).  ``admit_new_ids=True`` leaves them admitting new ids (to train it further).

    ``verify``: check every file against ``MANIFEST.json`` first (the default), before any
    other file is parsed.  ``signing_key``: the manifest must also carry this key's HMAC
    (:func:`export_model`'s ``signing_key``; docs/serving-security.md says what each mode
    protects against).  Then, before anything is allocated: every zip archive (``.npz``,
    ``.pt``) is checked not to expand, the embedding caches are sized by the tables the
    manifest lists, and the dense weights ``serving.json`` asks for must fit in the
    ``dense.pt`` the manifest lists (and no list of its arguments is longer than
    :func:`check_kwarg_sizes` allows).  After loading, every weight must be finite.
    ``serving.json`` and ``spec.json`` are each read once, and the bytes parsed are those the
    manifest's check covered.
    """
    d = Path(path)
    if not (d / "serving.json").is_file():
        hint = (": it is a fit checkpoint; export it first with `fbrapids export CHECKPOINT DIR`"
                if (d / "latest").is_file() or (d / "meta.json").is_file() or (d / "checkpoints").is_dir() else "")
        raise NotAnExportError(f"{d} is not a serving export (no serving.json){hint}")
    manifest = checked_manifest(d, key=signing_key) if verify or signing_key is not None else None  # first
    listed = _listed(d, manifest)
    meta = _read_json(d / "serving.json", manifest=manifest)
    spec_data = _read_json(d / "spec.json", manifest=manifest)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        fmt = meta.get("format") if isinstance(meta, dict) else None
        why = " (a pickled spec: loading it could run code; export the model again)" if fmt == 1 else ""
        raise UnsafeFileError(f"{d / 'serving.json'}: export format {fmt}, this version reads {FORMAT}{why}")
    if "model" not in meta or not isinstance(meta.get("model_kwargs"), dict):
        raise UnsafeFileError(f"{d / 'serving.json'}: needs 'model' (a registered model name) and 'model_kwargs'")
    cls = model_class(meta["model"])
    check_kwarg_sizes(meta["model_kwargs"], sum(rel.endswith("/rows.f32") for rel in listed), d / "serving.json")
    table_bytes = _check_files(d, listed)
    need, row_bytes = _probe(cls, _decode_kwargs(meta["model_kwargs"], False, d), d / "serving.json")
    if row_bytes > MAX_ROW_BYTES:
        raise UnsafeFileError(f"{d / 'serving.json'}: embedding rows of {row_bytes} bytes, more than "
                              f"{MAX_ROW_BYTES}; refused before allocating")
    dense_pt = max([n for rel, n in listed.items() if rel.startswith("model/") and rel.endswith("/dense.pt")] + [0])
    if listed and need > dense_pt:
        raise UnsafeFileError(f"{d / 'serving.json'}: model_kwargs describe {need} bytes of dense weights, the "
                              f"export's dense.pt holds {dense_pt}; refused before allocating")
    # no cache needs more rows than the largest table the manifest lists holds
    kwargs = _decode_kwargs(meta["model_kwargs"], keep_ssd, d, max(1, table_bytes // max(row_bytes, 1)))
    try:
        model = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise UnsafeFileError(f"{d / 'serving.json'}: model_kwargs do not fit {meta['model']} ({exc})") from None
    try:
        load_checkpoint(model, None, resolve_inside(d, "model", what="checkpoint directory"),
                        read=_verified_reader(d, manifest, listed) if manifest is not None else None)
    except (RuntimeError, KeyError) as exc:  # torch's state-dict mismatch, a table the checkpoint lacks
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise UnsafeFileError(f"{d / 'model'}: does not hold the model serving.json describes ({first})") from None
    bad = nonfinite_weights(model)
    if bad:
        raise UnsafeFileError(f"{d / 'model'}: non-finite weights in {', '.join(bad[:3])}; refused (a model with "
                              "NaN / inf weights scores NaN)")
    spec = spec_from_json(spec_data, source=str(d / "spec.json"))
    if not admit_new_ids:
        for store in model.stores().values():
            store.read_only = True
    return model.eval(), spec


def load_scorer(path: str | os.PathLike, signing_key: bytes | None = None,
                **scorer_options: Unpack[ScorerOptions]) -> Scorer:
    """A :class:`~fbrapids.serving.scorer.Scorer` over an export directory (its signature
    checked with ``signing_key`` when given)."""
    from fbrapids.serving.scorer import Scorer

    model, spec = load_model(path, signing_key=signing_key)
    return Scorer(model, spec, **scorer_options)

