"""What the models' trial methods share: zeroing the weights that read a candidate's inputs
(:meth:`~fbrapids.trainers.models.base.CTRModel.zero_candidate_inputs`, the arms' common
start: :mod:`fbrapids.trainers.arms`), the arms' parameters held stacked while they train
side by side (:class:`StackedParameters`) and running the arms' MLPs stacked (a model's
``batched_logits``: :mod:`fbrapids.trainers.arms_batched`).

Example:
    >>> lin = torch.nn.Linear(3, 2); done = []
    >>> zero_columns(lin, [1], "head", done); done, lin.weight[:, 1].abs().sum().item()
    (['head.weight[:, [1]]'], 0.0)
    >>> embedding_blocks(1, 2, ["a", "b", "c"], ["b"])  # b's two columns after one dense and a's two
    [3, 4]
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Sequence

import torch

from fbrapids.errors import ArgumentError

if TYPE_CHECKING:
    from fbrapids.trainers.modules import TieredEmbeddingBagCollection


def zero_columns(layer: object, cols: list[int], name: str, done: list[str]) -> None:
    """Zero the weight columns ``cols`` of ``layer`` (a model's :class:`~torch.nn.Linear`, named
    ``name``) and note it in ``done``."""
    if cols:
        if not isinstance(layer, torch.nn.Linear):
            raise ArgumentError(f"{name}: expected a torch.nn.Linear, got {type(layer).__name__}")
        with torch.no_grad():
            layer.weight[:, cols] = 0
        done.append(f"{name}.weight[:, {cols}]")


def first_linear(seq: torch.nn.Module) -> torch.nn.Linear:
    """The first :class:`~torch.nn.Linear` of ``seq`` (an MLP)."""
    return next(m for m in seq.modules() if isinstance(m, torch.nn.Linear))


def embedding_blocks(offset: int, dim: int, features: Sequence[str], new: Sequence[str]) -> list[int]:
    """Columns of the ``new`` features' embeddings in ``[dense..., emb(f) for f in features]``."""
    return [offset + k * dim + d for k, f in enumerate(features) if f in new for d in range(dim)]


def zero_table(collection: TieredEmbeddingBagCollection, table: str) -> None:
    """Replace ``table``'s store in ``collection`` by one whose new rows start at 0 (nothing is
    looked up yet)."""
    from fbrapids.trainers.sparse import TieredEmbeddingStore

    old = collection.stores.pop(table)
    config, name, device = old.config.with_(init_scale=0.0), old.name, old.device
    del old
    gc.collect()  # its SSD directory (a weakly held registration) is free again
    collection.stores[table] = TieredEmbeddingStore(config, name=name, device=device)


#: the attribute of a model's parameter while a :class:`StackedParameters` holds it: (holder, stack, arm)
STACKED = "_fbx_stacked"


class StackedParameters:
    """The trainable parameters of M models of one architecture (a trial's arms), held
    stacked while they train side by side: for each parameter name one tensor ``[M, *shape]``
    (:attr:`stacks`), each model's parameter a view of its slice.  A batched head reads a
    chunk of arms' parameters as a slice of the stack (:func:`arms_tensor`: no copy per
    step, where ``torch.stack`` copied every arm's); each slice read with gradients on is a
    leaf of its own, and :meth:`gather_grads` sums their gradients into the stack's, so the
    optimizer steps a dozen stacks instead of M dozen tensors (Adam is elementwise: each
    arm's numbers are its own).  :meth:`release` gives each model its parameters' own
    storage back, as they stand.

    Example:
        >>> nets = [torch.nn.Linear(3, 2) for _ in range(4)]
        >>> held = StackedParameters(nets)
        >>> [tuple(s.shape) for s in held.stacks], nets[1].weight.data_ptr() == held.stacks[0][1].data_ptr()
        ([(4, 2, 3), (4, 2)], True)
        >>> w = arms_tensor([n.weight for n in nets[1:3]])  # arms 1 and 2: a slice, a leaf of its own
        >>> w.sum().backward(); held.gather_grads()
        >>> held.stacks[0].grad.sum(dim=(1, 2)).tolist()  # arms 0 and 3 not read: no gradient
        [0.0, 6.0, 6.0, 0.0]
        >>> held.release(); nets[1].weight.data_ptr() == held.stacks[0][1].data_ptr()
        False
    """

    def __init__(self, models: Sequence[torch.nn.Module]) -> None:
        named = [dict(m.named_parameters()) for m in models]
        self.m = len(models)
        self.stacks: list[torch.nn.Parameter] = []
        self._held: list[list[torch.nn.Parameter]] = []
        self._read: list[list[tuple[int, int, torch.Tensor]]] = []  # each stack's slices read since the last gather
        for name, first in named[0].items():
            if not first.requires_grad:
                continue
            params = [n[name] for n in named]
            if any(p.shape != first.shape or not p.requires_grad for p in params):
                raise ArgumentError(f"StackedParameters: parameter {name!r} differs between the models")
            stack = torch.nn.Parameter(torch.stack([p.detach() for p in params]))
            for k, p in enumerate(params):
                p.data = stack.data[k]
                setattr(p, STACKED, (self, len(self.stacks), k))
            self.stacks.append(stack)
            self._held.append(params)
            self._read.append([])

    def slice_of(self, params: Sequence[torch.Tensor]) -> torch.Tensor | None:
        """``params`` (one per arm) as a slice of their stack, when they are consecutive arms'
        of one stack held here (with gradients on: a leaf of its own, its gradient gathered
        by :meth:`gather_grads`); else None."""
        marks = [getattr(p, STACKED, None) for p in params]
        first = marks[0]
        if first is None or any(mk is None or mk[0] is not self or mk[1] != first[1] or mk[2] != first[2] + k
                                for k, mk in enumerate(marks)):
            return None
        s, a, b = first[1], first[2], first[2] + len(params)
        part = self.stacks[s].detach()
        part = part if (a, b) == (0, self.m) else part[a:b]
        if not torch.is_grad_enabled():
            return part
        part.requires_grad_()
        self._read[s].append((a, b, part))
        return part

    def gather_grads(self) -> None:
        """Each stack's gradient (``.grad``): the sum of the gradients of its slices read since
        the last call (0 for arms no slice reached; None where no slice got a gradient)."""
        for s, stack in enumerate(self.stacks):
            got = [(a, b, part.grad) for a, b, part in self._read[s] if part.grad is not None]
            self._read[s] = []
            if not got:
                stack.grad = None
                continue
            tiles = sorted(got, key=lambda t: t[0])  # (chunks run side by side read their slices in any order)
            ends = [b for _, b, _ in tiles]
            if [a for a, _, _ in tiles] == [0, *ends[:-1]] and ends[-1] == self.m:
                # the chunks' slices tile the stack once: their gradients joined (0 + g is g but for a
                # zero's sign, which no optimizer step reads)
                stack.grad = tiles[0][2] if len(tiles) == 1 else torch.cat([g for _, _, g in tiles])
                continue
            grad = torch.zeros_like(stack)
            for a, b, g in got:
                grad[a:b] += g
            stack.grad = grad

    def forget(self) -> None:
        """Drop the slices read since the last :meth:`gather_grads` (a step not applied)."""
        self._read = [[] for _ in self.stacks]

    def release(self) -> None:
        """Give every model its parameters' own storage back (their values as they stand)."""
        for params in self._held:
            for p in params:
                p.data = p.data.clone()
                delattr(p, STACKED)
        self._held, self._read = [], [[] for _ in self.stacks]


