"""A model's checkpoint: what ``fit`` writes into a checkpoint directory and reads back.

``dense.pt`` (the model's dense weights, the optimizer's state, the step and the RNG state,
loaded with ``torch.load(weights_only=True)``: tensors and plain containers only),
``meta.json`` (the step, the tables, the run's identity) and every embedding table flushed
and copied under ``tables/<name>/``.  The directory itself (temporary name, manifest,
rename, ``latest`` pointer) is :mod:`fbrapids.trainers.checkpoint.directory`'s.

Example:
    >>> table_dir_name("emb_l/ad")
    'emb_l__ad'
"""

from __future__ import annotations

import contextvars
import io
import json
import logging
import os
import pickle
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch

from fbrapids.errors import CheckpointError, NonFiniteError, UnsafeFileError
from fbrapids.files.manifest import resolve_inside, verification_enabled
from fbrapids.trainers.calibration import HeldBack
from fbrapids.trainers.checkpoint.directory import (
    checkpoint_dir,
    checkpoints,
    newest_verified,
    prune,
    read_small_file,
    step_name,
    verify_checkpoint,
    write_atomic,
)
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.run_identity import MODEL_KEYS, RUN_KEY, check_identity, model_identity

log = logging.getLogger(__name__)


def _table_dir(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "__", key)


def table_dir_name(key: str) -> str:
    """The folder of table ``key`` under a checkpoint's ``tables/``.

    Example:
        >>> table_dir_name("emb_l/ad")
        'emb_l__ad'
    """
    return _table_dir(key)


