"""Training and evaluation loops, with crash-safe checkpoints and exact resume.

``fit`` runs, per batch: forward (the stores gather and pin this batch's rows), prefetch
of the next batch's rows into the caches, backward, the dense optimizer, then the sparse
optimizers of every table.  Every ``checkpoint_every`` steps it writes a checkpoint
directory: ``dense.pt`` (model weights, optimizer state, step, RNG state) and every table
flushed and copied (``tables/<name>/rows.f32``, ``index.npz``, ``meta.json``); each file is
written under a temporary name, fsynced and renamed, the directory is renamed into place
when complete, and the ``latest`` pointer is swapped last (see
:mod:`fbrapids.trainers.checkpoint`).  With ``resume=True`` it restores the latest
checkpoint and skips the batches already trained on, so N steps + checkpoint + resume + M
steps gives, on the CPU, bit for bit the weights of N + M steps without a break (the
stream must replay the same order: same source, same ``seed``; and torch must run with the
same number of threads, ``torch.set_num_threads``, since CPU reductions split by thread).

Example:
    >>> import pandas as pd, numpy as np, fbrapids
    >>> from fbrapids.trainers.models import DLRM
    >>> from fbrapids.trainers.sparse import StoreConfig
    >>> rng = np.random.default_rng(0)
    >>> df = pd.DataFrame({"click": rng.integers(0, 2, 64), "d0": rng.random(64), "ad": rng.integers(0, 9, 64),
    ...                    "user": rng.integers(0, 5, 64)})
    >>> batches = df.fbx.stream(label="click", dense=["d0"], sparse=["ad"], group="user", batch_size=16)
    >>> model = DLRM(1, ["ad"], embedding_dim=4, bottom_mlp=[8], top_mlp=[8], store=StoreConfig(cache_rows=64))
    >>> fit(model, batches, progress=False).steps
    4
    >>> sorted(evaluate(model, batches, progress=False))
    ['auc', 'calibration', 'gauc', 'logloss', 'n', 'ne']
"""

from __future__ import annotations

import collections
import contextlib
import io
import itertools
import json
import logging
import math
import os
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np
import torch
from fbrapids.ui.autobar import tqdm

from fbrapids.errors import ArgumentError, CheckpointError, NonFiniteError, UnsafeFileError
from fbrapids.files.manifest import verification_enabled
from fbrapids.trainers.batch import Batch
from fbrapids.trainers.calibration import (CALIBRATION_ROWS, KEPT_ROWS, PASS_FRACTION, ProgressiveBuffer,
                                           fit_calibration)
from fbrapids.files.manifest import resolve_inside
from fbrapids.trainers.checkpoint import (check_pointer_writable, checkpoint_dir, checkpoints, clean_partial,
                                          newest_verified, prune, read_small_file, step_name, verify_checkpoint,
                                          write_atomic)
from fbrapids.trainers.device import module_device, place_model
from fbrapids.trainers.metrics import all_metrics
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.model_inputs import check_model_stream
from fbrapids.trainers.run_identity import MODEL_KEYS, RUN_KEY, check_identity, model_identity, run_identity
from fbrapids.runs.workdir import clean_stale, lock_work_dir, preflight

log = logging.getLogger(__name__)


