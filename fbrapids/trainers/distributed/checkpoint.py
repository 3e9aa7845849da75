"""Sharded checkpoints: each rank writes its shard, one manifest covers them all, and
``latest`` moves only after every rank has written.

Layout of ``<root>/step-XXXXXXXXXX`` (built as ``.tmp-step-XXXXXXXXXX-sharded``, a name
that depends on no process id; every rank writes into it on a shared file system):

* ``shard-RRRRR/`` - rank R's shard in today's checkpoint format (``dense.pt``, ``meta.json``,
  ``tables/<table>/{rows.f32,index.npz,meta.json}``, see :mod:`fbrapids.trainers.checkpoint.model_state`),
  its tables holding the rows rank R owns; :func:`fbrapids.trainers.checkpoint.model_state.weights_digest`
  reads a shard as it reads a checkpoint;
* ``dist.json`` - world size, the bucket table, the tables, the configuration digest, and
  where the run stands in its data: ``position_rows`` (rows of the global stream trained
  so far), ``global_stream`` (whether every rank's step was a slice of one global batch,
  so that another world size continues at the same row) and ``run`` (the settings a
  resume must share: global batch size, features, seed, the data's fingerprint,
  :mod:`fbrapids.trainers.run_identity`);
* ``MANIFEST.json`` - crc32 of every file of every shard, written by rank 0 from the digests
  the ranks took while writing (one ``all_gather_object``; nothing is read back).

The commit: every rank writes its shard; the digests are gathered (a rank that died never
sends its own, so rank 0 stops there with an error); rank 0 writes the manifest, renames
the directory into place and swaps ``latest``; a barrier tells the others.  A rank killed
at any point before leaves ``latest`` on the previous complete checkpoint.

Resuming (:func:`restore_sharded`) first compares ``run`` with this run's settings (a
difference is one :class:`~fbrapids.errors.CheckpointMismatchError` naming it, before
anything is loaded) and refuses another world size for a checkpoint of per-rank streams
(their steps are cut from other rows at another W).  At the same world size it loads each rank's own shard
(exact); at another world size every rank reads every shard's tables and keeps the rows
the new bucket table gives it, with their optimizer state, LRU / LFU state and pending
admission counts.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np
import torch
import torch.distributed as dist

from fbrapids.errors import CheckpointError, NonFiniteError
from fbrapids.files.atomic import WriteDigests, WrittenFile, digests_of_writes, fsync_dir, write_atomic
from fbrapids.files.manifest import new_hasher, resolve_inside, verification_enabled, write_manifest
from fbrapids.trainers.checkpoint.directory import (
    CHECKPOINT_DIGEST,
    checkpoints,
    clean_partial,
    commit_checkpoint,
    newest_verified,
    prune,
    step_name,
)
from fbrapids.trainers.checkpoint.model_state import (
    load_dense_state,
    nonfinite_weights,
    table_dir_name,
    weights_digest,
    write_checkpoint_files,
)
from fbrapids.trainers.distributed.buckets import BucketTable
from fbrapids.trainers.distributed.consistency import config_digest
from fbrapids.trainers.run_identity import check_identity
from fbrapids.trainers.sparse import StoreConfig

if TYPE_CHECKING:  # (annotations only: the trainer's module imports this one)
    from fbrapids.trainers.calibration import HeldBack
    from fbrapids.trainers.distributed.fit import DistributedTrainer

log = logging.getLogger(__name__)

__all__ = ["save_sharded", "restore_sharded", "sharded_digest", "shard_name", "newest_layout"]

DIST_META = "dist.json"


def shard_name(rank: int) -> str:
    """``shard-00003`` for rank 3."""
    return f"shard-{rank:05d}"


def _write_shard(trainer: DistributedTrainer, optimizer: torch.optim.Optimizer | None, d: Path, step: int,
                 on_file: Callable[[Path], None] | None, held: HeldBack | None = None) -> None:
    check = verification_enabled()
    model = trainer.model
    if check:
        bad = nonfinite_weights(model, optimizer, tables=False)
        if bad:
            raise NonFiniteError(f"rank {trainer.rank}, step {step}: non-finite {', '.join(bad)}; no checkpoint "
                                 "is written from this state")
    d.mkdir(parents=True)
    write_checkpoint_files(d, model, optimizer, trainer.sharded.local_stores(), step, on_file,
                           meta={"rank": trainer.rank, "world": trainer.world},
                           extra=None if held is None else {"held_back": held.state()})


def save_sharded(trainer: DistributedTrainer, optimizer: torch.optim.Optimizer | None, root: str | os.PathLike,
                 step: int, keep: int | None = None, on_file: Callable[[Path], None] | None = None,
                 extra: Mapping[str, object] | None = None, held: HeldBack | None = None) -> Path:
    """Write this rank's shard of checkpoint ``step`` under ``root`` and commit it with the
    other ranks (module docstring); called by every rank; returns the checkpoint directory.
    ``extra`` (JSON values: the stream position, the run's settings) goes into ``dist.json``;
    ``held`` (the union's held-back batches of the calibration, the same on every rank) into
    each shard's ``dense.pt``."""
    root = Path(root)
    group = trainer.group
    name = step_name(step)
    tmp, final = root / f".tmp-{name}-sharded", root / name
    if trainer.rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        write_atomic(tmp / DIST_META, [json.dumps({
            "step": int(step), "world": trainer.world, "buckets": trainer.buckets.to_dict(),
            "tables": sorted(trainer.sharded.local_stores()), "model": type(trainer.model).__name__,
            "config": config_digest(trainer.model), **dict(extra or {})}, sort_keys=True).encode()])
    dist.barrier(group=group)
    with digests_of_writes(tmp, lambda: new_hasher(CHECKPOINT_DIGEST)) as written:
        _write_shard(trainer, optimizer, tmp / shard_name(trainer.rank), step, on_file, held)
    got: list[Any] = [None] * trainer.world
    dist.all_gather_object(got, {k: (v.bytes, v.mtime_ns, v.digest) for k, v in written.files.items()}, group=group)
    if trainer.rank == 0:
        merged = WriteDigests(tmp.resolve(), lambda: new_hasher(CHECKPOINT_DIGEST))
        for files in got:
            for rel, (size, mtime, digest) in files.items():
                merged.files[rel] = WrittenFile(size, mtime, digest)
        if verification_enabled():
            write_manifest(tmp, algorithm=CHECKPOINT_DIGEST, written=merged)
        for d in [tmp, *tmp.rglob("*")]:
            if d.is_dir():
                fsync_dir(d)
        commit_checkpoint(tmp, root, step, "sharded")
        if keep is not None:
            prune(root, keep, verified=final)
    dist.barrier(group=group)
    return final


def sharded_digest(path: str | os.PathLike) -> str:
    """sha256 over a sharded checkpoint's world size, bucket table, and every shard's
    :func:`~fbrapids.trainers.checkpoint.model_state.weights_digest`, in rank order."""
    path = Path(path)
    meta = json.loads(resolve_inside(path, DIST_META).read_text())
    h = hashlib.sha256(json.dumps({"world": meta["world"], "buckets": meta["buckets"]}, sort_keys=True).encode())
    for r in range(int(meta["world"])):
        h.update(weights_digest(resolve_inside(path, shard_name(r))).encode())
    return h.hexdigest()


def newest_layout(root: str | os.PathLike) -> tuple[Path, dict[str, Any] | None] | None:
    """The newest complete checkpoint under ``root`` and its ``dist.json`` (None for a
    one-process checkpoint); None when ``root`` holds none.  Reads one small file: a
    launcher tells from it, before any rank starts, how the work dir was trained and
    refuses a resume with other settings (``meta["run"]``).

    Example:
        >>> import tempfile
        >>> newest_layout(tempfile.mkdtemp()) is None
        True
    """
    found = checkpoints(root)
    if not found:
        return None
    meta = found[0] / DIST_META
    return found[0], (json.loads(meta.read_text()) if meta.is_file() else None)


def _check_compatible(meta: dict[str, Any], trainer: DistributedTrainer, path: Path) -> None:
    mine = sorted(trainer.sharded.local_stores())
    if meta.get("model") != type(trainer.model).__name__:
        raise CheckpointError(f"checkpoint {path} holds a {meta.get('model')}, this run trains a "
                              f"{type(trainer.model).__name__}")
    if meta["tables"] != mine:
        missing = sorted(set(mine) - set(meta["tables"]))
        extra = sorted(set(meta["tables"]) - set(mine))
        raise CheckpointError(f"checkpoint {path} holds other tables: the model's {missing} are not in it, its "
                              f"{extra} are not in the model (another feature set)")
    want = config_digest(trainer.model)
    for part, what in (("dense", "dense layers (names, shapes)"), ("tables", "table settings")):
        if meta["config"].get(part) != want[part]:
            raise CheckpointError(f"checkpoint {path} was written by a model with other {what} "
                                  f"(digest {meta['config'].get(part)}, this model {want[part]})")


def _filtered_table(path: Path, key: str, world_saved: int, buckets: BucketTable, rank: int) -> dict[str, bytes]:
    """The files (today's table format: ``rows.f32``, ``index.npz``, ``meta.json``, by name)
    of the rows of table ``key`` over every shard that ``buckets`` gives ``rank``, built in
    memory: no temporary folder a killed rank could leave behind."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("ids", "pending_ids", "pending_counts", "last", "freq")}
    rows, meta = [], None
    for s in range(world_saved):
        d = resolve_inside(path, f"{shard_name(s)}/tables/{table_dir_name(key)}", what="table directory")
        m = json.loads((d / "meta.json").read_text())
        meta = meta or m
        width = StoreConfig(**m["config"]).width
        with np.load(d / "index.npz") as z:
            ids, pk = z["ids"], z["pending_ids"]
            keep = buckets.owner_of(ids) == rank if len(ids) else np.zeros(0, dtype=bool)
            keep_p = buckets.owner_of(pk) == rank if len(pk) else np.zeros(0, dtype=bool)
            cols["ids"].append(ids[keep])
            cols["last"].append(z["last"][keep])
            cols["freq"].append(z["freq"][keep])
            cols["pending_ids"].append(pk[keep_p])
            cols["pending_counts"].append(z["pending_counts"][keep_p])
        if m["rows"]:
            rows.append(np.fromfile(d / "rows.f32", dtype=np.float32).reshape(m["rows"], width)[keep])
    arrays = {k: np.concatenate(v) for k, v in cols.items()}
    index = io.BytesIO()
    np.savez(index, allow_pickle=True, **arrays)  # (numpy's default, named: its stubs type ** as this flag)
    meta = dict(meta or {})
    meta["rows"] = int(len(arrays["ids"]))
    return {"rows.f32": np.concatenate(rows).tobytes() if rows else b"", "index.npz": index.getvalue(),
            "meta.json": json.dumps(meta).encode()}


def restore_sharded(trainer: DistributedTrainer, optimizer: torch.optim.Optimizer | None, root: str | os.PathLike,
                    identity: Mapping[str, object] | None = None,
                    global_stream: bool = True, held: HeldBack | None = None) -> tuple[int, Path | None, dict[str, Any]]:
    """Restore the newest verified sharded checkpoint under ``root`` on every rank (module
    docstring); returns (step, checkpoint, its ``dist.json``) or (0, None, {}) when there is
    none.  ``identity``: this run's settings, compared with those the checkpoint recorded;
    ``global_stream``: whether this run's ranks read slices of one global stream."""
    root = Path(root)
    if trainer.rank == 0:
        clean_partial(root)
    dist.barrier(group=trainer.group)
    path = newest_verified(root) if root.is_dir() else None
    if path is None:
        return 0, None, {}
    meta = json.loads(resolve_inside(path, DIST_META).read_text())
    _check_compatible(meta, trainer, path)
    if identity is not None and "run" in meta:
        check_identity(meta["run"], identity, path)
    saved_world = int(meta["world"])
    same = saved_world == trainer.world
    if not same and (meta.get("global_stream") is False or not global_stream):
        raise CheckpointError(f"cannot resume {path} on {trainer.world} ranks: it was written by {saved_world} ranks "
                              "each streaming its own share of the data, which another world size cuts from other "
                              f"rows; resume it on {saved_world} ranks, or train with a global stream (LeaderFeed, "
                              "RankSlices) to resume at any world size")
    own = resolve_inside(path, shard_name(trainer.rank if same else 0))
    state = load_dense_state(own / "dense.pt")
    trainer.model.load_state_dict(state["model"])
    if optimizer is not None and state.get("optimizer") is not None:
        optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    if held is not None and isinstance(state.get("held_back"), dict):
        held.load(state["held_back"])  # the union's held-back batches: the same in every shard
    buckets = BucketTable.from_dict(meta["buckets"]) if same else BucketTable.default(trainer.world)
    trainer.sharded.buckets = buckets
    for key, store in trainer.sharded.local_stores().items():
        if same:
            store.load(resolve_inside(path, f"{shard_name(trainer.rank)}/tables/{table_dir_name(key)}",
                                      what="table directory"))
            continue
        files = _filtered_table(path, key, saved_world, buckets, trainer.rank)
        store.load(path / table_dir_name(key), lambda f: files[f.name])  # read from memory, not a folder
    log.info("rank %d resumed from %s at step %d (saved by %d ranks)", trainer.rank, path, state["step"],
             saved_world)
    with contextlib.suppress(Exception):
        dist.barrier(group=trainer.group)
    return int(state["step"]), path, meta
