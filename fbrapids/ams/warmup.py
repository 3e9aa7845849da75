"""Partial warm-up: start a model from a previous one's weights, except its id embeddings.

"Image Matters" trains a new model from an old one's image sub-model, attention and MLP
weights while the id embeddings start again.  :func:`partial_warm_up` copies into a
freshly built model every dense weight of a previous model (a model, a state dict, a
``.pt`` file or a ``fit`` checkpoint directory) whose name and shape match, and leaves the
id embeddings re-initialised:

* tiered id tables (:class:`~fbrapids.trainers.modules.TieredEmbeddingBagCollection`)
  are not in ``state_dict``; a fresh model's tables are empty and every id gets a freshly
  initialised row on first sight.  A model whose tables already hold rows is refused (build
  a fresh one), so nothing trained survives by accident;
* ``nn.Embedding`` / ``nn.EmbeddingBag`` submodules are skipped and ``reset_parameters()``-ed;
* names starting with any of ``reinit`` are skipped and their modules reset too.

Example:
    >>> from torch import nn
    >>> old = nn.Sequential(nn.Embedding(5, 2), nn.Linear(2, 1))
    >>> new = nn.Sequential(nn.Embedding(5, 2), nn.Linear(2, 1))
    >>> rep = partial_warm_up(new, old)
    >>> rep.loaded, rep.reinitialised
    (['1.bias', '1.weight'], ['0.weight'])
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence, cast

import torch
from torch import nn

from fbrapids.errors import ArgumentError, MissingFileError
from fbrapids.trainers.checkpoint.model_state import load_tensors
from fbrapids.trainers.modules import TieredEmbeddingBagCollection


@dataclass
class WarmUpReport:
    """Which state entries were copied, re-initialised, or not copied (and why)."""

    loaded: list[str] = field(default_factory=list)
    reinitialised: list[str] = field(default_factory=list)
    not_loaded: dict[str, str] = field(default_factory=dict)
    fresh_tables: list[str] = field(default_factory=list)


def _source_state(source: Any) -> Mapping[str, torch.Tensor]:
    if isinstance(source, nn.Module):
        return source.state_dict()
    if isinstance(source, Mapping):
        return source.get("model", source) if "model" in source and isinstance(source["model"], Mapping) else source
    p = Path(os.fspath(source))
    if p.is_dir():
        if (p / "latest").exists():
            from fbrapids.trainers.checkpoint.directory import latest_checkpoint

            latest = latest_checkpoint(p)
            if latest is not None:  # (never None: the pointer exists)
                p = latest
        p = p / "dense.pt"
    if not p.exists():
        raise MissingFileError(f"partial_warm_up: no weights at {p}")
    state = load_tensors(p)
    return cast(Mapping[str, torch.Tensor], state["model"] if isinstance(state, Mapping) and "model" in state else state)


def partial_warm_up(model: nn.Module, source: Any, reinit: Sequence[str] = ()) -> WarmUpReport:
    """Copy ``source``'s weights into ``model`` except id embeddings (see the module docstring).

    Args:
        model: the new, freshly built model.
        source: a model, a state dict, a ``torch.save``-d file, or a ``fit`` checkpoint
            directory (its ``dense.pt``; a root with a ``latest`` pointer works too).
        reinit: extra state-dict name prefixes to leave re-initialised.

    Returns:
        A :class:`WarmUpReport`.

    Raises:
        ArgumentError: a tiered table of ``model`` already holds rows (a ``ValueError``).
    """
    state = _source_state(source)
    rep = WarmUpReport()
    id_prefixes = list(reinit)
    for name, m in model.named_modules():
        if isinstance(m, (nn.Embedding, nn.EmbeddingBag)):
            id_prefixes.append(f"{name}.")
        if isinstance(m, TieredEmbeddingBagCollection):
            for t, s in m.stores.items():
                if len(s):
                    raise ArgumentError(f"partial_warm_up: table {name}/{t} already holds {len(s)} rows; "
                                     "build a fresh model so that its id embeddings start re-initialised")
                rep.fresh_tables.append(f"{name}/{t}")
    own = model.state_dict()
    copy: dict[str, torch.Tensor] = {}
    for k in sorted(own):
        if any(k.startswith(p) for p in id_prefixes):
            rep.reinitialised.append(k)
        elif k not in state:
            rep.not_loaded[k] = "not in the source"
        elif tuple(state[k].shape) != tuple(own[k].shape):
            rep.not_loaded[k] = f"shape {tuple(state[k].shape)} in the source, {tuple(own[k].shape)} here"
        else:
            copy[k] = state[k]
            rep.loaded.append(k)
    model.load_state_dict(copy, strict=False)
    for name, m in model.named_modules():
        if name and hasattr(m, "reset_parameters") and any((name + ".").startswith(p) for p in id_prefixes):
            m.reset_parameters()
    return rep
