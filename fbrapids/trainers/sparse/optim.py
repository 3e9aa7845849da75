"""The sparse optimizers: they update a table's rows (embedding, then optimizer state)
given one gradient row per unique id.

* :class:`SGD`: ``w -= lr * g``.
* :class:`RowWiseAdagrad`: ``acc += mean(g * g)``, ``w -= lr * g / (sqrt(acc) + eps)``; the
  accumulator is one extra float stored at the end of each row.  A row of ``slices`` vectors
  (a trial's arms sharing a table, :class:`~fbrapids.trainers.sparse.StoreConfig`) has one
  accumulator per slice, each slice updated as a row of its own.

With ``weight_decay`` (L2 on the looked-up rows) each row a batch looks up has
``weight_decay * w`` added to its gradient before the update (lazily: rows no batch looks up
are not decayed), as TorchRec's fused optimizers and fbgemm's TBE ``weight_decay`` do.

Each has two forms: :meth:`~SparseOptimizer.update` on full rows in a torch tensor (any
device), and :meth:`~SparseOptimizer.update_table_` in place on the rows of a CPU table by
slot, in C, with no gather or scatter (the CPU path; its row sums run in column order and
its sqrt is correctly rounded, so its bits may differ from torch's in the last place).  To add an optimizer, subclass
:class:`SparseOptimizer` (``state_width`` extra floats per row) and register it in
:data:`OPTIMIZERS`.

Example:
    >>> import torch
    >>> r = torch.tensor([[1.0, 0.0]])
    >>> _ = RowWiseAdagrad(dim=1, lr=0.5, eps=1e-8).update(r, torch.tensor([[2.0]]))
    >>> r.tolist()
    [[0.5, 4.0]]
    >>> two = torch.tensor([[1.0, 1.0, 0.0, 0.0]])  # two slices of width 1, then their accumulators
    >>> _ = RowWiseAdagrad(dim=2, lr=0.5, eps=1e-8, slices=2).update(two, torch.tensor([[2.0, 0.5]]))
    >>> two.tolist()
    [[0.5, 0.5, 4.0, 0.25]]
"""

from __future__ import annotations

import numpy as np
import torch

from fbrapids.errors import ArgumentError
from fbrapids.trainers.sparse.hashmap import rowwise_adagrad_, rowwise_adagrad_sliced_, sgd_


class SparseOptimizer:
    """Updates rows ``[n, dim + state_width]`` from gradients ``[n, dim]``."""

    name = ""
    state_width = 0

    def __init__(self, dim: int, lr: float, eps: float = 1e-8, initial_state: float = 0.0, slices: int = 1,
                 weight_decay: float = 0.0) -> None:
        self.dim, self.lr, self.eps, self.initial_state = int(dim), float(lr), float(eps), float(initial_state)
        self.slices = int(slices)
        self.weight_decay = float(weight_decay)

    def key(self) -> tuple:
        """Optimizers with equal keys may update several tables' rows in one call."""
        return (self.name, self.dim, self.lr, self.eps, self.slices, self.weight_decay)

    def decayed(self, weights: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """``grad + weight_decay * weights`` (``grad`` itself without weight decay).

        Example:
            >>> SGD(dim=1, lr=1.0, weight_decay=0.5).decayed(torch.tensor([[2.0]]), torch.tensor([[1.0]])).tolist()
            [[2.0]]
        """
        return grad + self.weight_decay * weights if self.weight_decay else grad

    def _decayed_table(self, table: np.ndarray, slots: np.ndarray, grad: torch.Tensor) -> np.ndarray:
        """:meth:`decayed` of ``table[slots]``'s weights (a CPU table), as a float32 array."""
        g = grad.detach().numpy()
        if not self.weight_decay:
            return g
        from fbrapids.trainers.sparse.hashmap import gather_cols

        return np.ascontiguousarray(g + np.float32(self.weight_decay) * gather_cols(table, slots, self.dim),
                                    dtype=np.float32)

    def init_state(self, rows: np.ndarray) -> None:
        """Set the optimizer state columns of new full rows."""
        if self.state_width:
            rows[:, self.dim :] = self.initial_state

    def update(self, rows: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """Update full rows in place; returns ``rows``."""
        raise NotImplementedError

    def update_table_(self, table: np.ndarray, slots: np.ndarray, grad: torch.Tensor,
                      dirty: np.ndarray | None = None) -> None:
        """Update ``table[slots]`` in place (a CPU float32 table; ``slots`` distinct), marking
        ``dirty[slots]`` (a bool array per table row) in the same pass when given."""
        raise NotImplementedError


class SGD(SparseOptimizer):
    name = "sgd"

    def update(self, rows: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        rows[:, : self.dim].sub_(self.decayed(rows[:, : self.dim], grad) * self.lr)
        return rows

    def update_table_(self, table: np.ndarray, slots: np.ndarray, grad: torch.Tensor,
                      dirty: np.ndarray | None = None) -> None:
        sgd_(table, slots, self._decayed_table(table, slots, grad), self.dim, self.lr, distinct=True, dirty=dirty)


class RowWiseAdagrad(SparseOptimizer):
    name = "adagrad"
    state_width = 1

    def update(self, rows: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        d, k = self.dim, self.slices
        grad = self.decayed(rows[:, :d], grad)
        if k == 1:
            acc = rows[:, d] + (grad * grad).mean(dim=1)
            rows[:, d] = acc
            rows[:, :d].sub_(grad * self.lr / (acc.double().sqrt().float() + self.eps).unsqueeze(1))
            return rows
        g = grad.reshape(len(grad), k, d // k)
        acc = rows[:, d:d + k] + (g * g).mean(dim=2)
        rows[:, d:d + k] = acc
        rows[:, :d].sub_((g * self.lr / (acc.double().sqrt().float() + self.eps).unsqueeze(2)).reshape(len(grad), d))
        return rows

    def update_table_(self, table: np.ndarray, slots: np.ndarray, grad: torch.Tensor,
                      dirty: np.ndarray | None = None) -> None:
        g = self._decayed_table(table, slots, grad)
        if self.slices == 1:
            rowwise_adagrad_(table, slots, g, self.dim, self.lr, self.eps, distinct=True, dirty=dirty)
            return
        rowwise_adagrad_sliced_(table, slots, g, self.dim // self.slices, self.slices, self.lr, self.eps,
                                distinct=True, dirty=dirty)


OPTIMIZERS: dict[str, type[SparseOptimizer]] = {"sgd": SGD, "adagrad": RowWiseAdagrad}


def sparse_optimizer(name: str, dim: int, lr: float, eps: float = 1e-8, initial_state: float = 0.0,
                     slices: int = 1, weight_decay: float = 0.0) -> SparseOptimizer:
    """The optimizer registered as ``name``.

    Example:
        >>> sparse_optimizer("adagrad", dim=4, lr=0.1).state_width
        1
    """
    try:
        cls = OPTIMIZERS[name]
    except KeyError:
        raise ArgumentError(f"unknown sparse optimizer {name!r}; registered: {', '.join(OPTIMIZERS)}") from None
    return cls(dim, lr, eps, initial_state, slices, weight_decay)
