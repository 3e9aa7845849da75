"""What a checkpoint was trained with, recorded in it and checked on resume.

A checkpoint's ``meta.json`` holds, under ``"run"``, the settings a resumed run must share
with it to continue the same training: the model (class, every table's embedding dim, the
dense weights' shapes), the stream (label, the ordered ``dense`` / ``sparse`` lists, batch
size, seed) and whatever the caller adds (the pipeline: model name, embedding dim, feature
expressions and the data's fingerprint, :func:`fbrapids.runs.data_identity.data_fingerprint`).
Resuming with another value of any of them would train rows twice or not at all, apply
weights to the wrong inputs, or continue on another dataset: :func:`check_identity` refuses
it with one :class:`~fbrapids.errors.CheckpointMismatchError` naming every difference.

Example:
    >>> check_identity({"batch_size": 64, "seed": 0}, {"batch_size": 64, "seed": 0}, "ckpt")
    >>> check_identity({"batch_size": 64, "dense": ["a", "b"]}, {"batch_size": 32, "dense": ["b", "a"]}, "ckpt")
    Traceback (most recent call last):
    ...
    fbrapids.errors.CheckpointMismatchError: cannot resume from ckpt: it was trained with other settings: batch_size: 64 in the checkpoint, 32 in this run; dense: the same 2 names in another order (position 0: 'a' in the checkpoint, 'b' in this run) (resume with the checkpoint's settings, or start in a new work dir)
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch

from fbrapids.errors import CheckpointError, CheckpointMismatchError, ManifestError
from fbrapids.files.manifest import file_digest, read_manifest, resolve_inside, verification_enabled
from fbrapids.trainers.checkpoint.directory import CHECKPOINT_DIGEST, checkpoints, read_small_file

__all__ = ["RUN_KEY", "MODEL_KEYS", "model_identity", "stream_identity", "run_identity", "check_identity",
           "recorded_identity"]

log = logging.getLogger(__name__)

RUN_KEY = "run"
#: the keys :func:`model_identity` gives (checked whenever a checkpoint is loaded into a model)
MODEL_KEYS = ("model_class", "tables", "dense_weights")
_STREAM_ATTRS = ("label", "dense", "sparse", "batch_size", "seed")


def _plain(value: Mapping[str, object]) -> dict[str, object]:
    """``value`` as JSON would give it back (tuples as lists), so recorded and live values compare equal."""
    out: dict[str, object] = json.loads(json.dumps(value))
    return out


def model_identity(model: torch.nn.Module) -> dict[str, object]:
    """The model's class, its tables' embedding dims (by key) and its dense weights' shapes.

    Example:
        >>> from fbrapids.trainers.models import DLRM
        >>> from fbrapids.trainers.sparse import StoreConfig
        >>> m = DLRM(1, ["ad"], embedding_dim=4, bottom_mlp=[8], top_mlp=[8], store=StoreConfig(cache_rows=8))
        >>> ident = model_identity(m); ident["model_class"], ident["tables"]
        ('DLRM', {'emb_l/ad': 4})
    """
    stores_of = getattr(model, "stores", None)
    stores = stores_of() if stores_of is not None else {}
    return _plain({"model_class": type(model).__name__,
                   "tables": {k: int(s.config.dim) for k, s in sorted(stores.items())},
                   "dense_weights": {k: list(v.shape) for k, v in model.state_dict().items() if torch.is_tensor(v)}})


def stream_identity(batches: object) -> dict[str, object]:
    """The label, ordered dense / sparse lists, batch size and seed of a batch stream
    (those of its attributes it has; nothing for a plain list of batches).

    Example:
        >>> class S: dense, sparse, batch_size = ["d"], ["a", "b"], 16
        >>> stream_identity(S())
        {'dense': ['d'], 'sparse': ['a', 'b'], 'batch_size': 16}
    """
    return _plain({a: getattr(batches, a) for a in _STREAM_ATTRS if getattr(batches, a, None) is not None})


def run_identity(model: torch.nn.Module, batches: object,
                 extra: Mapping[str, object] | None = None) -> dict[str, object]:
    """:func:`model_identity`, :func:`stream_identity` and ``extra`` (which wins on a shared key)."""
    return {**model_identity(model), **stream_identity(batches), **_plain(dict(extra or {}))}


def _short(value: object, limit: int = 80) -> str:
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return f"fingerprint {value[:12]}..."  # a digest: its head tells two apart
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _names(items: Iterable[object], limit: int = 4) -> str:
    items = list(items)
    return ", ".join(map(repr, items[:limit])) + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


def _difference(key: str, old: object, new: object) -> str:
    """One phrase saying how ``old`` (the checkpoint's) and ``new`` (this run's) differ."""
    if isinstance(old, list) and isinstance(new, list):
        if sorted(map(repr, old)) == sorted(map(repr, new)):
            i = next(i for i, (a, b) in enumerate(zip(old, new)) if a != b)
            return (f"{key}: the same {len(old)} names in another order (position {i}: {old[i]!r} in the "
                    f"checkpoint, {new[i]!r} in this run)")
        gone, added = [v for v in old if v not in new], [v for v in new if v not in old]
        return f"{key}: " + "; ".join(part for part in (f"{_names(gone)} only in the checkpoint" if gone else "",
                                                        f"{_names(added)} only in this run" if added else "") if part)
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        parts = [f"{k!r} {_short(old[k], 40) if k in old else 'absent'} in the checkpoint, "
                 f"{_short(new[k], 40) if k in new else 'absent'} in this run" for k in keys[:3]]
        return f"{key}: " + ", ".join(parts) + (f" (+{len(keys) - 3} more)" if len(keys) > 3 else "")
    return f"{key}: {_short(old)} in the checkpoint, {_short(new)} in this run"


def check_identity(recorded: Mapping[str, object] | None, wanted: Mapping[str, object], where: str | os.PathLike,
                   keys: Iterable[str] | None = None) -> None:
    """Refuse to continue from the checkpoint ``where`` when a setting ``recorded`` in it
    differs from this run's (``wanted``); only the keys both hold (and among ``keys`` when
    given) are compared.  A checkpoint that records nothing (written before fbrapids
    recorded settings) is logged and accepted.  Raises a
    :class:`~fbrapids.errors.CheckpointMismatchError` naming every difference."""
    if recorded is None:  # a warning when resuming; a plain load (keys given) only notes it
        log.log(logging.WARNING if keys is None else logging.INFO,
                "checkpoint %s records none of its run's settings (an older fbrapids wrote it): continuing without "
                "checking that the model, features, batch size, seed and data are the same", where)
        return
    wanted = _plain(dict(wanted))
    shared = [k for k in wanted if k in recorded and (keys is None or k in keys)]
    diffs = [_difference(k, recorded[k], wanted[k]) for k in shared if recorded[k] != wanted[k]]
    if diffs:
        raise CheckpointMismatchError(f"cannot {'resume from' if keys is None else 'load'} {where}: it was trained "
                                      "with other settings: "
                                      + "; ".join(diffs)
                                      + " (resume with the checkpoint's settings, or start in a new work dir)")


def recorded_identity(root: str | os.PathLike) -> tuple[Path, dict[str, Any] | None] | None:  # JSON read back
    """The settings recorded by the newest checkpoint under ``root`` whose ``meta.json``
    matches its manifest (only that small file is read and checked, so that a resume is
    refused before any other work), with that checkpoint's path; None when ``root`` holds
    no such checkpoint (the resume itself then says why).

    Example:
        >>> import tempfile
        >>> recorded_identity(tempfile.mkdtemp()) is None
        True
    """
    for path in checkpoints(root):
        try:
            meta_path = resolve_inside(path, "meta.json", what="checkpoint meta")
            if verification_enabled():
                manifest = read_manifest(path, accept=(CHECKPOINT_DIGEST, "sha256"))
                entry = manifest["files"].get("meta.json")
                algorithm = manifest["algorithm"]
                if entry is None or file_digest(meta_path, algorithm) != entry[algorithm]:
                    continue
            meta = json.loads(read_small_file(meta_path, "checkpoint meta"))
        except (CheckpointError, ManifestError, OSError, ValueError):
            continue
        run = meta.get(RUN_KEY) if isinstance(meta, dict) else None
        return path, run if isinstance(run, dict) else None
    return None
