"""What every CTR model here shares: batches in, logits out, store-backed embeddings."""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import nn

from fbrapids.trainers.batch import Batch
from fbrapids.trainers.modules.embedding import TieredEmbeddingBagCollection
from fbrapids.trainers.modules.table import EmbeddingTable


class CTRModel(nn.Module):
    """Base class: ``forward(batch) -> logits [B]``, ``predict(batch) -> click probabilities``.

    The sparse parameters live in tiered stores inside
    :class:`TieredEmbeddingBagCollection` submodules, not in ``state_dict()``; ``fit``
    checkpoints them through :meth:`stores`.

    ``predict`` applies the model's post-hoc calibration, the buffer ``calibration``
    ``[a, b]`` (``sigmoid(a * logit + b)``; the identity ``[1, 0]`` until ``fit`` sets it,
    :mod:`fbrapids.trainers.calibration`); it is in ``state_dict()``, so checkpoints and
    exports carry it, and a state dict without it (written before it existed) loads as
    the identity.

    Example (the calibration):
        >>> import torch
        >>> from fbrapids.trainers.models import DLRM
        >>> from fbrapids.trainers.sparse import StoreConfig
        >>> m = DLRM(1, ["ad"], embedding_dim=2, bottom_mlp=[4], top_mlp=[4], store=StoreConfig(cache_rows=8))
        >>> m.calibration.tolist(), m.calibrated(torch.tensor([2.0])).tolist()
        ([1.0, 0.0], [2.0])
        >>> m.set_calibration(0.5, -1.0); m.calibrated(torch.tensor([2.0])).tolist()
        [0.0]

    A model's ``__init__`` without a docstring of its own gets one pointing at its class's
    (``help(DLRM)`` shows the model's arguments, not torch's generic ``Module.__init__`` text).

    Example (the docstring):
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
        if init is not None:
            cls.__init__ = _checked_init(cls.__name__, init)  # type: ignore[method-assign]

    def sparse_inputs(self) -> list[str]:
        """The sparse features (behaviour sequences included) this model reads from a batch,
        by name: what ``fit`` checks the stream carries, no more and no fewer
        (:func:`fbrapids.trainers.model_inputs.check_model_stream`)."""
        return list(getattr(self, "sparse_features", [])) + list(getattr(self, "sequences", None) or {})

    @classmethod
    def from_workload(cls, workload: Any, **kwargs: Any) -> "CTRModel":
        """This model over a declared workload's features (the dense width, the sparse
        tables, DIN's sequences: :func:`fbrapids.trainers.model_inputs.model_from_workload`);
        ``kwargs``: the other constructor arguments.

        Example:
            >>> from fbrapids.trainers.models import DLRM
            >>> from fbrapids.trainers.sparse import StoreConfig
            >>> from fbrapids.workloads import Split, View, Workload
            >>> w = Workload([View("log", "l.csv")], "click", Split("fraction", fraction=0.2),
            ...              sparse=["ad", "user"], dense=["price", "age"])
            >>> m = DLRM.from_workload(w, embedding_dim=2, bottom_mlp=[4], top_mlp=[4], store=StoreConfig(cache_rows=8))
            >>> m.dense_dim, m.sparse_features
            (2, ['ad', 'user'])
        """
        from fbrapids.trainers.model_inputs import model_from_workload

        return model_from_workload(cls, workload, **kwargs)

    calibration: torch.Tensor  # a buffer (registered in __init__): ``[a, b]``

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calibration", torch.tensor([1.0, 0.0]))

    def forward(self, batch: Batch) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def calibrated(self, logits: torch.Tensor) -> torch.Tensor:
        """``a * logits + b``: the logits :meth:`predict` and serving turn into probabilities."""
        cal = getattr(self, "calibration", None)
        if cal is None:  # a subclass that never ran CTRModel.__init__
            return logits
        cal = cal.to(device=logits.device, dtype=logits.dtype)
        return logits * cal[0] + cal[1]

    def set_calibration(self, a: float, b: float) -> None:
        """Set the post-hoc calibration ``sigmoid(a * logit + b)`` (``(1, 0)``: none)."""
        self.calibration.copy_(torch.tensor([float(a), float(b)]))

    def predict(self, batch: Batch) -> torch.Tensor:
        """Click probabilities ``[B]``, calibrated, in float64: a calibration that shrinks the
        logits (a small ``a`` when the model has learned little) would otherwise round nearby
        predictions to one float32 value, and ties made by rounding move the AUC."""
        return torch.sigmoid(self.calibrated(self(batch).double()))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs) -> None:  # type: ignore[override]
        key = prefix + "calibration"
        if key not in state_dict and getattr(self, "calibration", None) is not None:  # saved before it existed
            state_dict[key] = torch.tensor([1.0, 0.0])
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def collections(self) -> Iterator[tuple[str, TieredEmbeddingBagCollection]]:
        """The model's embedding collections, by module path (found once: a step asks several
        times; setting a module on the model finds them again)."""
        found = self.__dict__.get("_collections_found")
        if found is None:
            found = [(name, m) for name, m in self.named_modules() if isinstance(m, TieredEmbeddingBagCollection)]
            self.__dict__["_collections_found"] = found
        return iter(found)

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, torch.nn.Module):
            self.__dict__.pop("_collections_found", None)
        super().__setattr__(name, value)

    def stores(self) -> dict[str, EmbeddingTable]:
        """Every table, keyed ``"<collection path>/<table>"``."""
        return {f"{cname or 'root'}/{t}": s for cname, c in self.collections() for t, s in c.stores.items()}

    def apply_sparse_gradients(self) -> None:
        """After ``backward()``: run the sparse optimizers and end the step of every table."""
        for _, c in self.collections():
            c.apply_gradients()

    def prefetch(self, batch: Batch) -> int:
        """Bring ``batch``'s rows into the caches and pin them for the next step."""
        return sum(c.prefetch(batch.sparse) for _, c in self.collections())

    def prepare(self, batch: Batch) -> None:
        """Find ``batch``'s rows in every table in the background while the current batch
        trains: the next step's lookups take them (``fit(prefetch_rows=True)``)."""
        for _, c in self.collections():
            c.prepare(batch.sparse)

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


def _checked_init(name: str, init: Any) -> Any:
    """``init`` with its arguments' types checked first
    (:func:`fbrapids.trainers.model_inputs.check_constructor`) and the dense width recorded
    as ``dense_dim`` (``fit`` checks the stream against it)."""
    import functools
    import inspect

    from fbrapids.trainers.model_inputs import check_constructor

    sig = inspect.signature(init)

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = sig.bind(self, *args, **kwargs).arguments
        except TypeError:
            bound = {}
        check_constructor(name, bound)
        init(self, *args, **kwargs)
        if "dense_dim" in bound and "dense_dim" not in self.__dict__:
            self.dense_dim = int(bound["dense_dim"])

    return checked