@dataclass
class FitResult:
    """What ``fit`` did: the global step reached, per-step losses of this call, checkpoints written."""

    steps: int
    losses: list[float] = field(default_factory=list)
    checkpoints: list[Path] = field(default_factory=list)
    resumed_from: Path | None = None
    skipped: list[int] = field(default_factory=list)  # steps whose update ``nan="skip"`` dropped
    calibration: tuple[float, float] | None = None  # (a, b) fitted at the end: sigmoid(a * logit + b)

    @property
    def mean_loss(self) -> float:
        return float(np.mean(self.losses)) if self.losses else float("nan")


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
                    run: Mapping[str, Any] | None = None, progressive: ProgressiveBuffer | None = None) -> Path:
    """Write a complete, verified checkpoint of ``model`` (dense + every table) under ``root``.

    Every weight is checked finite first (a :class:`~fbrapids.errors.NonFiniteError`
    naming the step and the table, and nothing written, otherwise); the files get a
    manifest of digests.  ``on_file(path)`` is called after each file is in place (e.g.
    for progress).  With ``keep``, older complete checkpoints beyond the newest ``keep``
    are removed afterwards (never the newest verified one: this one).  ``meta.json``
    records ``run``, the settings a resume must share (:mod:`fbrapids.trainers.run_identity`;
    default: the model's own, :func:`~fbrapids.trainers.run_identity.model_identity`).
    ``progressive``: ``fit``'s calibration buffer, kept in ``dense.pt`` so that a resumed run
    calibrates as an unbroken one.  Returns the checkpoint directory.
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
                               extra=None if progressive is None else {"progressive": progressive.state()})
    final = Path(root) / step_name(step)
    if keep is not None:
        prune(root, keep, verified=final)
    return final


def write_checkpoint_files(d: Path, model: CTRModel, optimizer: torch.optim.Optimizer | None,
                           stores: dict[str, Any], step: int, on_file: Callable[[Path], None] | None = None,
                           meta: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> None:
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
    for key, store in stores.items():  # each chunk of rows checked finite before it is written
        store.save(d / "tables" / _table_dir(key), progress=on_file,
                   check_rows=finite_rows_check(key, step) if check else None)
    write_atomic(d / "meta.json", [json.dumps({"step": int(step), "tables": sorted(stores), "finite": check,
                                               **(meta or {})}).encode()])
    if on_file and meta is not None:
        on_file(d / "meta.json")


def load_checkpoint(model: CTRModel, optimizer: torch.optim.Optimizer | None, path: str | os.PathLike,
                    progressive: ProgressiveBuffer | None = None,
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
    the difference, before anything is loaded.  ``progressive``: filled with the calibration
    buffer the checkpoint holds, if any.  ``read(path)``: the bytes of one file of the
    checkpoint, read once: a loader that verified the files against a manifest of its own
    (a serving export's) passes a reader that checks what it read against it, so every file
    is parsed from the bytes that were verified, never read again by path.
    """
    path = Path(path)
    if (path / "latest").exists() or checkpoints(path):
        root, path = path, newest_verified(path)
        if path is None:
            raise CheckpointError(f"{root} holds no checkpoint")
    else:
        verify_checkpoint(path)
    meta_path, dense_path = resolve_inside(path, "meta.json"), resolve_inside(path, "dense.pt")
    meta = json.loads(read(meta_path) if read else read_small_file(meta_path, "checkpoint meta"))
    check_identity(meta.get(RUN_KEY), model_identity(model), path, keys=MODEL_KEYS)
    state = load_tensors(dense_path, read(dense_path) if read else None)
    model.load_state_dict(state["model"])
    if optimizer is not None and state.get("optimizer") is not None:
        optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    if progressive is not None and isinstance(state.get("progressive"), dict):
        progressive.load(state["progressive"])
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
    state = load_tensors(resolve_inside(path, "dense.pt"))

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


def expected_batches(batches: Iterable[Batch]) -> int | None:
    """How many batches one pass over ``batches`` gives, when known exactly.

    Example:
        >>> expected_batches([1, 2, 3]), expected_batches(iter([1]))
        (3, None)
    """
    known = getattr(batches, "expected_batches", None)
    if callable(known):
        return known()
    return len(batches) if hasattr(batches, "__len__") else None


def estimated_batches(batches: Iterable[Batch]) -> int | None:
    """The batches of one pass as progress bars show them: exact when known, else the
    stream's running estimate (``estimated_batches()``, e.g. during a first pass over a dask
    frame), else None.

    Example:
        >>> estimated_batches([1, 2, 3]), estimated_batches(iter([1]))
        (3, None)
    """
    estimate = getattr(batches, "estimated_batches", None)
    return estimate() if callable(estimate) else expected_batches(batches)


