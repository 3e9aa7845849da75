"""The type name for a column type as a caller gives it (``read_view(dtype=...)``, a cast's
target): a name (``"int8"``, ``"Int64"``, ``"str"``, ``"category"``), a Python or numpy type
(``float``, ``np.int32``), a numpy dtype, or a pandas extension dtype (cudf's dtypes are
such too) -- pandas' own ``Dtype``, written out so the package does not import
``pandas._typing``.

Example:
    >>> import numpy as np, pandas as pd
    >>> from fbrapids.views.dtype_spec import DtypeSpec
    >>> specs: list[DtypeSpec] = ["int8", np.float32, np.dtype("uint16"), pd.Int64Dtype()]
    >>> [str(pd.api.types.pandas_dtype(s)) for s in specs]
    ['int8', 'float32', 'uint16', 'Int64']
"""

from __future__ import annotations

from typing import TypeAlias, Union

import numpy as np
from pandas.api.extensions import ExtensionDtype

from fbrapids.errors import InputTypeError

#: a column type as a caller names it (see the module doc)
DtypeSpec: TypeAlias = Union[str, type, np.dtype, ExtensionDtype]


def as_numpy(spec: DtypeSpec) -> np.dtype:
    """``spec`` as a numpy dtype; a pandas masked dtype (``Int8``) as the numpy dtype behind it.

    Raises:
        InputTypeError: ``spec`` is an extension dtype with no numpy dtype behind it (a
            ``TypeError``, as ``np.dtype``'s own).

    Example:
        >>> import pandas as pd
        >>> as_numpy(pd.Int8Dtype()), as_numpy("float32")
        (dtype('int8'), dtype('float32'))
    """
    held = getattr(spec, "numpy_dtype", spec)
    if isinstance(held, ExtensionDtype):
        raise InputTypeError(f"dtype {held} has no numpy dtype behind it")
    return np.dtype(held)


#: a dtype object, as a column's ``.dtype`` is one: numpy's or a pandas extension dtype
ColumnDtype: TypeAlias = Union[np.dtype, ExtensionDtype]
