"""Dask tokens that tell pandas dtypes apart.

dask names a collection by a token of its inputs, and dask-expr reuses an expression it has
already built under the same name. dask 2026.8 tokenizes a masked pandas array (``Int8``,
``UInt64``, ``boolean``) through ``np.asarray`` and an Arrow-backed one (``str``,
``string[pyarrow]``) by its Arrow data, without the dtype. So ``dd.from_pandas`` of
``[1, <NA>]`` as ``Int8`` and then as ``UInt64`` gives one name, and the second frame
silently computes as the first, ``Int8`` included: a wrong dtype and, past ``Int8``'s range,
wrong values. fbrapids builds dask frames from eager ones (a join's eager side), so on
import of ``dask.dataframe`` it registers tokens that include the dtype. They only make
tokens more distinct; equal frames keep equal tokens.

Example:
    >>> import dask.dataframe as dd, pandas as pd
    >>> register()
    >>> a = dd.from_pandas(pd.DataFrame({"k": pd.array([1, None], dtype="Int8")}), npartitions=1)
    >>> b = dd.from_pandas(pd.DataFrame({"k": pd.array([1, None], dtype="UInt64")}), npartitions=1)
    >>> str(b.compute()["k"].dtype)
    'UInt64'
"""

from __future__ import annotations

from types import ModuleType

_registered = False


def register(_module: ModuleType | None = None) -> None:
    """Register the dtype-aware tokens (idempotent; the argument is the imported module)."""
    global _registered
    if _registered:
        return
    import pandas as pd
    from dask.base import normalize_token
    from pandas.core.arrays.masked import BaseMaskedArray

    normalize_token(pd.Series([1]))  # dask registers its pandas tokens lazily, on first use
    masked_token = normalize_token.dispatch(BaseMaskedArray)
    arrow_token = normalize_token.dispatch(pd.arrays.ArrowExtensionArray)

    @normalize_token.register(BaseMaskedArray)
    def _masked(arr: BaseMaskedArray) -> tuple:
        return (str(arr.dtype), masked_token(arr))

    @normalize_token.register(pd.arrays.ArrowExtensionArray)
    def _arrow(arr: pd.arrays.ArrowExtensionArray) -> tuple:
        return (repr(arr.dtype), arrow_token(arr))

    _registered = True