class _BarTotal:
    """Keeps a tqdm bar's total on the batches' estimate: ``per_pass`` x ``passes``, at most
    ``cap``; re-read by :meth:`refresh` (cheap) until the count is exact."""

    def __init__(self, bar: tqdm, batches: Iterable[Batch], passes: int = 1, cap: int | None = None) -> None:
        self.bar, self.batches, self.passes, self.cap = bar, batches, passes, cap
        self.exact = False
        self.refresh()

    def refresh(self) -> None:
        if self.exact:
            return
        per_pass = estimated_batches(self.batches)
        self.exact = per_pass is not None and per_pass == expected_batches(self.batches)
        total = None if per_pass is None else per_pass * self.passes
        if self.cap is not None:
            total = self.cap if total is None else min(total, self.cap)
        if total != self.bar.total:
            self.bar.total = total
            self.bar.refresh()


def _lookahead(it: Iterable[Batch], depth: int = 1) -> Iterator[tuple[Batch, list[Batch]]]:
    """Each batch with the (up to) ``depth`` batches after it, read ahead of it.

    Example:
        >>> [(b, ahead) for b, ahead in _lookahead(iter([1, 2, 3]), depth=2)]
        [(1, [2, 3]), (2, [3]), (3, [])]
        >>> read = []
        >>> for b, ahead in _lookahead(iter(read.append(i) or i for i in range(5)), depth=1):
        ...     assert len(read) == b + 2 - (b == 4)  # this batch and one more, no further
    """
    it = iter(it)
    window = collections.deque(itertools.islice(it, depth + 1))
    while window:
        cur = window.popleft()
        yield cur, list(window)  # ``depth`` batches read ahead of ``cur``, no more
        window.extend(itertools.islice(it, 1))


#: batches ``fit`` reads ahead and announces to ``lfu_window`` tables (``fit(lookahead=...)``)
LOOKAHEAD_BATCHES = 32


def default_optimizer(params: list[torch.nn.Parameter], lr: float = 1e-3) -> torch.optim.Optimizer:
    """``Adam(lr=1e-3)`` as one fused kernel over all dense parameters (one call per step
    instead of a dozen small ops per tensor), or the plain per-tensor loop where torch has
    no fused kernel for the parameters' device.

    Example:
        >>> import torch
        >>> type(default_optimizer([torch.nn.Parameter(torch.zeros(2))])).__name__
        'Adam'
    """
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(params, lr=lr)


NAN_POLICIES = ("error", "skip", "warn")


def _nonfinite_grads(model: CTRModel) -> list[str]:
    """Names of dense parameters whose gradient holds NaN / inf (one fused check when all are finite)."""
    named = [(n, p.grad) for n, p in model.named_parameters() if p.grad is not None]
    if not named:
        return []
    # the total 2-norm (one fused pass per device, no copy) is finite when every value is; a NaN or
    # inf makes it non-finite, and so can finite values that overflow it: the exact check below tells
    if bool(torch.isfinite(torch.nn.utils.get_total_norm([g for _, g in named]))):
        return []
    return [n for n, g in named if not bool(torch.isfinite(g).all())]


def _nonfinite_message(step: int, what: str, model: CTRModel, optimizer: torch.optim.Optimizer) -> str:
    where = nonfinite_weights(model, optimizer)
    return (f"step {step}: {what}; " + (f"non-finite weights in {', '.join(where)}" if where else
                                        "every weight is finite (the batch's inputs or an overflow)")
            + "; training stopped before this update and no checkpoint is written from it "
            "(fit(nan='skip') drops such batches instead)")


def _checkpoint_root(checkpoint_dir: str | os.PathLike, optimizer: torch.optim.Optimizer, model: CTRModel,
                     resume: bool, result: FitResult, identity: Mapping[str, Any],
                     progressive: ProgressiveBuffer | None = None) -> int:
    """Clean debris, check the disk, and restore the newest verified checkpoint when resuming;
    returns the step to start from."""
    root = Path(checkpoint_dir)
    clean_partial(root)  # first, a checkpoint a killed re-checkpoint left only as a copy is put back
    clean_stale(root)
    check_pointer_writable(root)  # before training, not at its first checkpoint
    dense_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values() if torch.is_tensor(t))
    table_bytes = sum(len(s) * (s.config.width * 4 + 24) for s in model.stores().values())
    preflight({"checkpoint dir": root}, {"one checkpoint": 3 * dense_bytes + table_bytes})
    if not resume:
        found = checkpoints(root)
        if found:
            raise CheckpointError(f"{root} already holds checkpoints up to {found[0].name} from an earlier run; "
                                  "resume from them (resume=True, --resume) or use an empty checkpoint dir")
        return 0
    ckpt = newest_verified(root)
    if ckpt is None:
        return 0
    meta = json.loads(read_small_file(resolve_inside(ckpt, "meta.json"), "checkpoint meta"))
    check_identity(meta.get(RUN_KEY), identity, ckpt)  # before anything is loaded
    start = load_checkpoint(model, optimizer, ckpt, progressive)
    result.resumed_from = ckpt
    log.info("resumed from %s at step %d", ckpt, start)
    return start


