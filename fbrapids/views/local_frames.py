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

if TYPE_CHECKING:  # cudf for the type checker only (absent without a GPU; mypy sees Any there)
    import cudf

#: a pandas or cudf DataFrame
LocalFrame: TypeAlias = Union[pd.DataFrame, "cudf.DataFrame"]
#: one column of a :data:`LocalFrame`
LocalSeries: TypeAlias = Union[pd.Series, "cudf.Series"]