def nonfinite_weights(model: CTRModel, optimizer: torch.optim.Optimizer | None = None,
                      tables: bool = True) -> list[str]:
    """Where ``model`` (and ``optimizer``'s state) holds NaN / inf: dense tensor names and
    ``table '<key>' (<n> rows)`` for embedding tables (scanned when ``tables``); empty when
    all is finite.

    Example:
        >>> from fbrapids.trainers.models import DLRM
        >>> from fbrapids.trainers.sparse import StoreConfig
        >>> m = DLRM(1, ["ad"], embedding_dim=2, bottom_mlp=[4], top_mlp=[4], store=StoreConfig(dim=2, cache_rows=8))
        >>> m.stores()["emb_l/ad"].assign([5], [[float("nan"), 0.0]])
        >>> nonfinite_weights(m)
        ["table 'emb_l/ad' (1 rows)"]
    """
    bad = [f"dense '{k}'" for k, v in model.state_dict().items()
           if torch.is_tensor(v) and v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if optimizer is not None:
        names = {id(p): n for n, p in model.named_parameters()}
        for p, st in optimizer.state.items():
            for k, v in st.items():
                if torch.is_tensor(v) and v.is_floating_point() and not bool(torch.isfinite(v).all()):
                    bad.append(f"optimizer state '{k}' of '{names.get(id(p), '?')}'")
    for key, store in model.stores().items() if tables else ():
        _, rows = store.state()
        n = int((~np.isfinite(rows)).any(axis=1).sum()) if rows.size else 0
        if n:
            bad.append(f"table '{key}' ({n} rows)")
    return bad


def finite_rows_check(key: str, step: int) -> Callable[[np.ndarray, int], None]:
    """A ``check_rows`` for :meth:`TieredEmbeddingStore.save`: a chunk of table ``key``'s rows
    holding NaN / inf is a :class:`~fbrapids.errors.NonFiniteError` naming the step, the
    table, the count in the chunk and the first bad row, before the chunk is written.

    Example:
        >>> import numpy as np
        >>> check = finite_rows_check("ad", 7)
        >>> check(np.full((2, 4), 3e38, np.float32), 0)  # finite (rows . rows overflows: told apart)
        >>> check(np.array([[0.0, 1.0], [np.nan, 2.0]], np.float32), 64)
        Traceback (most recent call last):
        ...
        fbrapids.errors.NonFiniteError: step 7: table 'ad' holds 1 non-finite value(s) in rows 64..65, the first in row 65; ...
    """

    def check(rows: np.ndarray, first_row: int) -> None:
        flat = rows.reshape(-1)
        # flat . flat is finite only if every value is (a NaN or inf makes it non-finite); finite values
        # that overflow it are told apart by the exact test (BLAS: ~2x cheaper than a float32 sum, no copy)
        with np.errstate(over="ignore", invalid="ignore"):
            suspect = bool(flat.size) and not np.isfinite(np.dot(flat, flat))
        if suspect and not np.isfinite(flat).all():
            bad = ~np.isfinite(rows.reshape(len(rows), -1))
            first = first_row + int(np.flatnonzero(bad.any(axis=1))[0])
            raise NonFiniteError(f"step {step}: table '{key}' holds {int(bad.sum())} non-finite value(s) in rows "
                                 f"{first_row}..{first_row + len(rows) - 1}, the first in row {first}; no "
                                 "checkpoint is written from this state")

    return check


def save_checkpoint(model: CTRModel, optimizer: torch.optim.Optimizer | None, root: str | os.PathLike, step: int,
                    on_file: Callable[[Path], None] | None = None, keep: int | None = None,
                    run: Mapping[str, object] | None = None, held: HeldBack | None = None) -> Path:
    """Write a complete, verified checkpoint of ``model`` (dense + every table) under ``root``.

    Every weight is checked finite first (a :class:`~fbrapids.errors.NonFiniteError`
    naming the step and the table, and nothing written, otherwise); the files get a
    manifest of digests.  ``on_file(path)`` is called after each file is in place (e.g.
    for progress).  With ``keep``, older complete checkpoints beyond the newest ``keep``
    are removed afterwards (never the newest verified one: this one).  ``meta.json``
    records ``run``, the settings a resume must share (:mod:`fbrapids.trainers.run_identity`;
    default: the model's own, :func:`~fbrapids.trainers.run_identity.model_identity`).
    ``held``: the batches ``fit`` holds back for its calibration, kept in ``dense.pt`` so
    that a resumed run calibrates as an unbroken one.  Returns the checkpoint directory.
    """
    check = verification_enabled()
    if check:
        bad = nonfinite_weights(model, optimizer, tables=False)  # tables: checked as their files are written
        if bad:
            raise NonFiniteError(f"step {step}: non-finite {', '.join(bad)}; no checkpoint is written from this "
                                 "state")
    with checkpoint_dir(root, step) as d:
        write_checkpoint_files(d, model, optimizer, model.stores(), step, on_file,
                               meta={RUN_KEY: dict(run) if run is not None else model_identity(model)},
                               extra=None if held is None else {"held_back": held.state()})
    final = Path(root) / step_name(step)
    if keep is not None:
        prune(root, keep, verified=final)
    return final


def write_checkpoint_files(d: Path, model: CTRModel, optimizer: torch.optim.Optimizer | None,
                           stores: Mapping[str, Any], step: int, on_file: Callable[[Path], None] | None = None,
                           meta: Mapping[str, object] | None = None, extra: Mapping[str, object] | None = None) -> None:
    """The files of one checkpoint into directory ``d``: ``dense.pt`` (``model``'s weights,
    ``optimizer``'s state, the step, the RNG state), each of ``stores`` under
    ``tables/<key>/`` (every chunk of rows checked finite when verification is on), and
    ``meta.json`` (the step, the tables, and ``meta``'s entries); ``on_file(path)`` after each.
    ``extra``: more entries of ``dense.pt`` (tensors and plain containers)."""
    check = verification_enabled()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict() if optimizer else None,
             "step": int(step), "torch_rng": torch.get_rng_state(), **(extra or {})}
    buf = io.BytesIO()
    torch.save(state, buf)
    write_atomic(d / "dense.pt", [buf.getvalue()])
    if on_file:
        on_file(d / "dense.pt")
    # each chunk of rows checked finite before it is written; the tables written side by side (their
    # writes and fsyncs wait on the disk, not on each other)
    jobs = [(store, d / "tables" / _table_dir(key), finite_rows_check(key, step) if check else None)
            for key, store in stores.items()]
    with ThreadPoolExecutor(max_workers=min(TABLE_WRITERS, max(1, len(jobs))),
                            thread_name_prefix="fbrapids-checkpoint") as pool:
        done = [pool.submit(contextvars.copy_context().run, store.save, where, progress=on_file, check_rows=check_rows)
                for store, where, check_rows in jobs]
        for job in done:
            job.result()
    write_atomic(d / "meta.json", [json.dumps({"step": int(step), "tables": sorted(stores), "finite": check,
                                               **(meta or {})}).encode()])
    if on_file and meta is not None:
        on_file(d / "meta.json")


