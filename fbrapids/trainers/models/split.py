"""A slice of serving's rows as two sides: what a model's split forward reads.

Scoring one request against N items, the request-side inputs are the same for every row.
A model's :meth:`~fbrapids.trainers.models.base.CTRModel.split_logits` computes them once
per request and broadcasts them by each row's request index (``owner``); this module holds
what those methods share: the sides' host arrays (:class:`SideArrays`), the full batch for
a model without a split forward (:func:`broadcast_batch`), the pooled bags of a collection
over the sides (:func:`pooled_sides`) and DIN's bounded attention (:func:`attend`).

Example:
    >>> req = SideArrays(np.ones((1, 1), np.float32), {"u": (np.array([7]), np.array([0, 1]))})
    >>> rows = SideArrays(np.zeros((2, 1), np.float32), {"a": (np.array([1, 2]), np.array([0, 1, 2]))})
    >>> b = broadcast_batch(req, rows, np.array([0, 0]), dense=[("request", 0), ("item", 0)], sparse=["u", "a"])
    >>> b.dense.tolist(), b.sparse["u"][0].tolist()
    ([[1.0, 0.0], [1.0, 0.0]], [7, 7])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from fbrapids.trainers.batch import Batch, ragged_take
from fbrapids.trainers.modules import TieredEmbeddingBagCollection, bag_segments


@dataclass
class SideArrays:
    """Host arrays of one side's model inputs over n rows: dense ``[n, k]`` float32 (this
    side's dense inputs, in model order) and sparse name -> ``(values int64, offsets [n+1])``."""

    dense: np.ndarray
    sparse: dict[str, tuple[np.ndarray, np.ndarray]]

    def __len__(self) -> int:
        return int(self.dense.shape[0])

    def take(self, idx: np.ndarray) -> "SideArrays":
        return SideArrays(self.dense[idx], {k: ragged_take(v, o, idx) for k, (v, o) in self.sparse.items()})

    @staticmethod
    def concat(parts: Sequence["SideArrays"]) -> "SideArrays":
        if len(parts) == 1:
            return parts[0]
        sp = {}
        for k in parts[0].sparse:
            vals = np.concatenate([p.sparse[k][0] for p in parts])
            lens = np.concatenate([np.diff(p.sparse[k][1]) for p in parts])
            off = np.zeros(len(lens) + 1, dtype=np.int64)
            np.cumsum(lens, out=off[1:])
            sp[k] = (vals, off)
        return SideArrays(np.concatenate([p.dense for p in parts]), sp)


def to_tensor(a: np.ndarray) -> torch.Tensor:
    """A torch tensor sharing ``a``'s memory (copied first when read-only or strided).

    >>> to_tensor(np.arange(3)).tolist()
    [0, 1, 2]
    """
    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.array(a, copy=True, order="C")
    return torch.from_numpy(a)


def broadcast_batch(req: SideArrays, rows: SideArrays, owner: np.ndarray, dense: Sequence[tuple[str, int]],
                    sparse: Sequence[str]) -> Batch:
    """The full ``[N]``-row batch: request inputs gathered by ``owner`` (each row's request).

    ``dense`` lists the model's dense inputs in order as ``(side, column in that side)``;
    sparse features are looked up in ``rows`` first, then in ``req``.
    """
    n = len(owner)
    sp = {}
    for f in sparse:
        v, o = rows.sparse[f] if f in rows.sparse else ragged_take(*req.sparse[f], owner)
        sp[f] = (to_tensor(v), to_tensor(o[:-1]))
    return Batch(to_tensor(_dense_array(req, rows, owner, dense)), torch.zeros(n), sp)


def _dense_array(req: SideArrays, rows: SideArrays, owner: np.ndarray, dense: Sequence[tuple[str, int]]) -> np.ndarray:
    cols = [(req.dense[owner, j] if side == "request" else rows.dense[:, j]) for side, j in dense]
    return np.stack(cols, axis=1).astype(np.float32) if cols else np.zeros((len(owner), 0), dtype=np.float32)