def fit(model: CTRModel, batches: Iterable[Batch], *, epochs: int = 1, max_steps: int | None = None,
        optimizer: torch.optim.Optimizer | None = None, checkpoint_dir: str | os.PathLike | None = None,
        checkpoint_every: int | None = None, resume: bool = True, progress: bool = True,
        prefetch_rows: bool = True, keep_checkpoints: int | None = 3, nan: str = "error",
        device: str | torch.device | None = None, run: Mapping[str, Any] | None = None,
        lookahead: int = LOOKAHEAD_BATCHES, calibrate: bool = True,
        calibration_rows: int = CALIBRATION_ROWS) -> FitResult:
    """Train ``model`` on ``batches`` with binary cross-entropy on logits.

    Args:
        model: a :class:`~fbrapids.trainers.models.base.CTRModel` (DLRM, WideAndDeep, DeepFM, DIN).
        batches: e.g. ``df.fbx.stream(label=..., dense=[...], sparse=[...], batch_size=...)``.
        epochs: passes over ``batches``.
        max_steps: stop at this global step.
        optimizer: dense optimizer (default :func:`default_optimizer`: fused ``Adam(lr=1e-3)``).
        checkpoint_dir: where checkpoints go (and are resumed from); held exclusively by this
            call (a second run on it is a :class:`~fbrapids.errors.WorkDirLockedError`), its
            writability and free space checked before the first step.
        checkpoint_every: checkpoint every this many global steps (and at the end).
        resume: restore the newest checkpoint in ``checkpoint_dir`` that verifies (older ones
            are tried when newer ones are corrupt; each skip is logged) and skip the batches
            it had trained on.  With ``resume=False`` a ``checkpoint_dir`` that already holds
            checkpoints is an error: runs are never mixed.
        progress: show a tqdm bar.
        prefetch_rows: pin the next batch's rows in the caches while this one trains.
        lookahead: where a table's eviction uses upcoming batches (``StoreConfig(eviction=
            "lfu_window")``), read this many batches ahead of training and announce each
            one's ids to it (:meth:`~fbrapids.trainers.sparse.TieredEmbeddingStore.announce`)
            as it enters that window; otherwise only the next batch is read ahead.  A
            stream already holds the partitions it extracted ahead (a 200k-row demo
            partition is 16 batches of 2,048 rows; the pipeline's partitions up to 128), so
            the default, 32, holds about two demo partitions' batches.
        keep_checkpoints: keep this many newest checkpoints (None: all); the newest verified
            one is never removed.
        nan: a NaN / inf loss or dense gradient: ``"error"`` (default) stops with a
            :class:`~fbrapids.errors.NonFiniteError` naming the step and the table, before
            the update; ``"skip"`` drops that batch's update (the steps are listed in
            ``FitResult.skipped``); ``"warn"`` logs and applies it.  Checkpoints are never
            written from non-finite weights, whatever the policy.
        device: where to train (:func:`fbrapids.trainers.device.place_model`: this, else
            where the model already is on an accelerator, else ``$FBRAPIDS_DEVICE``, else
            cuda on the GPU backend, else the CPU); the model, its stores' caches and every
            batch go there.
        run: more settings a resume must share with its checkpoint (e.g. the data's
            fingerprint), recorded in every checkpoint with the model's (class, tables'
            dims, dense shapes) and the stream's (label, ordered dense / sparse lists,
            batch size, seed): :mod:`fbrapids.trainers.run_identity`.  Resuming with any
            of them changed is a :class:`~fbrapids.errors.CheckpointMismatchError` naming
            each difference, before anything is loaded.
        calibrate: at the end, fit the model's post-hoc calibration (a shift of the logits,
            ``sigmoid(logit + b)``, ``model.set_calibration``; :mod:`fbrapids.trainers.calibration`) on the
            progressive predictions of the last ``calibration_rows`` rows trained on (each
            batch's logits before its own step), and return it in ``FitResult.calibration``;
            ``predict`` / ``evaluate`` and serving apply it.  Only with ``epochs=1``: a
            later pass predicts rows it has trained on (an over-confident fit); and not when
            resuming a checkpoint that holds no progressive predictions.  ``False``:
            leave the model's calibration as it is.
    """
    check_model_stream(model, batches)  # a stream of other features: one error naming the feature, before training
    place_model(model, device)
    if nan not in NAN_POLICIES:
        raise ArgumentError(f"nan must be one of {', '.join(NAN_POLICIES)}, got {nan!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer is None:
        optimizer = default_optimizer(params)
    result = FitResult(steps=0)
    identity = run_identity(model, batches, run)
    # the progressive predictions of a second pass are of rows already trained on: an
    # over-confident fit (held-out logloss worse than none), so several epochs get none
    progressive = ProgressiveBuffer(max(calibration_rows, KEPT_ROWS)) if calibrate and epochs == 1 else None
    if calibrate and epochs > 1:
        log.info("no post-hoc calibration: with %d epochs no prediction of the training rows is out of sample", epochs)
    check = verification_enabled()
    # the debris is cleaned under the lock by _checkpoint_root, after restoring what a killed writer left
    with (lock_work_dir(checkpoint_dir, clean=False) if checkpoint_dir is not None else contextlib.nullcontext()):
        start = (0 if checkpoint_dir is None
                 else _checkpoint_root(checkpoint_dir, optimizer, model, resume, result, identity, progressive))
        if progressive is not None and start > 0 and not progressive.restored:
            log.info("no post-hoc calibration: the checkpoint resumed from holds no progressive predictions (one "
                     "written without calibration, or by the ranks' trainer)")
            progressive = None
        if lookahead < 0:
            raise ArgumentError(f"lookahead must be >= 0 batches, got {lookahead}")
        step = _train(model, batches, optimizer, result, start, epochs, max_steps, checkpoint_dir, checkpoint_every,
                      progress, prefetch_rows, keep_checkpoints, nan if check else "warn", identity,
                      lookahead if model.uses_window() else 0, progressive)
        result.steps = step
        if progressive is not None and step > start:
            _calibrate(model, progressive, result, calibration_rows)
        if checkpoint_dir is not None and step > start and (not result.checkpoints or
                                                             result.checkpoints[-1].name != step_name(step)):
            result.checkpoints.append(save_checkpoint(model, optimizer, checkpoint_dir, step, keep=keep_checkpoints,
                                                      run=identity, progressive=progressive))
    return result


def _calibrate(model: CTRModel, progressive: ProgressiveBuffer, result: FitResult, rows: int) -> None:
    """Fit and set ``model``'s calibration (a shift of its logits) on the newest ``rows`` progressive predictions kept."""
    ab = fit_calibration(progressive, rows, pass_rows=progressive.seen)  # seen: every pair of the pass
    if ab is None:
        return
    model.set_calibration(*ab)
    result.calibration = ab
    log.info("calibration: sigmoid(%.4f * logit %+.4f), fitted on the progressive predictions of the last %d rows "
             "trained on", ab[0], ab[1], min(rows, len(progressive), int(progressive.seen * PASS_FRACTION)))


def _train(model: CTRModel, batches: Iterable[Batch], optimizer: torch.optim.Optimizer, result: FitResult,
           start: int, epochs: int, max_steps: int | None, checkpoint_dir: str | os.PathLike | None,
           checkpoint_every: int | None, progress: bool, prefetch_rows: bool, keep_checkpoints: int | None,
           nan: str, identity: Mapping[str, Any] | None = None, lookahead: int = 0,
           progressive: ProgressiveBuffer | None = None) -> int:
    step = 0
    dev = module_device(model)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    model.train()
    bar = tqdm(total=None, initial=start, disable=not progress, desc="fit", unit="batch")
    # the total: exact for an eager frame; over a dask stream's first pass an estimate refined
    # with each partition, exact after it
    total = _BarTotal(bar, batches, epochs, max_steps)
    try:
        for epoch in range(epochs):
            if hasattr(batches, "set_epoch"):
                batches.set_epoch(epoch)
            announced = 0  # batches of this pass announced so far
            for i, (batch, ahead) in enumerate(_lookahead(batches, max(1, lookahead))):
                total.refresh()
                if max_steps is not None and step >= max_steps:
                    return step
                if step < start:  # trained before the checkpoint
                    step += 1
                    continue
                if lookahead:  # this batch and those entering the window, each announced once
                    upcoming = [batch, *ahead[:lookahead]]
                    for j in range(max(announced, i), i + len(upcoming)):
                        model.announce(upcoming[j - i], j - i)
                    announced = i + len(upcoming)
                optimizer.zero_grad(set_to_none=True)
                batch = batch.to(dev)
                logits = model(batch)
                if prefetch_rows and ahead:
                    model.prefetch(ahead[0])
                loss = loss_fn(logits, batch.label.to(logits.device))
                value = float(loss.detach())
                problem = None if math.isfinite(value) else f"loss is {value}"
                if problem is None:
                    loss.backward()
                    if nan != "warn":
                        bad = _nonfinite_grads(model)
                        problem = f"non-finite gradient of {', '.join(bad)}" if bad else None
                step += 1
                bar.update(1)  # a batch consumed (a skipped one too: the bar reaches its total)
                if problem is not None:
                    if nan == "error":
                        raise NonFiniteError(_nonfinite_message(step, problem, model, optimizer))
                    log.warning("step %d: %s (nan=%r)", step, problem, nan)
                    if nan == "skip":
                        optimizer.zero_grad(set_to_none=True)
                        result.skipped.append(step)
                        continue
                optimizer.step()
                model.apply_sparse_gradients()
                if progressive is not None:  # this batch's logits before its own step: out of sample
                    progressive.add(logits, batch.label)
                result.losses.append(value)
                bar.set_postfix(loss=f"{value:.4f}", refresh=False)
                if checkpoint_dir is not None and checkpoint_every and step % checkpoint_every == 0:
                    result.checkpoints.append(
                        save_checkpoint(model, optimizer, checkpoint_dir, step, keep=keep_checkpoints, run=identity,
                                        progressive=progressive))
        return step
    finally:
        bar.close()


@torch.no_grad()
def predict(model: CTRModel, batches: Iterable[Batch], progress: bool = True,
            device: str | torch.device | None = None) -> dict[str, np.ndarray]:
    """Predictions, labels and groups (when the batches carry them) as numpy arrays; the
    model runs where :func:`~fbrapids.trainers.device.place_model` puts it, and so do the batches."""
    dev = place_model(model, device)
    model.eval()
    ps, ys, gs = [], [], []
    with tqdm(total=None, disable=not progress, desc="predict", unit="batch") as bar:
        total = _BarTotal(bar, batches)
        for batch in batches:
            total.refresh()
            ps.append(model.predict(batch.to(dev)).double().cpu().numpy())
            ys.append(batch.label.cpu().numpy())
            if batch.group is not None:
                gs.append(batch.group.cpu().numpy())
            bar.update(1)
    model.train()
    out = {"pred": np.concatenate(ps) if ps else np.zeros(0), "label": np.concatenate(ys) if ys else np.zeros(0)}
    if gs and len(gs) == len(ps):
        out["group"] = np.concatenate(gs)
    return out


def evaluate(model: CTRModel, batches: Iterable[Batch], progress: bool = True,
             device: str | torch.device | None = None) -> dict[str, float]:
    """AUC, GAUC (needs ``group=`` in the stream; NaN otherwise), logloss, normalized entropy,
    calibration and the number of rows, over ``batches`` (on ``device`` as in :func:`predict`)."""
    out = predict(model, batches, progress, device)
    return all_metrics(out["label"], out["pred"], out.get("group"))
