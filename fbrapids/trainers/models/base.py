"""What every CTR model here shares: batches in, logits out, store-backed embeddings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, Iterator, Protocol, Sequence, TypeVar

import numpy as np
import torch
from torch import nn

from fbrapids.trainers.batch import Batch
from fbrapids.trainers.modules.embedding import TieredEmbeddingBagCollection
from fbrapids.trainers.modules.table import EmbeddingTable
from fbrapids.trainers.sparse import StoreConfig

if TYPE_CHECKING:
    from fbrapids.trainers.models.split import SideArrays


#: a declared workload's feature expression (:data:`fbrapids.ops.ExprLike`: that floor stands above this one)
FeatureT = TypeVar("FeatureT")


class DeclaredInputs(Protocol, Generic[FeatureT]):
    """A declared workload as a model reads it (:class:`fbrapids.workloads.Workload`: that
    floor stands above this one)."""

    def inputs(self, sequences: bool = False) -> tuple[list[str], list[str], dict[str, str], dict[str, FeatureT]]:
        """``(dense, sparse, sequences, features)`` of a model over the workload."""
        ...


class ModelRecipe(Protocol):
    """The training recipe as a model's pipeline arguments read it
    (:class:`fbrapids.workloads.recipe.Recipe`: that floor stands above this one)."""

    @property
    def dropout(self) -> float: ...

    @property
    def first_order(self) -> float: ...

    def store(self, base: StoreConfig) -> StoreConfig: ...

    def first_order_store(self, base: StoreConfig) -> StoreConfig: ...


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

    #: the pipeline's architecture: constructor arguments beyond the inputs, the store and the
    #: recipe (:func:`fbrapids.app.pipeline.model_arguments`; docs/models.md)
    default_architecture: ClassVar[dict[str, object]] = {}
    #: whether the model reads the workload's behaviour sequences (DIN: :meth:`workload_inputs`)
    reads_sequences: ClassVar[bool] = False
    #: the constructor argument of its first-order tables' store, which the recipe's
    #: ``first_order_lr`` sets (None: it has none)
    first_order_store_argument: ClassVar[str | None] = None
    #: whether it trains on several ranks (``fbrapids.app.demo_distributed``)
    trains_distributed: ClassVar[bool] = True
    #: whether the command line exports it for serving (``fbrapids export``)
    exportable: ClassVar[bool] = True
    #: its forward for a trial's arms at once, ``(models, dense [M, B, D], pooled {collection:
    #: [M, B, F, dim]}) -> logits [M, B]`` (:mod:`fbrapids.trainers.arms_batched`); None: the
    #: arms train one after another
    batched_logits: ClassVar[Callable[..., torch.Tensor] | None] = None

    def __init_subclass__(cls, **kwargs: object) -> None:
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
    def workload_inputs(cls, workload: DeclaredInputs[FeatureT]) -> tuple[list[str], list[str], dict[str, str],
                                                                          dict[str, FeatureT]]:
        """``(dense, sparse, sequences, features)`` this model trains on from a declared
        workload (:meth:`fbrapids.workloads.Workload.inputs`): with its behaviour sequences
        when the model reads them (:attr:`reads_sequences`)."""
        return workload.inputs(sequences=cls.reads_sequences)

    @classmethod
    def cpu_sources(cls) -> list[str]:
        """The C sources of the libraries its training loads on the CPU: the store's helpers
        for every model, and a model whose modules have a C pass of their own adds it.  The
        pipeline builds them ahead (:class:`fbrapids.kernels.compile_host.BuildAhead`) once
        its data is read and planned, so that a machine's first run compiles them beside the
        rest of its plan (the model, the preflight), not in its first training step.

        Example:
            >>> from fbrapids.trainers.models import DLRM, WideAndDeep
            >>> len(WideAndDeep.cpu_sources()), len(DLRM.cpu_sources())
            (1, 2)
        """
        from fbrapids.trainers.sparse.hashmap import source_text

        return [source_text()]

    @classmethod
    def pipeline_arguments(cls, common: dict[str, Any], store: StoreConfig, recipe: ModelRecipe | None = None,
                           sequences: dict[str, str] | None = None) -> dict[str, Any]:
        """The constructor arguments the pipeline builds this model with: ``common``
        (``dense_dim``, ``sparse_features``, ``embedding_dim``, ``store``, ``pooling``), the
        sequences split from the sparse features when it reads them, the ``recipe``'s
        (:class:`~fbrapids.workloads.recipe.Recipe`) stores and dropout, and
        :attr:`default_architecture`."""
        args = dict(common)
        if recipe is not None:
            args["store"] = recipe.store(store)
        if cls.reads_sequences:
            seqs = dict(sequences or {})
            args.update(sparse_features=[f for f in args["sparse_features"] if f not in seqs], sequences=seqs)
        if recipe is not None:
            args["dropout"] = recipe.dropout
            if cls.first_order_store_argument is not None:
                args[cls.first_order_store_argument] = recipe.first_order_store(store)
        return dict(args, **cls.default_architecture)

    @classmethod
    def from_workload(cls, workload: DeclaredInputs[object], **kwargs: object) -> "CTRModel":
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

    def split_logits(self, req: SideArrays, rows: SideArrays, owner: np.ndarray, dense: Sequence[tuple[str, int]],
                     sparse: Sequence[str]) -> torch.Tensor:
        """Serving's logits ``[N]`` of ``N`` rows whose request-side inputs are row ``owner[i]``
        of ``req`` (``dense``: the model's dense inputs in order as ``(side, column)``;
        ``sparse``: its sparse ones; :func:`fbrapids.trainers.models.split.broadcast_batch`).
        This one builds the full batch and runs :meth:`forward`; a model computing its request
        side once per request overrides it (:func:`has_split_forward`), giving the same scores."""
        from fbrapids.trainers.device import module_device
        from fbrapids.trainers.models.split import broadcast_batch

        return self(broadcast_batch(req, rows, owner, dense, sparse).to(module_device(self)))

    def zero_candidate_inputs(self, dense: Sequence[str], sparse: Sequence[str], new_dense: Sequence[str] = (),
                              new_sparse: Sequence[str] = ()) -> list[str] | None:
        """A trial's common start (:func:`fbrapids.trainers.arms.zero_candidate_inputs`): set to
        0, in place, every weight that reads only the candidates' inputs (``new_dense`` /
        ``new_sparse``, among the model's inputs ``dense`` / ``sparse`` in order), so that the
        model computes at step 0 what it computes without them; returns what was zeroed.  None:
        the model has no rule (its arms then start from different functions)."""
        return None

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

    def apply_sparse_gradients(self, background: bool = False) -> None:
        """After ``backward()``: run the sparse optimizers and end the step of every table
        (``background``: CPU caches' updates on the stores' background thread while the caller
        goes on, as :meth:`TieredEmbeddingBagCollection.apply_gradients` says)."""
        for _, c in self.collections():
            c.apply_gradients(background=background)

    def prefetch(self, batch: Batch) -> int:
        """Bring ``batch``'s rows into the caches and pin them for the next step."""
        return sum(c.prefetch(batch.sparse) for _, c in self.collections())

    def prepare(self, batch: Batch) -> None:
        """Find ``batch``'s rows in every table in the background while the current batch
        trains: the next step's lookups take them (``fit(prefetch_rows=True)``)."""
        for _, c in self.collections():
            c.prepare(batch.sparse)

    @property
    def prepares_two_deep(self) -> bool:
        """Whether every table's prepare may go two deep (the batch after next told before the
        next lookup: :attr:`TieredEmbeddingBagCollection.prepares_two_deep`)."""
        return all(c.prepares_two_deep for _, c in self.collections())

    def prepared_next(self) -> bool:
        """Whether every table has a prepare pending for its next lookup."""
        return all(c.prepared_next() for _, c in self.collections())

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