def load_checkpoint(model: CTRModel, optimizer: torch.optim.Optimizer | None, path: str | os.PathLike,
                    held: HeldBack | None = None,
                    read: Callable[[Path], bytes] | None = None) -> int:
    """Restore ``model`` (and ``optimizer``) from a checkpoint directory, or from the newest
    one that verifies under a root of checkpoints; returns the step.

    The files are checked against the checkpoint's manifest first: a bad checkpoint is a
    :class:`~fbrapids.errors.ManifestError` naming the file.  Loading runs no code from
    the files: ``dense.pt`` is read with ``torch.load(weights_only=True)`` (tensors and
    plain containers only; a pickle that would call anything is an
    :class:`~fbrapids.errors.UnsafeFileError`), and every file read must resolve inside the
    checkpoint directory.  A checkpoint of another model (class, a table's embedding dim,
    a dense weight's shape) is a :class:`~fbrapids.errors.CheckpointMismatchError` naming
    the difference, before anything is loaded.  ``held``: filled with the held-back
    batches of the calibration the checkpoint holds, if any.  ``read(path)``: the bytes of one file of the
    checkpoint, read once: a loader that verified the files against a manifest of its own
    (a serving export's) passes a reader that checks what it read against it, so every file
    is parsed from the bytes that were verified, never read again by path.
    """
    path = Path(path)
    if (path / "latest").exists() or checkpoints(path):
        newest = newest_verified(path)
        if newest is None:
            raise CheckpointError(f"{path} holds no checkpoint")
        path = newest
    else:
        verify_checkpoint(path)
    meta_path, dense_path = resolve_inside(path, "meta.json"), resolve_inside(path, "dense.pt")
    meta = json.loads(read(meta_path) if read else read_small_file(meta_path, "checkpoint meta"))
    check_identity(meta.get(RUN_KEY), model_identity(model), path, keys=MODEL_KEYS)
    state = load_dense_state(dense_path, read(dense_path) if read else None)
    model.load_state_dict(state["model"])
    if optimizer is not None and state.get("optimizer") is not None:
        optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    if held is not None and isinstance(state.get("held_back"), dict):
        held.load(state["held_back"])
    stores = model.stores()
    if sorted(stores) != meta["tables"]:
        raise CheckpointError(f"checkpoint {path} holds tables {meta['tables']}, the model has {sorted(stores)}")
    for key, store in stores.items():
        store.load(resolve_inside(path, f"tables/{_table_dir(key)}", what="table directory"), read)
    return int(state["step"])


