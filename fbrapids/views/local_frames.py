"""Type names for one frame or column held in this process's memory: a pandas one (host)
or a cudf one (device), never a dask collection.

A dask frame is worked on partition by partition (``map_partitions``); each partition
arrives as one of these, and the modules that do the per-partition work (filters, row
selection, fills, joins of two partitions) take and give them.
:data:`fbrapids.frames.backend.FrameLike` is the wider name, with dask's frames in it.

Example:
    >>> import pandas as pd
    >>> from fbrapids.views.local_frames import LocalFrame
    >>> def width(frame: LocalFrame) -> int:
    ...     return frame.shape[1]
    >>> width(pd.DataFrame({"a": [1], "b": [2]}))
    2
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, Union

import pandas as pd

from fbrapids.frames.backend import is_dask

if TYPE_CHECKING:  # cudf for the type checker only (absent without a GPU; mypy sees Any there)
    import cudf
    from typing_extensions import TypeIs  # (typing's own from Python 3.13)

    from fbrapids.frames.backend import FrameLike

#: a pandas or cudf DataFrame
LocalFrame: TypeAlias = Union[pd.DataFrame, "cudf.DataFrame"]
#: one column of a :data:`LocalFrame`
LocalSeries: TypeAlias = Union[pd.Series, "cudf.Series"]


def is_local_frame(frame: FrameLike) -> TypeIs[LocalFrame]:
    """Whether ``frame`` is held in memory (pandas or cudf), not a dask collection: the
    complement of :func:`fbrapids.frames.backend.is_dask`, told to the type checker (a frame
    for which it is False is a dask one).

    Example:
        >>> import pandas as pd, dask.dataframe as dd
        >>> df = pd.DataFrame({"a": [1, 2]})
        >>> is_local_frame(df), is_local_frame(dd.from_pandas(df, npartitions=1))
        (True, False)
    """
    return not is_dask(frame)
