"""Configuration of one tiered embedding table."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from fbrapids.trainers.sparse.optim import OPTIMIZERS, SparseOptimizer, sparse_optimizer
from fbrapids.trainers.sparse.policies import POLICIES
from fbrapids.errors import ArgumentError


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
        ssd_dir: directory of the SSD tier's files; needed when ``host_rows`` is bounded.
        eviction: ``"lru"``, ``"lfu"``, ``"lfu_full"`` or ``"lfu_window"`` (``lfu_full`` that
            keeps the rows of announced upcoming batches; see
            :mod:`fbrapids.trainers.sparse.policies`).
        admit_after: an id gets its own row after it was seen in this many batches;
            until then it reads the shared default row (zeros), whose gradient is dropped.
        evict_fraction: when a tier is full, evict at least this fraction of it at once,
            so the O(capacity) victim search runs rarely.
        device: torch device of the top tier (``None``: :func:`fbrapids.trainers.device.resolve_device`;
            a store owned by a module follows ``module.to(device)``).

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
    eviction: str = "lru"
    admit_after: int = 1
    evict_fraction: float = 1 / 8
    device: str | None = None

    def __post_init__(self) -> None:
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
        if self.admit_after < 1:
            raise ArgumentError(f"StoreConfig.admit_after must be >= 1, got {self.admit_after}")

    @property
    def width(self) -> int:
        """Floats per stored row: the embedding plus the optimizer state."""
        return self.dim + OPTIMIZERS[self.optimizer].state_width

    @property
    def scale(self) -> float:
        return float(self.init_scale) if self.init_scale is not None else float(self.dim) ** -0.5

    def sparse_optimizer(self) -> SparseOptimizer:
        """The sparse optimizer these settings describe."""
        return sparse_optimizer(self.optimizer, self.dim, self.lr, self.eps, self.initial_accumulator,
                                self.weight_decay)

    def with_(self, **changes: Any) -> "StoreConfig":
        """A copy with some fields changed."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
