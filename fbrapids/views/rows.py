"""Row selections of pandas frames and arrays: ``frame.take(rows)`` and ``frame[mask]`` as
pandas computes them, with the costly columns taken faster.

* A variable-width Arrow column (strings, ``list<int64>`` token hashes) is taken by the
  host kernel of :func:`fbrapids.kernels.take_var_width`, which writes its output once;
  pyarrow's ``take`` regrows its buffers and costs several times more on fresh memory.
* The other columns are taken by pandas, one by one.  (Taking them in a second thread
  while the kernel ran did not pay on the 2-core benchmark box: the kernel already runs on
  both cores; merge with basic at 2M rows, load 2.7, 0.68 s with the thread, 0.60 s without.)
* A selection that keeps a contiguous range of rows is a slice (no copy), and one that
  keeps every row in order returns the frame's shallow copy, as pandas does.
* :func:`fill_null_strings` (clean's string fills) is the same kernel taking every row,
  a null replaced by the fill.

The result is ``frame.take(rows)``'s: the same index, columns, dtypes, values, nulls and
``attrs``.  A frame that is not pandas (cudf) is left to its own ``take``.

Example:
    >>> import pandas as pd, pyarrow as pa, numpy as np
    >>> df = pd.DataFrame({"a": [1, 2, 3], "t": pd.array([[1], [], [2, 3]], pd.ArrowDtype(pa.list_(pa.int64())))})
    >>> take_rows(df, np.array([2, 0])).equals(df.take([2, 0]))
    True
    >>> filter_rows(df, np.array([False, True, True]))["t"].tolist()
    [[], [2, 3]]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

import numpy as np
import pandas as pd
import pyarrow as pa

from fbrapids.kernels import fill_null_var_width, take_var_width, takes_type

if TYPE_CHECKING:
    from pandas.api.extensions import ExtensionArray

    from fbrapids.frames.backend import EagerFrame, EagerSeries

#: the rows of a frame to keep: a bool numpy array, or a bool series on the frame's index
Mask = Union[np.ndarray, "EagerSeries"]

#: below this many rows a selection is pandas' own (the kernel's setup costs more)
MIN_ROWS = 4096


def _arrow_values(array: ExtensionArray) -> pa.Array | pa.ChunkedArray | None:
    """The pyarrow array behind a pandas Arrow-backed array whose type the kernel takes; else None."""
    if not isinstance(getattr(array, "dtype", None), (pd.ArrowDtype, pd.StringDtype)):
        return None
    if getattr(array.dtype, "storage", "pyarrow") != "pyarrow" or not hasattr(array, "__arrow_array__"):
        return None
    values = array.__arrow_array__()
    return values if takes_type(values.type) else None


def take_array(array: ExtensionArray, rows: np.ndarray, fill: bool = False,
               bounds: tuple[int, int] | None = None) -> ExtensionArray:
    """``array.take(rows, allow_fill=fill)`` for a pandas array; with ``fill``, ``-1`` is a
    null.  Arrow strings and lists of fixed-width values go through the host kernel.
    ``bounds``: ``(rows.min(), rows.max())`` when known.

    Example:
        >>> import pandas as pd, numpy as np
        >>> take_array(pd.array(["x", None, "yz"], dtype="str"), np.array([2, -1, 0]), fill=True).tolist()
        ['yz', nan, 'x']
    """
    rows = np.asarray(rows, dtype=np.int64)
    values = _arrow_values(array) if len(rows) >= MIN_ROWS else None
    if values is not None and len(rows) and bounds is None:
        bounds = (int(rows.min()), int(rows.max()))
    if values is not None and (fill or len(rows) == 0 or (bounds is not None and bounds[0] >= 0)):
        taken = take_var_width(values, rows, bounds)
        if taken is not None:
            return array.dtype.__from_arrow__(taken)  # type: ignore[attr-defined]  # (an Arrow or string dtype here: _arrow_values) pandas-stubs 3.1 lists __from_arrow__ on DatetimeTZDtype only
    return array.take(rows, allow_fill=fill)


def fill_null_strings(values: pa.Array | pa.ChunkedArray, value: str) -> pa.Array | pa.ChunkedArray:
    """An Arrow string column's nulls filled with ``value``: ``pyarrow.compute.fill_null``'s
    result, written by the take kernel (every row, a miss filled) on a large column.

    Example:
        >>> import pyarrow as pa
        >>> fill_null_strings(pa.array([None, "b"], pa.large_string()), "a").to_pylist()
        ['a', 'b']
    """
    filled = fill_null_var_width(values, value.encode()) if len(values) >= MIN_ROWS else None
    if filled is None:
        import pyarrow.compute as pc

        filled = pc.fill_null(values, value)
    return filled


def _contiguous(rows: np.ndarray) -> bool:
    """Whether ``rows`` is ``start, start + 1, ..., stop - 1`` (checked from its ends first)."""
    return bool(len(rows)) and int(rows[-1]) - int(rows[0]) == len(rows) - 1 and bool((np.diff(rows) == 1).all())


def take_rows(frame: EagerFrame, rows: np.ndarray) -> EagerFrame:
    """``frame.take(rows)`` (``rows``: non-negative row positions).

    Example:
        >>> import pandas as pd, numpy as np
        >>> take_rows(pd.DataFrame({"s": ["a", "b", "c"]}, index=[7, 8, 9]), np.array([1, 2])).index.tolist()
        [8, 9]
    """
    rows = np.asarray(rows, dtype=np.int64)
    if not isinstance(frame, pd.DataFrame) or len(rows) < MIN_ROWS:
        return frame.take(rows)
    if _contiguous(rows) and int(rows[0]) >= 0:
        return frame.iloc[int(rows[0]): int(rows[-1]) + 1]
    arrays = [frame.iloc[:, i].array for i in range(frame.shape[1])]
    kernel = {i for i, a in enumerate(arrays) if _arrow_values(a) is not None}
    if not kernel:
        return frame.take(rows)
    index = frame.index.take(rows)  # raises for a row out of bounds, before any column is taken
    bounds = (int(rows.min()), int(rows.max())) if len(rows) else None
    out = [take_array(a, rows, bounds=bounds) if i in kernel else a.take(rows) for i, a in enumerate(arrays)]
    result = pd.DataFrame(dict(enumerate(out)), index=index, copy=False)
    result.columns = frame.columns
    return result.__finalize__(frame, method="take")  # type: ignore[operator]  # pandas-stubs 3.1 lists no NDFrame.__finalize__


def filter_rows(frame: EagerFrame, mask: Mask) -> EagerFrame:
    """``frame[mask]`` for a boolean mask (a numpy array, or a Series on ``frame``'s index); a
    pandas frame whose rows are all kept comes back without a copy (a shallow one: pandas'
    copy-on-write keeps the two apart).

    Example:
        >>> import pandas as pd, numpy as np
        >>> filter_rows(pd.DataFrame({"a": [1, 2, 3]}), np.array([True, False, True]))["a"].tolist()
        [1, 3]
    """
    keep = mask
    if isinstance(mask, pd.Series):
        if mask.index is not frame.index and not mask.index.equals(frame.index):
            return frame[mask]
        keep = mask.to_numpy()
    if (not isinstance(frame, pd.DataFrame) or not isinstance(keep, np.ndarray) or keep.dtype != bool
            or keep.ndim != 1 or len(keep) != len(frame)):
        return frame[mask]
    if keep.all():  # every row: the frame itself, not a copy of it (copy-on-write: a change to either is its own)
        return frame.copy(deep=False)
    if len(frame) < MIN_ROWS:
        return frame[mask]
    return take_rows(frame, np.flatnonzero(keep))