def arms_tensor(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """The arms' parameters ``params`` (one each, one shape) as one ``[M, *shape]`` tensor: a
    slice of their stack where a :class:`StackedParameters` holds them, in arm order; else
    ``torch.stack`` of them (a copy, its gradient flowing back to each).

    Example:
        >>> a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.zeros(2))
        >>> arms_tensor([a, b]).tolist()
        [[1.0, 1.0], [0.0, 0.0]]
    """
    mark = getattr(params[0], STACKED, None)
    if mark is not None:
        part = mark[0].slice_of(params)
        if part is not None:
            return part
    return torch.stack(list(params))


def stacked_mlp(layers: Sequence[torch.nn.Sequential], x: torch.Tensor, input_grad_by_column: bool = False
                ) -> torch.Tensor:
    """The arms' MLPs (one ``Sequential`` of Linear / ReLU / Sigmoid each, same shapes) on
    ``x`` ``[M, B, in]``: each Linear as one ``baddbmm`` over the arms' stacked weights
    (:func:`arms_tensor`).  ``input_grad_by_column``: ``x``'s gradient comes back laid out
    ``[M, in, B]`` (:func:`~fbrapids.trainers.modules.arms_linear.arms_linear`), for a producer
    of ``x`` that reads it so faster.

    Example:
        >>> from fbrapids.trainers.modules import mlp
        >>> nets = [mlp([3, 4, 2]) for _ in range(2)]
        >>> x = torch.randn(2, 5, 3)
        >>> torch.allclose(stacked_mlp(nets, x), torch.stack([n(x[k]) for k, n in enumerate(nets)]), atol=1e-6)
        True
    """
    from fbrapids.trainers.modules.arms_linear import arms_linear, stacked_linear

    ours = False  # whether x is a Linear's output here (its backward does not keep it): ReLU in place
    for k, parts in enumerate(zip(*layers)):
        first = parts[0]
        if isinstance(first, torch.nn.Linear):
            w = arms_tensor([p.weight for p in parts])
            bias = arms_tensor([p.bias for p in parts]).unsqueeze(1) if first.bias is not None else None
            x = (arms_linear if k == 0 and input_grad_by_column else stacked_linear)(x, w, bias)
            ours = True
            continue
        if isinstance(first, torch.nn.ReLU):
            x = torch.relu_(x) if ours else torch.relu(x)
        elif isinstance(first, torch.nn.Sigmoid):
            x = torch.sigmoid(x)
        else:
            raise ArgumentError(f"stacked_mlp: no batched form of {type(first).__name__}")
        ours = False
    return x


def stacked_linear_term(layers: Sequence[torch.nn.Linear], dense: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Wide&Deep's and DeepFM's first-order part for every arm (:func:`~fbrapids.trainers.models.wide_deep.linear_term`):
    the arms' linear maps of the dense features plus their per-id weights ``[M, B, F, 1]``
    summed over the features: ``[M, B]``."""
    return stacked_mlp([torch.nn.Sequential(lin) for lin in layers], dense).squeeze(2) + weights.sum(dim=2).squeeze(2)
