"""Configuration of one tiered embedding table."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import fbrapids.trainers.sparse.tiers  # noqa: F401  (registers the built-in host tier, "ram")
from fbrapids.errors import ArgumentError
from fbrapids.trainers.sparse.optim import OPTIMIZERS, SparseOptimizer, sparse_optimizer
from fbrapids.trainers.sparse.policies import POLICIES
from fbrapids.trainers.sparse.tier import host_tier_class


@dataclass(frozen=True)
class StoreConfig:
    """How one embedding table is laid out over the tiers, initialised and optimised.

    Attributes:
        dim: embedding width.
        optimizer: ``"adagrad"`` (row-wise Adagrad, its accumulator is one extra float
            in each row) or ``"sgd"`` (see :mod:`fbrapids.trainers.sparse.optim`).
        lr: sparse learning rate.
        eps: Adagrad epsilon (``w -= lr * g / (sqrt(acc) + eps)``).
        initial_accumulator: Adagrad accumulator of a new row.
        weight_decay: L2 on the rows a batch looks up: ``weight_decay * w`` added to each
            looked-up row's gradient before the update (see :mod:`fbrapids.trainers.sparse.optim`).
        init_scale: new rows are uniform in ``[-init_scale, init_scale)``; ``None`` means
            ``1 / sqrt(dim)``.
        seed: with the id, fixes a new row's initial value (order-independent).
        cache_rows: rows in the top tier (device memory with a GPU; host RAM without).
        host_rows: rows in the host-RAM tier; ``None`` = unbounded (no SSD tier needed).
            A CPU store with ``host_rows=None`` keeps every row in one RAM tier: its cache
            grows as rows arrive (no copies between tiers), in place, from ``cache_rows``
            rows or 16,384 if fewer (:data:`~fbrapids.trainers.sparse.tiers.IN_PLACE_START`;
            past them, to ``cache_rows`` first).
        ssd_dir: directory of the SSD tier's files; needed when ``host_rows`` is bounded.
        host_tier: the kind of host tier: the :attr:`~fbrapids.trainers.sparse.tier.SlottedTier.kind`
            of a registered :class:`~fbrapids.trainers.sparse.tier.SlottedTier` (``"ram"``:
            :class:`~fbrapids.trainers.sparse.tiers.HostTier`, numpy rows).  A tier must not
            change values: any kind trains the same rows.
        eviction: ``"lru"``, ``"lfu"``, ``"lfu_full"`` or ``"lfu_window"`` (``lfu_full`` that
            keeps the rows of announced upcoming batches; see
            :mod:`fbrapids.trainers.sparse.policies`).
        admit_after: an id gets its own row after it was seen in this many batches;
            until then it reads the shared default row (zeros), whose gradient is dropped.
        evict_fraction: when a tier is full, evict at least this fraction of it at once,
            so the O(capacity) victim search runs rarely.
        device: torch device of the top tier (``None``: :func:`fbrapids.trainers.device.resolve_device`;
            a store owned by a module follows ``module.to(device)``).
        slices: the vectors a row holds, side by side (a trial's arms sharing one table: one
            lookup, one tier movement, one eviction decision for all of them): ``dim`` is their
            total width, each slice ``dim // slices`` wide, initialised as a table of that width
            would be (its seed from ``slice_seeds``), with optimizer state of its own (row-wise
            Adagrad: one accumulator per slice).
        slice_seeds: each slice's seed (default: ``seed`` for every slice).

    Example:
        >>> StoreConfig(dim=8, cache_rows=1000).with_(lr=0.1).lr
        0.1
    """

    dim: int = 16
    optimizer: str = "adagrad"
    lr: float = 0.05
    eps: float = 1e-8
    initial_accumulator: float = 0.0
    weight_decay: float = 0.0
    init_scale: float | None = None
    seed: int = 0
    cache_rows: int = 1 << 16
    host_rows: int | None = None
    ssd_dir: str | None = None
    host_tier: str = "ram"
    eviction: str = "lru"
    admit_after: int = 1
    evict_fraction: float = 1 / 8
    device: str | None = None
    slices: int = 1
    slice_seeds: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.slice_seeds is not None and not isinstance(self.slice_seeds, tuple):  # (a saved config's list)
            object.__setattr__(self, "slice_seeds", tuple(int(x) for x in self.slice_seeds))
        if self.slices < 1 or self.dim % self.slices:
            raise ArgumentError(f"StoreConfig: dim {self.dim} is not {self.slices} slices of one width")
        if self.slice_seeds is not None and len(self.slice_seeds) != self.slices:
            raise ArgumentError(f"StoreConfig: {len(self.slice_seeds)} slice_seeds for {self.slices} slices")
        if self.optimizer not in OPTIMIZERS:
            raise ArgumentError(f"StoreConfig.optimizer must be one of {sorted(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.eviction not in POLICIES:
            raise ArgumentError(f"StoreConfig.eviction must be one of {sorted(POLICIES)}, got {self.eviction!r}")
        if self.dim < 1 or self.cache_rows < 1:
            raise ArgumentError(f"StoreConfig needs dim >= 1 and cache_rows >= 1 (got {self.dim}, {self.cache_rows})")
        if self.host_rows is not None and self.ssd_dir is None:
            raise ArgumentError("StoreConfig: a bounded host tier (host_rows) needs an SSD tier (ssd_dir)")
        if not self.weight_decay >= 0.0:
            raise ArgumentError(f"StoreConfig.weight_decay must be >= 0, got {self.weight_decay!r}")
        host_tier_class(self.host_tier)  # an unknown kind: an ArgumentError naming the registered ones
        if self.admit_after < 1:
            raise ArgumentError(f"StoreConfig.admit_after must be >= 1, got {self.admit_after}")

    @property
    def width(self) -> int:
        """Floats per stored row: the embedding (every slice) plus the optimizer state (each slice's)."""
        return self.dim + OPTIMIZERS[self.optimizer].state_width * self.slices

    @property
    def slice_dim(self) -> int:
        """The width of one slice (``dim`` without slices)."""
        return self.dim // self.slices

    @property
    def seeds(self) -> tuple[int, ...]:
        """Each slice's seed."""
        return self.slice_seeds if self.slice_seeds is not None else (self.seed,) * self.slices

    @property
    def scale(self) -> float:
        """New rows' range: ``init_scale``, else ``1 / sqrt(width of a slice)``."""
        return float(self.init_scale) if self.init_scale is not None else float(self.slice_dim) ** -0.5

    def sparse_optimizer(self) -> SparseOptimizer:
        """The sparse optimizer these settings describe."""
        return sparse_optimizer(self.optimizer, self.dim, self.lr, self.eps, self.initial_accumulator, self.slices,
                                self.weight_decay)

    def with_(self, **changes: Any) -> "StoreConfig":
        """A copy with some fields changed."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)