def weights_digest(path: str | os.PathLike) -> str:
    """sha256 over what a checkpoint directory holds as numbers: the dense weights, the dense
    optimizer's state, the step, and every table's ids and rows (file bytes such as
    ``torch.save``'s archive layout or a table's SSD path do not enter it).  Two runs that
    trained the same model bit for bit give the same digest.

    Example:
        >>> import tempfile, torch
        >>> from fbrapids.trainers.models import DLRM
        >>> from fbrapids.trainers.sparse import StoreConfig
        >>> m = DLRM(1, ["ad"], embedding_dim=2, bottom_mlp=[4], top_mlp=[4], store=StoreConfig(dim=2, cache_rows=8))
        >>> d = tempfile.mkdtemp(); a = weights_digest(save_checkpoint(m, None, d, 1))
        >>> a == weights_digest(save_checkpoint(m, None, tempfile.mkdtemp(), 1)), len(a)
        (True, 64)
    """
    import hashlib

    path = Path(path)
    h = hashlib.sha256()
    state = load_dense_state(resolve_inside(path, "dense.pt"), keys=("model", "step"))

    def feed(name: str, value: object) -> None:
        h.update(name.encode())
        if torch.is_tensor(value):
            h.update(str((value.dtype, tuple(value.shape))).encode())
            h.update(value.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(value, dict):
            for k in sorted(value, key=str):
                feed(f"{name}/{k}", value[k])
        elif isinstance(value, (list, tuple)):
            for k, v in enumerate(value):
                feed(f"{name}/{k}", v)
        else:
            h.update(repr(value).encode())

    feed("model", state["model"])
    feed("optimizer", state.get("optimizer"))
    feed("step", state["step"])
    meta = json.loads(read_small_file(resolve_inside(path, "meta.json"), "checkpoint meta"))
    for key in meta["tables"]:
        d = resolve_inside(path, f"tables/{_table_dir(key)}", what="table directory")
        with np.load(d / "index.npz") as z:
            for k in sorted(z.files):
                feed(f"{key}/{k}", torch.from_numpy(z[k]))
        h.update((d / "rows.f32").read_bytes())
    return h.hexdigest()


#: the entries every checkpoint's ``dense.pt`` holds (:func:`write_checkpoint_files`)
DENSE_KEYS = ("model", "step", "torch_rng")
#: tables of a checkpoint written side by side
TABLE_WRITERS = 4


def load_dense_state(path: str | os.PathLike, data: bytes | None = None,
                     keys: tuple[str, ...] = DENSE_KEYS) -> dict[str, Any]:
    """A checkpoint's ``dense.pt`` (:func:`load_tensors`), checked to be the dict a checkpoint
    writes, with ``keys``: any other content (a tensor, a list, a dict without the step...)
    is a :class:`~fbrapids.errors.CheckpointError` naming the file, not a ``TypeError`` or
    ``KeyError`` from inside the loader.

    Example:
        >>> import tempfile, torch
        >>> p = tempfile.mkdtemp() + "/dense.pt"; torch.save([torch.ones(2)], p)
        >>> load_dense_state(p)
        Traceback (most recent call last):
        ...
        fbrapids.errors.CheckpointError: .../dense.pt holds a list, not the dict of a checkpoint's dense state
    """
    state = load_tensors(path, data)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not the dict of a checkpoint's dense state")
    missing = [k for k in keys if k not in state]
    if missing:
        raise CheckpointError(f"{path} has no {', '.join(map(repr, missing))} entry (a checkpoint's dense state "
                              f"holds {', '.join(map(repr, keys))})")
    return state


def load_tensors(path: str | os.PathLike, data: bytes | None = None) -> object:
    """``torch.load(path, map_location="cpu", weights_only=True)``: tensors, numbers, strings
    and containers only; a file that would run code or build other objects is refused
    with an :class:`~fbrapids.errors.UnsafeFileError` naming it.  ``data``: the file's bytes,
    already read (``path`` then only names it).

    Example:
        >>> import tempfile, torch
        >>> p = tempfile.mkdtemp() + "/w.pt"; torch.save({"w": torch.ones(2)}, p)
        >>> load_tensors(p)["w"].tolist()
        [1.0, 1.0]
    """
    try:
        return torch.load(io.BytesIO(data) if data is not None else path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        why = next((ln for ln in lines if "Unsupported" in ln or "WeightsUnpickler" in ln), lines[0] if lines else "")
        raise UnsafeFileError(f"{path}: refused by torch.load(weights_only=True), which loads tensors only "
                              f"({why[:300]})") from None
