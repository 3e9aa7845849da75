"""What a model reads, checked against what it is built with and what it is fed.

A model's inputs are its dense width (``dense_dim``), its sparse features and, for DIN, its
behaviour sequences.  :func:`check_constructor` refuses a wrong argument type when a model is
built (``sparse_features="slot"`` is not three features ``s``, ``l``, ``o``...);
:func:`check_model_stream` refuses, before the first step, a stream whose dense columns or
sparse features are not the model's (a feature the model lacks would be silently ignored;
a dense width mismatch fails deep inside torch); :func:`model_from_workload` builds a model
from a declared workload's features (:class:`~fbrapids.workloads.Workload`).

Example:
    >>> from fbrapids.trainers.models import DLRM
    >>> from fbrapids.trainers.sparse import StoreConfig
    >>> m = DLRM(2, ["ad"], embedding_dim=2, bottom_mlp=[4], top_mlp=[4], store=StoreConfig(cache_rows=8))
    >>> class S: dense, sparse = ["price"], ["ad"]
    >>> check_model_stream(m, S())
    Traceback (most recent call last):
    ...
    fbrapids.errors.ModelStreamError: the model (DLRM) reads 2 dense value(s) per row, the stream carries 1 (['price']); build the model from the same dense list (Model.from_workload, or dense_dim=len(dense))
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from fbrapids.errors import InputTypeError, ModelStreamError

if TYPE_CHECKING:  # (annotations only: the models import this module)
    from fbrapids.trainers.models.base import CTRModel, DeclaredInputs


def check_constructor(cls_name: str, arguments: Mapping[str, object]) -> None:
    """``dense_dim`` an int >= 0, ``sparse_features`` a list of names, ``sequences`` a
    mapping (of a model's constructor ``arguments``), else an
    :class:`~fbrapids.errors.InputTypeError` naming the argument."""
    dim = arguments.get("dense_dim")
    if "dense_dim" in arguments and (isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 0):
        raise InputTypeError(f"{cls_name}: dense_dim must be the number of dense features (an int >= 0), got {dim!r}"
                             + (" (give len() of the dense list)" if isinstance(dim, (list, tuple)) else ""))
    sparse = arguments.get("sparse_features")
    if "sparse_features" in arguments:
        if isinstance(sparse, str) or not isinstance(sparse, Iterable):
            raise InputTypeError(f"{cls_name}: sparse_features must be a list of feature names, got {sparse!r}"
                                 + (f" (write [{sparse!r}])" if isinstance(sparse, str) else ""))
        bad = [s for s in sparse if not isinstance(s, str)]
        if bad:
            raise InputTypeError(f"{cls_name}: sparse_features must hold names (str), got {bad[0]!r}")
    seqs = arguments.get("sequences")
    if "sequences" in arguments and not isinstance(seqs, Mapping):
        raise InputTypeError(f"{cls_name}: sequences must map each sequence feature to the sparse feature it "
                             f"attends with, got {seqs!r}")


def _stream_lists(batches: object) -> tuple[list[str], list[str]] | None:
    """The ``dense`` / ``sparse`` lists of a batch stream, through wrappers holding it as
    ``.batches`` (the pipeline's timers); None when it does not say."""
    seen = 0
    while batches is not None and seen < 8:
        dense, sparse = getattr(batches, "dense", None), getattr(batches, "sparse", None)
        if isinstance(dense, (list, tuple)) and isinstance(sparse, (list, tuple)):
            return list(dense), list(sparse)
        batches, seen = getattr(batches, "batches", None), seen + 1
    return None


def check_model_stream(model: Any, batches: object) -> None:  # any nn.Module: read by name
    """A :class:`~fbrapids.errors.ModelStreamError` naming the feature when ``batches``
    (a stream that declares its ``dense`` / ``sparse`` lists) does not feed ``model`` (a
    model built here, which records its ``dense_dim``): another dense width, a sparse
    feature or sequence the model reads and the stream lacks, or one the stream carries
    and the model has no table for."""
    lists = _stream_lists(batches)
    dim = getattr(model, "dense_dim", None)
    if lists is None or not hasattr(model, "sparse_features"):
        return
    dense, sparse = lists
    name = type(model).__name__
    if isinstance(dim, int) and dim != len(dense):
        raise ModelStreamError(f"the model ({name}) reads {dim} dense value(s) per row, the stream carries "
                               f"{len(dense)} ({dense}); build the model from the same dense list "
                               "(Model.from_workload, or dense_dim=len(dense))")
    wanted = model.sparse_inputs() if callable(getattr(model, "sparse_inputs", None)) else \
        list(model.sparse_features) + list(getattr(model, "sequences", {}) or {})
    for f in wanted:
        if f not in sparse:
            raise ModelStreamError(f"the model ({name}) reads sparse feature {f!r}, which the stream does not carry "
                                   f"(the stream's sparse: {sparse})")
    for f in sparse:
        if f not in wanted:
            raise ModelStreamError(f"the stream carries sparse feature {f!r}, which the model ({name}) has no table "
                                   f"for (it would be ignored); the model's: {wanted}")


def model_from_workload(cls: type[CTRModel], workload: DeclaredInputs[object], **kwargs: object) -> CTRModel:
    """``cls`` built over ``workload``'s features: ``dense_dim`` its dense list's length,
    ``sparse_features`` its sparse list, and for a model reading ``sequences`` (DIN) the
    workload's behaviour sequences (the model's
    :meth:`~fbrapids.trainers.models.base.CTRModel.workload_inputs`); ``kwargs``: the other
    constructor arguments."""
    dense, sparse, seqs, _ = cls.workload_inputs(workload)  # the model says which inputs it reads
    for given in ("dense_dim", "sparse_features", "sequences"):
        if given in kwargs:
            raise InputTypeError(f"{cls.__name__}.from_workload: {given} comes from the workload; leave it out")
    args: dict[str, object] = {"dense_dim": len(dense), "sparse_features": [f for f in sparse if f not in seqs]}
    if getattr(cls, "reads_sequences", False):
        args["sequences"] = seqs
    return cls(**args, **kwargs)
