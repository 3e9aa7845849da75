"""A trial's arms' bags pooled from their shared stores in one C pass, and the backward.

A shared store (:class:`~fbrapids.trainers.arms_batched.SharedTables`) holds one slice per
member arm in each row.  :func:`arms_bags` pools every feature of every shared store of a
collection and writes each slice's bags straight into its arm's block ``[B, F, dim]``: the layout the arms' batched dense parts read, with no per-feature
``embedding_bag``, no stacking and no strided copy (the caller's blocks: a chunk of arms
at a time, temporaries small enough for the allocator to reuse rather than map afresh).
:func:`arms_bags_backward` writes the rows' gradient, each arm's bag gradients summed into its
slice, no sort, no gradient per feature and no zeroed buffer (a row's sums start from zero at
its first occurrence).  The arithmetic is :func:`~fbrapids.trainers.sparse.hashmap.bag_sum`'s
(``csrc/arms_bags.c``), so an arm's bags are the bits its model alone pools.

Example (two arms sharing a store of dim 2; one bag of rows 0 and 1, one of row 1):
    >>> rows = torch.tensor([[1.0, 2.0, 10.0, 20.0], [3.0, 4.0, 30.0, 40.0]])
    >>> e = BagEntry(rows, torch.tensor([0, 1, 1]), torch.tensor([0, 2]), feature=0, members=[0, 1])
    >>> out = torch.empty(2, 2, 1, 2)  # [arms, bags, features, dim]
    >>> arms_bags([e], list(out), mean=True)
    >>> out[0, :, 0].tolist(), out[1, :, 0].tolist()
    ([[2.0, 3.0], [3.0, 4.0]], [[20.0, 30.0], [30.0, 40.0]])
    >>> e.grad = torch.full_like(rows, float("nan"))  # written, not added into
    >>> arms_bags_backward([e], [torch.ones(2, 1, 2), None], mean=True)
    >>> e.grad.tolist()
    [[0.5, 0.5, 0.0, 0.0], [1.5, 1.5, 0.0, 0.0]]
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from fbrapids.errors import ArgumentError, RowIndexError
from fbrapids.trainers.sparse.hashmap import row_threads, store_library

#: int64 words per entry of the C descriptors (``csrc/arms_bags.c``, ``FBX_AB_*``)
ENTRY_WORDS = 12
#: the widest slice the C pass pools (``FBX_AB_MAXD``: a bag's sum is held in registers)
MAX_DIM = 256


@dataclass
class BagEntry:
    """One feature of one shared store: ``rows`` ``[n_rows, members * dim]`` (float32, CPU,
    rows contiguous), ``idx`` its ids' positions in ``rows``, ``offsets`` each bag's first id
    (``[B]``; the last bag ends at ``len(idx)``), ``feature`` its place in the collection,
    ``members`` the arm of each slice; ``grad`` the rows' gradient ``[n_rows, members * dim]``
    the backward writes (its contents are not read).

    With ``rowmap`` (int64, one per row of the batch), ``rows`` is the store's cache table
    instead, its slices the first ``table_width`` columns (the optimizer's state after them),
    and the batch's row ``r`` is read where it lies, ``rows[rowmap[r], :table_width]``: no
    copy of the batch's rows; ``rowmap[r] == -1``: the default row, zeros (an id never
    admitted, as a lookup gathers it).

    Example (the table's rows 3 and 0 as the batch's rows 0 and 1):
        >>> table = torch.arange(16, dtype=torch.float32).reshape(4, 4)  # 2 slices of 1, then 2 state columns
        >>> e = BagEntry(table, torch.tensor([0, 1]), torch.tensor([0]), 0, [0, 1], rowmap=np.array([3, 0]),
        ...              table_width=2)
        >>> out = torch.empty(2, 1, 1, 1)
        >>> arms_bags([e], list(out), mean=False)
        >>> out.flatten().tolist(), e.n_rows, e.width  # arm 0: 12 + 0, arm 1: 13 + 1
        ([12.0, 14.0], 2, 2)
    """

    rows: torch.Tensor
    idx: torch.Tensor
    offsets: torch.Tensor
    feature: int
    members: Sequence[int]
    grad: torch.Tensor | None = None
    rowmap: np.ndarray | None = None
    table_width: int = 0
    _members: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.idx = _int64(self.idx)
        self.offsets = _int64(self.offsets)
        self._members = np.ascontiguousarray(self.members, dtype=np.int64)
        if self.rows.dtype != torch.float32 or self.rows.device.type != "cpu" or self.rows.dim() != 2 \
                or self.rows.stride() != (self.rows.shape[1], 1):
            raise ArgumentError(f"arms_bags: rows must be contiguous float32 CPU rows, got {self.rows.dtype} "
                                f"{tuple(self.rows.shape)} on {self.rows.device}")
        if self.rowmap is not None:
            self.rowmap = np.ascontiguousarray(self.rowmap, dtype=np.int64)
            if not 0 < self.table_width <= self.rows.shape[1]:
                raise ArgumentError(f"arms_bags: a table's slices are 1 to {self.rows.shape[1]} columns of its rows, "
                                    f"got table_width={self.table_width}")

    @property
    def n_rows(self) -> int:
        """The batch's rows: those ``idx`` points into, and the gradient's."""
        return len(self.rowmap) if self.rowmap is not None else self.rows.shape[0]

    @property
    def width(self) -> int:
        """``members * dim``: the slices of a row (a cache table's row holds the optimizer's state after them)."""
        return self.rows.shape[1] if self.rowmap is None else self.table_width

    def words(self) -> list[int]:
        """The entry's C descriptor (``FBX_AB_*``)."""
        grad, shape = 0, (self.n_rows, self.width)
        if self.grad is not None:
            if tuple(self.grad.shape) != shape or not self.grad.is_contiguous() or self.grad.dtype != torch.float32:
                raise ArgumentError(f"arms_bags: the rows' gradient must be contiguous float32 {shape}, got "
                                    f"{tuple(self.grad.shape)}")
            grad = self.grad.data_ptr()
        rowmap = 0 if self.rowmap is None else self.rowmap.ctypes.data
        return [self.rows.data_ptr(), self.n_rows, self.width, self.idx.data_ptr(), len(self.idx),
                self.offsets.data_ptr(), self.feature, self._members.ctypes.data, grad, rowmap, self.rows.shape[1],
                self.rows.shape[0]]


