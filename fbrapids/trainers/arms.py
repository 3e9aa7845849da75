"""Paired arms of a feature trial: a baseline and a candidate that start as the same function.

A trial's two arms are built as **one architecture**, the candidate's: the same class over
the same feature lists (baseline + candidates), constructed under the same seed, so every
parameter they share (each table, each layer) starts bit for bit equal, however many
candidate tables are added.  Then:

* :func:`zero_candidate_inputs` sets to 0 what reads the candidates' inputs (each model's own
  rule, :meth:`~fbrapids.trainers.models.base.CTRModel.zero_candidate_inputs`): the first-layer
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
from typing import Sequence

import torch

from fbrapids.trainers.batch import Batch

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


def zero_candidate_inputs(model: torch.nn.Module, dense: Sequence[str], sparse: Sequence[str],
                          new_dense: Sequence[str] = (), new_sparse: Sequence[str] = ()) -> list[str]:
    """Set to 0 every weight that reads only the candidates' inputs (see the module
    docstring), in place; returns what was zeroed, for the log.

    ``dense`` / ``sparse`` are the model's inputs in order (baseline + candidates);
    ``new_dense`` / ``new_sparse`` the candidates among them.  Each model knows its own
    weights (:meth:`~fbrapids.trainers.models.base.CTRModel.zero_candidate_inputs`); a model
    without a rule is left as built (logged): its arms then start from different functions,
    which costs power, not validity.
    """
    rule = getattr(model, "zero_candidate_inputs", None)
    done = rule(list(dense), list(sparse), list(new_dense), list(new_sparse)) if callable(rule) else None
    if done is None:
        log.warning("%s: no rule for its candidate inputs' weights; the arms start from different functions",
                    type(model).__name__)
        return []
    return done
