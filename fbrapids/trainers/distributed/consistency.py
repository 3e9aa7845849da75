"""Start-up agreement of the ranks: a digest of what must be the same everywhere, compared
with one ``all_gather_object`` (a mismatch is an error naming the rank and the part, not a
hang), and SSD folders that must differ.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch
import torch.distributed as dist

from fbrapids.errors import DistributedError
from fbrapids.trainers.distributed.sharded_store import ssd_folders
from fbrapids.trainers.models.base import CTRModel

__all__ = ["config_digest", "check_same_config"]


def config_digest(model: CTRModel, **options: object) -> dict[str, str]:
    """What must agree across ranks, per part (each a short sha256): the dense layout
    (parameter names, shapes, dtypes), the tables and their settings (SSD folders, tier sizes
    and the host tier's kind excepted: per rank), and ``options``.

    Example:
        >>> from fbrapids.trainers.models import DLRM
        >>> from fbrapids.trainers.sparse import StoreConfig
        >>> m = DLRM(1, ["ad"], embedding_dim=2, bottom_mlp=[4], top_mlp=[4], store=StoreConfig(dim=2, cache_rows=8))
        >>> sorted(config_digest(m, epochs=1))
        ['dense', 'options', 'tables']
    """
    def h(obj: object) -> str:
        return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]

    dense = [(k, list(v.shape), str(v.dtype)) for k, v in model.state_dict().items() if torch.is_tensor(v)]
    tables = {}
    for key, store in model.stores().items():
        cfg = dict(store.config.to_dict())
        for per_rank in ("ssd_dir", "cache_rows", "host_rows", "host_tier", "device"):  # layout: never values
            cfg.pop(per_rank, None)
        tables[key] = cfg
    return {"dense": h(dense), "tables": h(tables), "options": h(options)}


def check_same_config(model: CTRModel, group: dist.ProcessGroup | None = None, **options: object) -> None:
    """Refuse, on every rank, a run whose ranks disagree on :func:`config_digest` or share
    an SSD folder (one ``all_gather_object`` at start-up)."""
    world = dist.get_world_size(group)
    mine = {"digest": config_digest(model, world=world, **options), "ssd": ssd_folders(model),
            "type": type(model).__name__}
    got: list[Any] = [None] * world
    dist.all_gather_object(got, mine, group=group)
    for r, other in enumerate(got):
        if other["type"] != got[0]["type"]:
            raise DistributedError(f"rank {r} trains a {other['type']}, rank 0 a {got[0]['type']}")
        diff = [k for k in got[0]["digest"] if other["digest"][k] != got[0]["digest"][k]]
        if diff:
            raise DistributedError(f"rank {r}'s configuration differs from rank 0's in: {', '.join(diff)} "
                                   f"(digests {[other['digest'][k] for k in diff]} vs "
                                   f"{[got[0]['digest'][k] for k in diff]}); every rank must build the same model "
                                   "and call with the same options")
    seen: dict[str, int] = {}
    for r, other in enumerate(got):
        for folder in other["ssd"]:
            if folder in seen and seen[folder] != r:
                raise DistributedError(f"ranks {seen[folder]} and {r} share the SSD folder {folder}; give each "
                                       "rank its own (fbrapids.trainers.distributed.rank_store_config)")
            seen[folder] = r
