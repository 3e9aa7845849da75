"""Paired arms of a feature trial: a baseline and a candidate that start as the same function.

A trial's two arms are built as **one architecture**, the candidate's: the same class over
the same feature lists (baseline + candidates), constructed under the same seed, so every
parameter they share (each table, each layer) starts bit for bit equal, however many
candidate tables are added.  Then:

* :func:`zero_candidate_inputs` sets to 0 what reads the candidates' inputs: the first-layer
  weight columns of candidate dense inputs and of candidate embeddings (DLRM: the top MLP's
  columns of every interaction involving a candidate field), the dense first-order weights
  of Wide&Deep / DeepFM / logistic regression (their per-id first-order tables already
  start at 0), DeepFM's candidate field embeddings (its FM interactions scale from 0), and
  the columns of DCN-v2's cross layers and top MLP that read a candidate's coordinates.
  Both arms therefore compute the same function at step 0.
* :func:`baseline_view` is what the baseline arm sees of a batch: candidate dense columns
  0, and a **placebo** in each candidate bag: one constant id per row.  The baseline arm
  thus has the candidate arm's capacity (a learned constant embedding in the candidate's
  slot: in DLRM its dot products with the other fields are new learned projections of
  them, which alone raise an undertrained model's AUC by ~0.003 at 50k rows) but none of
  its information: the arms differ in what the candidate *tells*, which is what a feature
  trial asks.  The candidate arm sees the full batch.

* :func:`shuffled_view` is what an **A/A arm** sees: the full batch with the candidates'
  values shuffled across its rows (each row's bag / dense value moved to another row, by a
  permutation drawn afresh for every batch).  The A/A arm has the candidate arm's
  architecture, start and inputs' distribution (the same ids, as often), but the link
  between a row's candidate value and its click is broken: its delta against the baseline
  is what the trial shows for a candidate that tells nothing, the A/A check.  (Within a
  batch only: a candidate constant over a whole batch keeps its batch-level information.)

Every arm reads the same batches in the same order (:mod:`fbrapids.trainers.side_by_side`):
the only difference between baseline and candidate is the candidates' information.

Example:
    >>> import torch
    >>> from fbrapids.trainers.batch import Batch
    >>> from fbrapids.trainers.models import DLRM
    >>> from fbrapids.trainers.sparse import StoreConfig
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> m = DLRM(2, ["ad", "new"], embedding_dim=4, bottom_mlp=[8], top_mlp=[8], store=StoreConfig(cache_rows=64))
    >>> zero_candidate_inputs(m, ["d0", "d1"], ["ad", "new"], new_dense=["d1"], new_sparse=["new"])
    ['bot_l.0.weight[:, [1]]', 'top_l.0.weight[:, [5, 6]]']
    >>> sp = {"ad": (torch.tensor([1, 2]), torch.arange(2)), "new": (torch.tensor([5, 6]), torch.arange(2))}
    >>> b = Batch(torch.randn(2, 2), torch.zeros(2), sp)
    >>> base = baseline_view(b, ["d0", "d1"], new_dense=["d1"], new_sparse=["new"])
    >>> base.sparse["new"][0].tolist(), base.dense[:, 1].abs().sum().item()
    ([0, 0], 0.0)
    >>> torch.equal(m(b), m(base))  # the candidate's inputs do not move the initial function
    True
    >>> g = torch.Generator().manual_seed(0)
    >>> aa = shuffled_view(b, ["d0", "d1"], new_dense=["d1"], new_sparse=["new"], generator=g)
    >>> sorted(aa.sparse["new"][0].tolist()), aa.sparse["ad"][0].tolist()
    ([5, 6], [1, 2])
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence

import torch

from fbrapids.errors import ArgumentError
from fbrapids.trainers.batch import Batch

if TYPE_CHECKING:
    from fbrapids.trainers.models import DCNv2
    from fbrapids.trainers.modules import TieredEmbeddingBagCollection

log = logging.getLogger(__name__)


#: the one id every row of a baseline arm's candidate bag holds (the placebo)
PLACEBO_ID = 0


def baseline_view(batch: Batch, dense: Sequence[str], new_dense: Sequence[str] = (),
                  new_sparse: Sequence[str] = ()) -> Batch:
    """``batch`` as the baseline arm sees it: the columns of ``new_dense`` (names among
    ``dense``, the batch's dense columns in order) set to 0, each bag of ``new_sparse``
    replaced by the placebo, the one id :data:`PLACEBO_ID` (see the module docstring)."""
    out = batch.dense
    cols = [list(dense).index(c) for c in new_dense]
    if cols:
        out = batch.dense.clone()
        out[:, cols] = 0
    sparse = dict(batch.sparse)
    for f in new_sparse:
        values, offsets = batch.sparse[f]
        sparse[f] = (torch.full_like(offsets, PLACEBO_ID), torch.arange(len(offsets), dtype=offsets.dtype,
                                                                         device=offsets.device))
    return Batch(out, batch.label, sparse, batch.group)


def _permute_bags(values: torch.Tensor, offsets: torch.Tensor, perm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The bags ``(values, offsets)`` with row ``i`` holding the bag of row ``perm[i]``."""
    lengths = torch.diff(offsets, append=offsets.new_tensor([len(values)]))
    new_len = lengths[perm]
    new_off = torch.cumsum(new_len, 0) - new_len
    within = torch.arange(int(new_len.sum()), dtype=offsets.dtype, device=offsets.device) - \
        torch.repeat_interleave(new_off, new_len)
    return values[torch.repeat_interleave(offsets[perm], new_len) + within], new_off


def shuffled_view(batch: Batch, dense: Sequence[str], new_dense: Sequence[str] = (),
                  new_sparse: Sequence[str] = (), generator: torch.Generator | None = None) -> Batch:
    """``batch`` as an A/A arm sees it: the columns of ``new_dense`` and the bags of
    ``new_sparse`` shuffled across the batch's rows by one permutation drawn from
    ``generator`` (see the module docstring); every other input as it is."""
    perm = torch.randperm(len(batch), generator=generator).to(batch.label.device)
    out = batch.dense
    cols = [list(dense).index(c) for c in new_dense]
    if cols:
        out = batch.dense.clone()
        out[:, cols] = batch.dense[perm][:, cols]
    sparse = dict(batch.sparse)
    for f in new_sparse:
        sparse[f] = _permute_bags(*batch.sparse[f], perm)
    return Batch(out, batch.label, sparse, batch.group)


def _zero_columns(layer: object, cols: list[int], name: str, done: list[str]) -> None:
    """Zero the weight columns ``cols`` of ``layer`` (a model's :class:`~torch.nn.Linear`, named ``name``)."""
    if cols:
        if not isinstance(layer, torch.nn.Linear):
            raise ArgumentError(f"{name}: expected a torch.nn.Linear, got {type(layer).__name__}")
        with torch.no_grad():
            layer.weight[:, cols] = 0
        done.append(f"{name}.weight[:, {cols}]")


def _first_linear(seq: torch.nn.Module) -> torch.nn.Linear:
    return next(m for m in seq.modules() if isinstance(m, torch.nn.Linear))


def zero_candidate_inputs(model: torch.nn.Module, dense: Sequence[str], sparse: Sequence[str],
                          new_dense: Sequence[str] = (), new_sparse: Sequence[str] = ()) -> list[str]:
    """Set to 0 every weight that reads only the candidates' inputs (see the module
    docstring), in place; returns what was zeroed, for the log.

    ``dense`` / ``sparse`` are the model's inputs in order (baseline + candidates);
    ``new_dense`` / ``new_sparse`` the candidates among them.  Models other than DLRM,
    WideAndDeep, DeepFM, DIN, DCN-v2 and LogisticRegression are left as built (logged): their arms
    then start from different functions, which costs power, not validity.
    """
    from fbrapids.trainers.models import DIN, DLRM, DCNv2, DeepFM, WideAndDeep

    dense, sparse = list(dense), list(sparse)
    dcols = [dense.index(c) for c in new_dense]
    done: list[str] = []
    if isinstance(model, DCNv2):
        _zero_dcn(model, dcols, new_sparse, done)
    elif isinstance(model, DLRM):
        _zero_columns(model.bot_l[0], dcols, "bot_l.0", done)
        fields = {1 + model.sparse_features.index(f) for f in new_sparse}  # field 0: the bottom MLP's output
        li, lj = model.interaction.li.tolist(), model.interaction.lj.tolist()
        width = model.ln_bot[-1]
        cols = [width + k for k, (i, j) in enumerate(zip(li, lj)) if i in fields or j in fields]
        _zero_columns(model.top_l[0], cols, "top_l.0", done)
    elif isinstance(model, (WideAndDeep, DeepFM)):
        lin, deep = (model.wide_dense, model.deep) if isinstance(model, WideAndDeep) else (model.first_dense, model.deep)
        _zero_columns(lin, dcols, "wide_dense" if isinstance(model, WideAndDeep) else "first_dense", done)
        dim = (model.deep_emb if isinstance(model, WideAndDeep) else model.emb).dim
        _zero_columns(_first_linear(deep), dcols + _blocks(len(dense), dim, model.sparse_features, new_sparse),
                      "deep.0", done)
        if isinstance(model, DeepFM):
            for f in new_sparse:
                _zero_table(model.emb, f)
                done.append(f"emb/{f} (FM field rows start at 0)")
    elif isinstance(model, DIN):
        dim = model.emb.dim
        blocks = _blocks(len(dense), dim, model.sparse_features + list(model.sequences), new_sparse)
        _zero_columns(_first_linear(model.mlp), dcols + blocks, "mlp.0", done)
        if getattr(model, "first_dense", None) is not None:  # its first-order part: per-id weights start at 0
            _zero_columns(model.first_dense, dcols, "first_dense", done)
    elif hasattr(model, "dense_linear"):  # logistic regression: per-id weights start at 0 already
        _zero_columns(model.dense_linear, dcols, "dense_linear", done)
    else:
        log.warning("%s: no rule for its candidate inputs' weights; the arms start from different functions",
                    type(model).__name__)
    return done


def _zero_dcn(model: DCNv2, dcols: list[int], new_sparse: Sequence[str], done: list[str]) -> None:
    """DCN-v2: the bottom MLP's candidate dense columns, and the candidate embeddings'
    columns of ``x_0`` wherever a layer reads them (each cross layer's ``W`` or ``U``, the top
    MLP's first layer; the parallel structure's head reads the cross network's output), so
    that they reach no other coordinate and no output."""
    if model.bottom is not None:
        _zero_columns(model.bottom[0], dcols, "bottom.0", done)
    offset = model.emb.dim if model.bottom is not None else 0
    cols = _blocks(offset, model.emb.dim, model.sparse_features, new_sparse)
    prefix = "w" if model.cross.low_rank is None else "u"
    for k, lin in enumerate(model.cross.readers()):
        _zero_columns(lin, cols, f"cross.{prefix}.{k}", done)
    _zero_columns(_first_linear(model.top), cols, "top.0", done)
    if model.head is not None:
        _zero_columns(model.head, cols, "head", done)


def _blocks(offset: int, dim: int, features: Sequence[str], new: Sequence[str]) -> list[int]:
    """Columns of the ``new`` features' embeddings in ``[dense..., emb(f) for f in features]``."""
    return [offset + k * dim + d for k, f in enumerate(features) if f in new for d in range(dim)]


def _zero_table(collection: TieredEmbeddingBagCollection, table: str) -> None:
    """Replace ``table``'s store by one whose new rows start at 0 (nothing is looked up yet)."""
    from fbrapids.trainers.sparse import TieredEmbeddingStore

    import gc

    old = collection.stores.pop(table)
    config, name, device = old.config.with_(init_scale=0.0), old.name, old.device
    del old
    gc.collect()  # its SSD directory (a weakly held registration) is free again
    collection.stores[table] = TieredEmbeddingStore(config, name=name, device=device)