def _checked_init(name: str, init: Callable[..., None]) -> Callable[..., None]:
    """``init`` with its arguments' types checked first
    (:func:`fbrapids.trainers.model_inputs.check_constructor`) and the dense width recorded
    as ``dense_dim`` (``fit`` checks the stream against it)."""
    import functools
    import inspect

    from fbrapids.trainers.model_inputs import check_constructor

    sig = inspect.signature(init)

    @functools.wraps(init)
    def checked(self: CTRModel, *args: object, **kwargs: object) -> None:
        try:
            bound = sig.bind(self, *args, **kwargs).arguments
        except TypeError:
            bound = {}
        check_constructor(name, bound)
        init(self, *args, **kwargs)
        if "dense_dim" in bound and "dense_dim" not in self.__dict__:
            self.dense_dim = int(bound["dense_dim"])

    return checked


def has_split_forward(model: CTRModel) -> bool:
    """Whether ``model``'s :meth:`~CTRModel.split_logits` is its own, written with the
    ``forward`` it has: the class defining it is the one defining ``forward`` or a subclass
    of it (a subclass of DLRM with a forward of its own is not served by DLRM's split).

    Example:
        >>> from fbrapids.trainers.models import DLRM
        >>> class Doubled(DLRM):
        ...     def forward(self, batch): return 2 * super().forward(batch)
        >>> has_split_forward(DLRM(1, ["a"], embedding_dim=2)), has_split_forward(Doubled(1, ["a"], embedding_dim=2))
        (True, False)
    """
    return _own_with_forward(type(model), "split_logits")


def _own_with_forward(cls: type, method: str) -> bool:
    """Whether ``cls``'s ``method`` is defined below :class:`CTRModel` by the class defining
    its ``forward`` or a subclass of that one."""
    def owner(name: str) -> type:
        return next(c for c in cls.__mro__ if name in c.__dict__)

    defined = owner(method)
    return defined is not CTRModel and issubclass(defined, owner("forward"))


def batched_logits_of(cls: type) -> Callable[..., torch.Tensor] | None:
    """``cls``'s batched forward for a trial's arms (:attr:`CTRModel.batched_logits`), when it
    is written with the ``forward`` the class has; else None."""
    fn = getattr(cls, "batched_logits", None)
    return fn if fn is not None and _own_with_forward(cls, "batched_logits") else None
