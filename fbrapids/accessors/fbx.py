"""The ``.fbx`` accessor: FeatureBox verbs as dataframe methods.

Registered through each library's own extension API, the way xarray registers its
accessors: ``pandas.api.extensions``, ``dask.dataframe.extensions`` and, when importable,
``cudf.api.extensions`` (dask-cudf frames are dask frames, so the dask registration
covers them).  Each method is a thin delegate to the module that owns the verb, so
``view.fbx.clean(...).fbx.join(...).fbx.extract(...)`` chains.

Example:
    >>> import pandas as pd, fbrapids
    >>> df = pd.DataFrame({"a": [1, None, 3]})
    >>> df.fbx.clean(fill={"a": 0})["a"].tolist()
    [1.0, 0.0, 3.0]
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Required, TypedDict, Unpack

from fbrapids.errors import InputTypeError
from fbrapids.frames import dask_tokens
from fbrapids.frames.import_hooks import when_imported

if TYPE_CHECKING:  # (annotations only: no import at run time)
    import torch

    from fbrapids.features.fitted import Fitted
    from fbrapids.frames.backend import FrameLike
    from fbrapids.kernels import Expr
    from fbrapids.trainers.stream import BatchStream
    from fbrapids.views.clean import CleanReport, WhereArg


class JoinOptions(TypedDict, total=False):
    """The keyword arguments ``.fbx.join`` passes on to :func:`fbrapids.joins.strategies.join`."""

    validate: str | None
    suffixes: tuple[str, str]
    broadcast: bool | None
    device_budget: int | None
    fraction: float


class StreamOptions(TypedDict, total=False):
    """The keyword arguments ``.fbx.stream`` passes on to :func:`fbrapids.trainers.stream.stream`."""

    label: Required[str]
    dense: Sequence[str]
    sparse: Sequence[str]
    batch_size: int
    shuffle_buffer: int
    seed: int
    prefetch: int
    device: str | torch.device | None
    group: str | None
    nan: str
    drop_last: bool
    pin_memory: bool | None
    persist: bool
    label_range: tuple[float, float] | None
    ranges: Mapping[str, tuple[float, float]] | None
    strict: bool
    shuffle_window: int | None
    shuffle_bytes: int


class FbxAccessor:
    """``df.fbx``: clean, join, extract, explain and stream on any supported frame."""

    def __init__(self, obj: FrameLike) -> None:
        self._obj = obj

    # -- views -----------------------------------------------------------------
    def clean(self, fill: dict | None = None, json: dict | None = None, where: WhereArg = None, *,
              drop: Sequence[str] = ()) -> FrameLike:
        """Fill nulls, pull fields out of JSON strings, and filter rows.

        See :func:`fbrapids.views.clean.clean`.

        Example:
            >>> import pandas as pd, fbrapids
            >>> df = pd.DataFrame({"ctx": ['{"a": {"b": "x"}}', "{bad"]})
            >>> df.fbx.clean(json={"ctx": {"ab": "a.b"}}, fill={"ab": ""})["ab"].tolist()
            ['x', '']
        """
        from fbrapids.views.clean import clean

        return clean(self._obj, fill=fill, json=json, where=where, drop=drop)

    @property
    def clean_report(self) -> CleanReport:
        """Counts of what the last ``clean`` defaulted (nulls filled, malformed JSON, ...).

        For dask frames the counts are computed on first access.
        """
        from fbrapids.views.clean import clean_report

        return clean_report(self._obj)

    # -- joins -----------------------------------------------------------------
    def join(self, other: FrameLike, on: str | list[str], how: str = "left", **kwargs: Unpack[JoinOptions]) -> FrameLike:
        """Hash join with ``other`` on ``on``; see :func:`fbrapids.joins.strategies.join`.

        Example:
            >>> import pandas as pd, fbrapids
            >>> a = pd.DataFrame({"k": [1, 2], "x": [10, 20]})
            >>> b = pd.DataFrame({"k": [2], "y": [7]})
            >>> a.fbx.join(b, on="k", how="inner")[["k", "x", "y"]].values.tolist()
            [[2, 20, 7]]
        """
        from fbrapids.joins.strategies import join

        return join(self._obj, other, on=on, how=how, **kwargs)

    # -- features --------------------------------------------------------------
    def extract(self, fitted: Fitted | None = None, /, *, training: bool = False, allow_unfitted: bool = False,
                progress: bool | None = None, **features: Expr | str) -> FrameLike:
        """Add the named feature columns, computed by layered meta-kernels.

        ``fitted`` (from :meth:`fit`) applies frozen fitted states and never refits;
        ``training=True`` only on the frame it was fitted on (out-of-fold target
        encodings).  A fitted operator passed without a state is a ``NotFittedError``
        unless ``allow_unfitted=True``.  ``progress``: a bar over a large pandas frame's
        rows (None: from 2^21 rows on; True / False: always / never); for a dask frame,
        ``with fbrapids.progress(): out.compute()``.  See :func:`fbrapids.features.extract`.

        Example:
            >>> import pandas as pd, fbrapids
            >>> from fbrapids import ops
            >>> train = pd.DataFrame({"u": [1, 1, 2], "ts": [0, 1, 2]})
            >>> f = train.fbx.fit(n=ops.count_encode("u"), h=ops.hour("ts"))
            >>> pd.DataFrame({"u": [2, 5], "ts": [3600, 0]}).fbx.extract(f)[["n", "h"]].values.tolist()
            [[1, 1], [0, 0]]
        """
        from fbrapids.features import extract

        if fitted is not None:
            if features:
                raise InputTypeError("extract: pass either a fitted object or features, not both")
            return extract(self._obj, fitted, training=training, allow_unfitted=allow_unfitted, progress=progress)
        return extract(self._obj, features, training=training, allow_unfitted=allow_unfitted, progress=progress)

    def fit(self, time_column: str | None = "ts", **features: Expr | str) -> Fitted:
        """Fit every fitted operator of ``features`` over this frame in one pass; returns a
        :class:`~fbrapids.features.Fitted` to pass to ``extract`` on any frame.

        See :func:`fbrapids.features.fit`.
        """
        from fbrapids.features import fit

        return fit(self._obj, features, time_column=time_column)

    def explain(self, source: bool = False, **features: Expr | str) -> str:
        """The layers, operators and placements ``extract(**features)`` would run.

        See :func:`fbrapids.features.explain`.
        """
        from fbrapids.features import explain

        return explain(self._obj, features, source=source)

    # -- training --------------------------------------------------------------
    def stream(self, **kwargs: Unpack[StreamOptions]) -> BatchStream:
        """Batches for torch; see :func:`fbrapids.trainers.stream.stream`."""
        from fbrapids.trainers.stream import stream

        return stream(self._obj, **kwargs)


_registered = False


def register_accessors() -> None:
    """Register ``.fbx`` on pandas, dask, cudf and dask-cudf frames when those libraries are
    imported (now, or later by anyone: :func:`fbrapids.frames.import_hooks.when_imported`), so
    ``import fbrapids`` itself loads none of them.

    Idempotent; called on ``import fbrapids``.
    """
    global _registered
    if _registered:
        return
    when_imported("pandas", _register_pandas)
    when_imported("dask.dataframe", _register_dask)
    when_imported("dask.dataframe", dask_tokens.register)
    when_imported("cudf", _register_cudf)
    when_imported("dask_cudf", _register_dask_cudf)
    _registered = True


def _register_pandas(pd: ModuleType) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "registration ... is overriding ..."
        pd.api.extensions.register_dataframe_accessor("fbx")(FbxAccessor)


def _register_dask(dd: ModuleType) -> None:
    from dask.dataframe.extensions import register_dataframe_accessor as dask_register

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dask_register("fbx")(FbxAccessor)


def _register_cudf(cudf: ModuleType) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        cudf.api.extensions.register_dataframe_accessor("fbx")(FbxAccessor)


def _register_dask_cudf(dask_cudf: ModuleType) -> None:
    frame_cls = getattr(dask_cudf, "DataFrame", None)
    if frame_cls is not None and not hasattr(frame_cls, "fbx"):
        frame_cls.fbx = _CachedAccessor("fbx", FbxAccessor)


class _CachedAccessor:
    """Descriptor used only where a library has no accessor API of its own."""

    def __init__(self, name: str, accessor: type[FbxAccessor]) -> None:
        self._name, self._accessor = name, accessor

    def __get__(self, obj: FrameLike | None, cls: type) -> FbxAccessor | type[FbxAccessor]:
        if obj is None:
            return self._accessor
        return self._accessor(obj)