def _int64(t: torch.Tensor) -> torch.Tensor:
    return t.to("cpu", torch.int64).contiguous()


@functools.lru_cache(maxsize=None)
def _arms_lib() -> ctypes.CDLL:
    lib = store_library()
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.fbx_arms_bags.restype = i64
    lib.fbx_arms_bags.argtypes = [p, i64, i64, i64, i64, i64, p, i64, i64, ctypes.c_int, ctypes.c_int]
    lib.fbx_arms_bags_backward.restype = i64
    lib.fbx_arms_bags_backward.argtypes = [p, i64, i64, i64, i64, i64, p, i64, i64, ctypes.c_int, ctypes.c_int]
    return lib


def _descriptors(entries: Sequence[BagEntry], nbags: int, what: str) -> np.ndarray:
    """The entries' C descriptors, each entry checked to hold one offset per bag."""
    for k, e in enumerate(entries):
        if len(e.offsets) != nbags:
            raise ArgumentError(f"{what}: entry {k} (feature {e.feature}) has {len(e.offsets)} bags' offsets, "
                                f"the arms' blocks {nbags} bags")
    return np.array([e.words() for e in entries], dtype=np.int64).reshape(len(entries), ENTRY_WORDS)


def _bad_entry(code: int, entries: Sequence[BagEntry], what: str) -> RowIndexError:
    e = entries[-code - 1]
    return RowIndexError(f"{what}: entry {-code - 1} (feature {e.feature}, arms {list(e.members)}): an index outside "
                         f"its {e.n_rows} rows (or a row outside its table), offsets out of order, or an arm or feature out of range")


def arms_bags(entries: Sequence[BagEntry], outs: Sequence[torch.Tensor | None], mean: bool) -> None:
    """Pool every arm's bags into ``outs[a]`` (``[B, F, dim]``, one layout for all; None: arm
    ``a``'s are not wanted): sum, or ``mean`` over each bag's size (an empty bag is 0); an
    arm's feature that no entry covers is 0."""
    given = _arm_blocks(outs, "arms_bags")
    if not given:
        return
    covered = {(a, e.feature) for e in entries for a in e.members}
    for a, out in enumerate(outs):
        for k in range(given[0].shape[1]):
            if out is not None and (a, k) not in covered:
                out[:, k].zero_()
    _run("arms_bags", entries, outs, given[0], mean)


def arms_bags_backward(entries: Sequence[BagEntry], grads: Sequence[torch.Tensor | None], mean: bool) -> None:
    """Write every entry's ``grad``: the rows' gradient, each arm's bag gradients ``grads[a]``
    (``[B, F, dim]``, one layout for all; None: no gradient reached arm ``a``, its slices 0)
    summed into its slice as :func:`arms_bags` pooled them; a row no bag reads is 0.  The
    entries of one store share its ``grad``; what it held before is not read."""
    if any(e.grad is None for e in entries):
        raise ArgumentError("arms_bags_backward: every entry needs the rows' gradient to write (grad)")
    given = _arm_blocks(grads, "arms_bags_backward")
    if given:
        _run("arms_bags_backward", entries, grads, given[0], mean)
    else:  # no gradient reached any arm
        for e in entries:
            assert e.grad is not None
            e.grad.zero_()


def _arm_blocks(blocks: Sequence[torch.Tensor | None], what: str) -> list[torch.Tensor]:
    """The arms' ``[B, F, dim]`` blocks given, checked to be of one shape and layout (float32,
    CPU, each row of dim contiguous)."""
    given = [g for g in blocks if g is not None]
    if not given:
        return []
    first = given[0]
    if first.dim() != 3 or first.stride()[2] != 1 or any(g.shape != first.shape or g.stride() != first.stride()
                                                          or g.dtype != torch.float32 or g.device.type != "cpu"
                                                          for g in given):
        raise ArgumentError(f"{what}: the arms' blocks must be float32 CPU [B, F, dim] of one shape and layout")
    if first.shape[2] > MAX_DIM:
        raise ArgumentError(f"{what}: slices of {first.shape[2]} columns, the C pass pools at most {MAX_DIM}")
    return given


def _run(what: str, entries: Sequence[BagEntry], blocks: Sequence[torch.Tensor | None], first: torch.Tensor,
         mean: bool) -> None:
    """The C pass ``fbx_<what>`` over ``entries`` and the arms' ``blocks`` (checked, ``first``
    one of them: their shape and layout); an entry it finds unsound is named."""
    b, f, dim = first.shape
    ptrs = np.array([0 if t is None else t.data_ptr() for t in blocks], dtype=np.int64)
    desc = _descriptors(entries, b, what)
    ret = getattr(_arms_lib(), f"fbx_{what}")(desc.ctypes.data, len(entries), b, f, dim, len(blocks), ptrs.ctypes.data,
                                            first.stride()[0], first.stride()[1], int(mean), row_threads())
    if ret:
        raise _bad_entry(int(ret), entries, what)