def dense_rows(req: SideArrays, rows: SideArrays, owner: np.ndarray, dense: Sequence[tuple[str, int]],
               dev: torch.device) -> torch.Tensor:
    """The ``[N, d]`` dense model inputs (a few numbers per row: gathered, not split)."""
    return to_tensor(_dense_array(req, rows, owner, dense)).to(dev)


def pool(coll: TieredEmbeddingBagCollection, looked: tuple[torch.Tensor, torch.Tensor], offsets: np.ndarray,
         dev: torch.device) -> torch.Tensor:
    """``coll``'s pooling of one feature's lookup ``looked`` over the bags of ``offsets`` (``[n + 1]``)."""
    return coll.pool(looked, to_tensor(offsets[:-1]).to(dev))


def pooled_sides(coll: TieredEmbeddingBagCollection, req: SideArrays, rows: SideArrays, own: torch.Tensor,
                 dev: torch.device, skip: Sequence[str] = ()
                 ) -> tuple[dict[str, torch.Tensor], dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """Every feature of collection ``coll`` pooled over the N rows (``[N, dim]`` each), a
    request-side bag looked up and pooled over the R request rows and gathered by ``own``;
    and the lookups (feature -> (rows, index)), for the features in ``skip`` too (not pooled)."""
    side = {f: (rows.sparse[f] if f in rows.sparse else req.sparse[f]) for f in coll.features}
    looked = coll.lookup({f: (to_tensor(v).to(dev), to_tensor(o[:-1]).to(dev)) for f, (v, o) in side.items()})
    out = {}
    for f in coll.features:
        if f in skip:
            continue
        p = pool(coll, looked[f], side[f][1], dev)
        out[f] = p if f in rows.sparse else p.index_select(0, own)
    return out, looked


#: (row, history entry) pairs DIN's attention holds at once while serving: its inputs and hidden
#: layer take a few hundred bytes per pair, so a slice of rows with long histories is attended
#: in groups of rows of at most this many entries (about 25 MiB), not all at once
ATTENTION_PAIRS = 1 << 15


def attend(attention: torch.nn.Module, query: torch.Tensor, table_rows: torch.Tensor, at: torch.Tensor,
           offsets: np.ndarray, dev: torch.device, budget: int = ATTENTION_PAIRS) -> torch.Tensor:
    """DIN's attention pooling of each row's ``query`` over its history (row ``i``'s entries
    are ``table_rows[at[offsets[i]:offsets[i + 1]]]``), in groups of rows of at most
    ``budget`` entries (a row longer than that alone): the peak memory is the budget's, not
    the slice's rows times their histories.  Each row's result is the one of attending all
    rows at once.

    Example:
        >>> from fbrapids.trainers.modules import AttentionPooling
        >>> att, rows = AttentionPooling(4), torch.randn(5, 4)
        >>> q, at, off = torch.randn(3, 4), torch.tensor([0, 1, 2, 3, 4, 1]), np.array([0, 2, 5, 6])
        >>> whole = attend(att, q, rows, at, off, torch.device("cpu"))
        >>> bool(torch.allclose(attend(att, q, rows, at, off, torch.device("cpu"), budget=2), whole, atol=1e-6))
        True
    """
    n = len(offsets) - 1
    starts: list[int] = [0]
    if int(offsets[-1]) > budget:
        while starts[-1] < n:  # rows [start, stop): as many as fit the budget, one at least
            s = starts[-1]
            starts.append(min(n, max(s + 1, int(np.searchsorted(offsets, offsets[s] + budget, side="right")) - 1)))
    else:
        starts.append(n)
    out = []
    for s, e in zip(starts[:-1], starts[1:]):
        a, b = int(offsets[s]), int(offsets[e])
        keys = table_rows.index_select(0, at[a:b]).to(dev)
        seg = bag_segments(to_tensor(offsets[s:e] - a).to(dev), b - a)
        out.append(attention(query[s:e], keys, seg))
    return out[0] if len(out) == 1 else torch.cat(out)
