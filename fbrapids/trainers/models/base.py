"""What every CTR model here shares: batches in, logits out, store-backed embeddings."""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import nn

from fbrapids.trainers.batch import Batch
from fbrapids.trainers.modules.embedding import TieredEmbeddingBagCollection
from fbrapids.trainers.sparse import TieredEmbeddingStore


class CTRModel(nn.Module):
    """Base class: ``forward(batch) -> logits [B]``, ``predict(batch) -> click probabilities``.

    The sparse parameters live in tiered stores inside
    :class:`TieredEmbeddingBagCollection` submodules, not in ``state_dict()``; ``fit``
    checkpoints them through :meth:`stores`.

    A model's ``__init__`` without a docstring of its own gets one pointing at its class's
    (``help(DLRM)`` shows the model's arguments, not torch's generic ``Module.__init__`` text).

    Example:
        >>> from fbrapids.trainers import DLRM
        >>> DLRM.__init__.__doc__
        'Build a DLRM: the arguments are described in the class docstring above (help(DLRM)).'
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not init.__doc__:
            init.__doc__ = (f"Build a {cls.__name__}: the arguments are described in the class docstring above "
                            f"(help({cls.__name__})).")

    def forward(self, batch: Batch) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def predict(self, batch: Batch) -> torch.Tensor:
        """Click probabilities ``[B]``."""
        return torch.sigmoid(self(batch))

    def collections(self) -> Iterator[tuple[str, TieredEmbeddingBagCollection]]:
        for name, m in self.named_modules():
            if isinstance(m, TieredEmbeddingBagCollection):
                yield name, m

    def stores(self) -> dict[str, TieredEmbeddingStore]:
        """Every table, keyed ``"<collection path>/<table>"``."""
        return {f"{cname or 'root'}/{t}": s for cname, c in self.collections() for t, s in c.stores.items()}

    def apply_sparse_gradients(self) -> None:
        """After ``backward()``: run the sparse optimizers and end the step of every table."""
        for _, c in self.collections():
            c.apply_gradients()

    def prefetch(self, batch: Batch) -> int:
        """Bring ``batch``'s rows into the caches and pin them for the next step."""
        return sum(c.prefetch(batch.sparse) for _, c in self.collections())

    def announce(self, batch: Batch, ahead: int) -> int:
        """Announce ``batch``, looked up ``ahead`` steps from now, to the tables whose eviction
        uses upcoming batches (``lfu_window``); returns the rows noted."""
        return sum(c.announce(batch.sparse, ahead) for _, c in self.collections())

    def uses_window(self) -> bool:
        """Whether any table's eviction uses announced upcoming batches."""
        return any(s.uses_window for s in self.stores().values())

    def sparse_stats(self) -> dict[str, dict]:
        return {k: s.stats() for k, s in self.stores().items()}

    @staticmethod
    def _dense(batch: Batch, device: torch.device) -> torch.Tensor:
        return batch.dense.to(device)

