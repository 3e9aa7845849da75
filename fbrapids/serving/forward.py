"""Model forward passes over request-side and row-side inputs, without repeating the request.

Scoring one request against N items, the request-side inputs are the same for every row.
:func:`split_forward` computes them once and broadcasts:

* :class:`~fbrapids.trainers.models.WideAndDeep`: the request's wide terms and its share
  of the deep MLP's first layer (``W[:, request columns] @ x_request``) are computed once
  per request; the item side computes its own share once per row; the two are added
  (broadcast by the row's request index) and the rest of the MLP runs per row.  The
  embedding lookups of request features are over R request rows, not R x N.
* :class:`~fbrapids.trainers.models.DLRM`, :class:`~fbrapids.trainers.models.DeepFM`
  and :class:`~fbrapids.trainers.models.DIN`: every request-side bag (a query's tokens,
  interests) is looked up and pooled once per request, over R rows, and the pooled vector
  gathered by the row's request index; only the per-row arithmetic (bottom MLP, dot
  interactions, FM term, top MLP) runs per row.  DIN's behaviour sequence is looked up once
  per request too; its attention compares each candidate with each history entry, so that
  part is the row's work (counted as such by :mod:`fbrapids.serving.cost`), attended in
  groups of rows of at most :data:`ATTENTION_PAIRS` entries (:func:`attend`), so its memory
  is bounded whatever the slice holds.
* any other :class:`~fbrapids.trainers.models.base.CTRModel`: :func:`broadcast_batch`
  builds the full batch by gathering request rows by index (features are still computed
  once per request and per item; only the model's own arithmetic is repeated).

Both give the training-side ``model(batch)`` scores on the same rows (the tests check it).

Example:
    >>> import numpy as np
    >>> req = SideArrays(np.ones((1, 1), np.float32), {"u": (np.array([7]), np.array([0, 1]))})
    >>> rows = SideArrays(np.zeros((2, 1), np.float32), {"a": (np.array([1, 2]), np.array([0, 1, 2]))})
    >>> b = broadcast_batch(req, rows, np.array([0, 0]), dense=[("request", 0), ("item", 0)], sparse=["u", "a"])
    >>> b.dense.tolist(), b.sparse["u"][0].tolist()
    ([[1.0, 0.0], [1.0, 0.0]], [7, 7])
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Sequence, cast

import numpy as np
import torch

from fbrapids.trainers.batch import Batch, ragged_take
from fbrapids.trainers.models import DIN, DLRM, DeepFM, WideAndDeep
from fbrapids.trainers.modules import bag_segments, fm_second_order
from fbrapids.trainers.device import module_device
from fbrapids.trainers.models.base import CTRModel


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
    cols = [(req.dense[owner, j] if side == "request" else rows.dense[:, j]) for side, j in dense]
    d = np.stack(cols, axis=1).astype(np.float32) if cols else np.zeros((n, 0), dtype=np.float32)
    sp = {}
    for f in sparse:
        v, o = rows.sparse[f] if f in rows.sparse else ragged_take(*req.sparse[f], owner)
        sp[f] = (to_tensor(v), to_tensor(o[:-1]))
    return Batch(to_tensor(d), torch.zeros(n), sp)


def _pool(coll, looked, offsets: np.ndarray, dev: torch.device) -> torch.Tensor:
    return coll.pool(looked, to_tensor(offsets[:-1]).to(dev))


def _wide_deep(model: WideAndDeep, req: SideArrays, rows: SideArrays, owner: np.ndarray,
               dense: Sequence[tuple[str, int]], sparse: Sequence[str]) -> torch.Tensor:
    dev = module_device(model)
    own = to_tensor(owner).to(dev)
    side_sparse = {f: (req.sparse[f] if f not in rows.sparse else rows.sparse[f]) for f in model.sparse_features}
    is_req = {f: f not in rows.sparse for f in model.sparse_features}
    lookup_in = {f: (to_tensor(v).to(dev), to_tensor(o[:-1]).to(dev)) for f, (v, o) in side_sparse.items()}
    wl = model.wide.lookup(lookup_in)
    dl = model.deep_emb.lookup(lookup_in)
    xr, xi = to_tensor(req.dense).to(dev), to_tensor(rows.dense).to(dev)
    r_idx = [k for k, (s, _) in enumerate(dense) if s == "request"]
    i_idx = [k for k, (s, _) in enumerate(dense) if s != "request"]
    r_src = [j for s, j in dense if s == "request"]
    i_src = [j for s, j in dense if s != "request"]
    w = model.wide_dense.weight  # [1, d]
    wide_r = xr[:, r_src] @ w[:, r_idx].T  # [R, 1]
    wide_i = xi[:, i_src] @ w[:, i_idx].T + model.wide_dense.bias  # [N, 1]
    first = cast(torch.nn.Linear, model.deep[0])  # plain_mlp's first layer
    nd = len(dense)
    e_dim = model.deep_emb.dim
    r_cols, i_cols, r_parts, i_parts = list(r_idx), list(i_idx), [xr[:, r_src]], [xi[:, i_src]]
    for k, f in enumerate(model.sparse_features):
        cols = list(range(nd + k * e_dim, nd + (k + 1) * e_dim))
        wf = _pool(model.wide, wl[f], side_sparse[f][1], dev)
        ef = _pool(model.deep_emb, dl[f], side_sparse[f][1], dev)
        if is_req[f]:
            wide_r = wide_r + wf
            r_cols += cols
            r_parts.append(ef)
        else:
            wide_i = wide_i + wf
            i_cols += cols
            i_parts.append(ef)
    h_r = torch.cat(r_parts, dim=1) @ first.weight[:, r_cols].T  # once per request
    h_i = torch.cat(i_parts, dim=1) @ first.weight[:, i_cols].T + first.bias
    h = h_i + h_r.index_select(0, own)
    for layer in itertools.islice(model.deep, 1, None):  # not model.deep[1:]: a new Sequential per call
        h = layer(h)
    deep = h.squeeze(1)
    return (wide_i + wide_r.index_select(0, own)).squeeze(1) + deep


def _dense_rows(req: SideArrays, rows: SideArrays, owner: np.ndarray, dense: Sequence[tuple[str, int]],
                dev: torch.device) -> torch.Tensor:
    """The ``[N, d]`` dense model inputs (a few numbers per row: gathered, not split)."""
    cols = [(req.dense[owner, j] if side == "request" else rows.dense[:, j]) for side, j in dense]
    d = np.stack(cols, axis=1).astype(np.float32) if cols else np.zeros((len(owner), 0), dtype=np.float32)
    return to_tensor(d).to(dev)


def _pooled(coll, req: SideArrays, rows: SideArrays, own: torch.Tensor, dev: torch.device,
            skip: Sequence[str] = ()) -> tuple[dict[str, torch.Tensor], dict]:
    """Every feature of collection ``coll`` pooled over the N rows (``[N, dim]`` each), a
    request-side bag looked up and pooled over the R request rows and gathered by ``own``;
    and the lookups (feature -> (rows, index)), for the features in ``skip`` too (not pooled)."""
    side = {f: (rows.sparse[f] if f in rows.sparse else req.sparse[f]) for f in coll.features}
    looked = coll.lookup({f: (to_tensor(v).to(dev), to_tensor(o[:-1]).to(dev)) for f, (v, o) in side.items()})
    out = {}
    for f in coll.features:
        if f in skip:
            continue
        p = _pool(coll, looked[f], side[f][1], dev)
        out[f] = p if f in rows.sparse else p.index_select(0, own)
    return out, looked


def _dlrm(model: DLRM, req: SideArrays, rows: SideArrays, owner: np.ndarray, dense: Sequence[tuple[str, int]],
          dev: torch.device) -> torch.Tensor:
    own = to_tensor(owner).to(dev)
    x = model.bot_l(_dense_rows(req, rows, owner, dense, dev))
    pooled, _ = _pooled(model.emb_l, req, rows, own, dev)
    stack = torch.stack([pooled[f] for f in model.sparse_features], dim=1)
    if model.bias_vector is not None:
        stack = torch.cat([stack, model.bias_vector.expand(len(stack), 1, -1)], dim=1)
    return model.top_l[:-1](model.interaction(x, stack)).squeeze(1)


def _deepfm(model: DeepFM, req: SideArrays, rows: SideArrays, owner: np.ndarray, dense: Sequence[tuple[str, int]],
            dev: torch.device) -> torch.Tensor:
    own = to_tensor(owner).to(dev)
    x = _dense_rows(req, rows, owner, dense, dev)
    first_w, _ = _pooled(model.first, req, rows, own, dev)
    first = model.first_dense(x).squeeze(1) + sum(first_w[f].squeeze(1) for f in model.sparse_features)
    e, _ = _pooled(model.emb, req, rows, own, dev)
    fields = torch.stack([e[f] for f in model.sparse_features], dim=1)
    deep = model.deep(torch.cat([x, fields.flatten(1)], dim=1)).squeeze(1)
    return first + model.fm_scale * fm_second_order(fields) + deep


def _din(model: DIN, req: SideArrays, rows: SideArrays, owner: np.ndarray, dense: Sequence[tuple[str, int]],
         dev: torch.device) -> torch.Tensor:
    own = to_tensor(owner).to(dev)
    pooled, looked = _pooled(model.emb, req, rows, own, dev, skip=list(model.sequences))
    x = _dense_rows(req, rows, owner, dense, dev)
    parts = [x, *[pooled[f] for f in model.sparse_features]]
    for seq, target in model.sequences.items():
        table_rows, inv = looked[seq]
        if seq in rows.sparse:  # a row-side sequence: as the model's forward
            offsets = rows.sparse[seq][1]
            at = inv
        else:  # the request's history, looked up once, its entries gathered for each row of the request
            pos, offsets = ragged_take(np.arange(len(req.sparse[seq][0]), dtype=np.int64), req.sparse[seq][1], owner)
            at = inv.index_select(0, to_tensor(pos).to(inv.device))
        parts.append(attend(model.attention[seq], pooled[target], table_rows, at, offsets, dev))
    logit = model.mlp(torch.cat(parts, dim=1)).squeeze(1)
    if model.first is not None and model.first_dense is not None:  # the first-order part, as the model's forward
        first, _ = _pooled(model.first, req, rows, own, dev)
        logit = logit + model.first_dense(x).squeeze(1) + sum(first[f].squeeze(1) for f in model.sparse_features)
    return logit


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


#: each model class with a split forward: its function (None: Wide&Deep's own path), called with the model
_SPLIT: tuple[tuple[type, Callable[..., torch.Tensor] | None], ...] = (
    (WideAndDeep, None), (DLRM, _dlrm), (DeepFM, _deepfm), (DIN, _din))


def supports_split(model: CTRModel) -> bool:
    """Whether :func:`split_forward` computes the request side once for this model type.

    >>> from fbrapids.trainers.models import DLRM
    >>> supports_split(DLRM(1, ["a"], embedding_dim=2, bottom_mlp=[2], top_mlp=[2]))
    True
    """
    return any(type(model) is cls for cls, _ in _SPLIT)


@torch.no_grad()
def split_forward(model: CTRModel, req: SideArrays, rows: SideArrays, owner: np.ndarray,
                  dense: Sequence[tuple[str, int]], sparse: Sequence[str]) -> torch.Tensor:
    """Logits ``[N]`` of ``N`` rows whose request-side inputs are row ``owner[i]`` of ``req``.

    ``dense`` / ``sparse`` as in :func:`broadcast_batch`.
    """
    if type(model) is WideAndDeep:
        return _wide_deep(model, req, rows, owner, dense, sparse)
    split = next((f for cls, f in _SPLIT if type(model) is cls), None)
    if split is not None:
        return split(model, req, rows, owner, dense, module_device(model))
    return model(broadcast_batch(req, rows, owner, dense, sparse).to(module_device(model)))
