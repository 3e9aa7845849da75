"""Host columns: the Arrow buffers a kernel reads and writes, and their trip to and from pandas.

A :class:`HostColumn` holds numpy views of a column's Arrow buffers (no copies for
Arrow-backed pandas columns: pandas 3 ``str`` columns are ``large_string``, whose int64
offsets and bytes are used in place).  The kernel reads them through the pointer list
from :meth:`HostColumn.pointers`, in the slot order of :func:`fbrapids.kernels.abi.input_slots`
(offsets are int64, n + 1 of them; list values int64).

Validity is an Arrow bitmap (LSB first) or a null pointer when the column has no nulls.
Narrow offsets (Arrow ``string`` / ``list`` with int32 offsets) are widened to int64 once.

Example:
    >>> import pandas as pd
    >>> c = from_series(pd.Series(["a", None, "bc"]), "s")
    >>> c.type, c.n, c.offsets.tolist(), c.null_count()
    ('str', 3, [0, 1, 1, 3], 1)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from fbrapids.errors import ColumnTypeError
from fbrapids.kernels import types as T
from fbrapids.kernels.abi import input_slots

_EMPTY8 = np.zeros(8, dtype=np.uint8)
_STR_DTYPE = pd.StringDtype("pyarrow", na_value=np.nan)


@dataclass
class HostColumn:
    """One column as numpy views of Arrow buffers (see the module doc for the layout)."""

    type: str
    n: int
    valid: np.ndarray | None = None
    data: np.ndarray | None = None
    offsets: np.ndarray | None = None
    str_offsets: np.ndarray | None = None
    bytes: np.ndarray | None = None
    keep: list[object] = field(default_factory=list)
    valid_bit: int = 0  #: bit index of row 0 in ``valid`` (always 0 here: bitmaps are realigned)
    #: of an Arrow dictionary / categorical column: its codes (a null row has the code
    #: ``dict_values.n - 1``, a null value of its own) and values, which the dictionary path
    #: takes as they come (see :mod:`fbrapids.kernels.dictionary`)
    dict_codes: np.ndarray | None = None
    dict_values: "HostColumn | None" = None

    def pointers(self) -> list[int]:
        """Buffer addresses (and the validity bit offset) in the kernel's slot order."""
        out = []
        for name in input_slots(self.type):
            if name == "valid_bit":
                out.append(int(self.valid_bit))
            else:
                a = getattr(self, name)
                out.append(0 if a is None else a.ctypes.data)
        return out

    def values(self) -> np.ndarray:
        """``data``, the values of a fixed-width column (which always has them)."""
        if self.data is None:
            raise ColumnTypeError(f"a {self.type} column without its values buffer")
        return self.data

    def dictionary(self) -> tuple[np.ndarray, HostColumn] | None:
        """``(dict_codes, dict_values)`` of an Arrow dictionary / categorical column; None for any other."""
        if self.dict_codes is None or self.dict_values is None:
            return None
        return self.dict_codes, self.dict_values

    def nbytes(self) -> int:
        """Bytes held by the column's buffers."""
        return sum(a.nbytes for a in (self.valid, self.data, self.offsets, self.str_offsets, self.bytes)
                   if a is not None)

    def null_count(self) -> int:
        if self.valid is None:
            return 0
        bits = np.unpackbits(self.valid, bitorder="little", count=self.n)
        return int(self.n - bits.sum())

    def validity_bool(self) -> np.ndarray:
        """A bool array, True where the row holds a value."""
        if self.valid is None:
            return np.ones(self.n, dtype=bool)
        return np.unpackbits(self.valid, bitorder="little", count=self.n).astype(bool)


def pack_validity(valid_bytes: np.ndarray) -> np.ndarray | None:
    """An Arrow bitmap from one byte per row (nonzero = valid), or None when all are valid."""
    if valid_bytes.size == 0 or valid_bytes.all():
        return None
    return np.packbits(valid_bytes.astype(bool, copy=False), bitorder="little")


def _np(buf: pa.Buffer | None, dtype: npt.DTypeLike) -> np.ndarray:
    if buf is None or buf.size == 0:
        return _EMPTY8.view(dtype)[:0] if np.dtype(dtype).itemsize <= 8 else np.zeros(0, dtype)
    return np.frombuffer(buf, dtype=dtype)


def _validity(arr: pa.Array) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    buf = arr.buffers()[0]
    if arr.offset % 8 == 0 and buf is not None:
        return _np(buf, np.uint8)[arr.offset // 8:]
    return np.packbits(arr.is_valid().to_numpy(zero_copy_only=False), bitorder="little")


def _offsets(arr: pa.Array) -> np.ndarray:
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_list(arr.type)
    off = _np(arr.buffers()[1], np.int64 if large else np.int32)[arr.offset: arr.offset + len(arr) + 1]
    if len(off) == 0:
        return np.zeros(1, dtype=np.int64)
    return off if large else off.astype(np.int64)


def _bytes(arr: pa.Array) -> np.ndarray:
    b = arr.buffers()[2]
    return _np(b, np.uint8) if b is not None and b.size else np.zeros(1, dtype=np.uint8)


def object_array(values: pd.Series | Sequence[object]) -> pa.Array:
    """The Arrow array of an object column's values (a series or a list).  Python ints past
    int64 (ids up to 2^64 - 1) become uint64: pyarrow infers int64 and overflows on them.
    Raises what pyarrow raises when no type holds them all (2^64 - 1 beside -5, say).

    Example:
        >>> object_array([2**64 - 1, 5, None]).type
        DataType(uint64)
    """
    try:
        return pa.array(values, from_pandas=True)
    except OverflowError:
        return pa.array(values, type=pa.uint64(), from_pandas=True)


def dictionary_codes(arr: pa.DictionaryArray) -> tuple[np.ndarray, pa.Array] | None:
    """The codes (a null row gets the code ``len(dictionary)``) and values (the dictionary,
    plus a null when a row is null) of an Arrow dictionary array; None when its dictionary
    is empty.

    Example:
        >>> codes, values = dictionary_codes(pa.array(["x", None, "y", "x"]).dictionary_encode())
        >>> codes.tolist(), values.to_pylist()
        ([0, 2, 1, 0], ['x', 'y', None])
    """
    if not len(arr.dictionary):
        return None
    values = arr.dictionary
    if arr.null_count:
        codes = np.asarray(arr.indices.fill_null(len(values)), dtype=np.int64)
        values = pa.concat_arrays([values, pa.nulls(1, values.type)])
    else:
        codes = np.asarray(arr.indices, dtype=np.int64)
    return codes, values


def from_arrow(arr: pa.Array | pa.ChunkedArray, name: str) -> HostColumn:
    """A HostColumn over an Arrow array's buffers (zero-copy where the layout allows)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if pa.types.is_dictionary(arr.type):
        coded = dictionary_codes(arr)
        # no categories (an all-null categorical): a null string column, as its schema says
        arr = arr.dictionary_decode() if len(arr.dictionary) else pa.nulls(len(arr), pa.large_string())
        col = from_arrow(arr, name)
        if coded is not None:
            col.dict_codes, col.dict_values = coded[0], from_arrow(coded[1], name)
        return col
    if pa.types.is_null(arr.type):  # an all-null (or empty) object column: null strings
        arr = pa.nulls(len(arr), pa.large_string())
    tname = T.from_arrow(arr.type)
    if tname is None:
        raise ColumnTypeError(f"column {name!r} has Arrow type {arr.type}, which the kernels cannot read")
    n = len(arr)
    valid = _validity(arr)
    if tname in T.FIXED_TYPES:
        if tname == "bool":
            data = arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)
        else:
            data = _np(arr.buffers()[1], T.NUMPY_DTYPE[tname])[arr.offset: arr.offset + n]
        return HostColumn(tname, n, valid=valid, data=data, keep=[arr])
    if tname == "str":
        return HostColumn(tname, n, valid=valid, offsets=_offsets(arr), bytes=_bytes(arr), keep=[arr])
    offsets = _offsets(arr)
    child = arr.values
    if child.null_count:
        raise ColumnTypeError(f"column {name!r}: list elements may not be null ({child.null_count} are)")
    if tname == "list<str>":
        return HostColumn(tname, n, valid=valid, offsets=offsets, str_offsets=_offsets(child),
                          bytes=_bytes(child), keep=[arr, child])
    want = pa.uint64() if tname == "list<u64>" else pa.int64()
    if child.type != want:
        child = child.cast(want)
    values = _np(child.buffers()[1], np.int64)[child.offset: child.offset + len(child)]
    if len(values) == 0:
        values = np.zeros(1, dtype=np.int64)
    return HostColumn(tname, n, valid=valid, offsets=offsets, data=values, keep=[arr, child])


def from_series(s: pd.Series, name: str | None = None) -> HostColumn:
    """A HostColumn over a pandas series (numpy, masked or Arrow-backed) or a cudf series.

    Float NaN counts as null, as everywhere in pandas.  Nullable ints (pandas ``Int64``,
    ``int64[pyarrow]``, cudf ints with nulls) are read as ints with a validity bitmap.

    Example:
        >>> c = from_series(pd.Series([2**60 + 1, None], dtype="Int64"))
        >>> c.type, int(c.data[0]) == 2**60 + 1, c.validity_bool().tolist()
        ('i64', True, [True, False])
    """
    name = name if name is not None else str(s.name)
    if type(s).__module__.split(".")[0] == "cudf":
        # through Arrow, never ``to_pandas()``: that turns an int column with nulls into
        # float64 (bits above 2^53 lost); Arrow keeps the ints and their validity bitmap
        return from_arrow(s.to_arrow(), name)
    dtype = s.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "biuf":
        data = s.to_numpy()
        if dtype.kind == "b":
            return HostColumn("bool", len(s), data=data.view(np.uint8), keep=[data])
        tname = T.from_arrow(pa.from_numpy_dtype(dtype))
        if tname is None:
            raise ColumnTypeError(f"column {name!r} has dtype {dtype}, which the kernels cannot read")
        valid = None
        if dtype.kind == "f":
            nan = np.isnan(data)
            valid = pack_validity(~nan) if nan.any() else None
        return HostColumn(tname, len(s), valid=valid, data=np.ascontiguousarray(data), keep=[data])
    arr = s.array
    if hasattr(arr, "_mask") and hasattr(arr, "_data"):  # pandas masked arrays (Int64, Float64, boolean)
        data, mask = arr._data, arr._mask  # noqa: SLF001 - the documented layout of masked arrays
        tname = T.from_arrow(pa.from_numpy_dtype(data.dtype))
        if tname is None:
            raise ColumnTypeError(f"column {name!r} has dtype {dtype}, which the kernels cannot read")
        return HostColumn(tname, len(s), valid=pack_validity(~mask) if mask.any() else None,
                          data=np.ascontiguousarray(data.view(np.uint8) if tname == "bool" else data),
                          keep=[data])
    pa_arr = getattr(arr, "_pa_array", None)  # ArrowExtensionArray / ArrowStringArray
    if pa_arr is None:
        try:
            pa_arr = object_array(s)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise ColumnTypeError(f"column {name!r} has dtype {dtype}, which the kernels cannot read: {exc}") from exc
    return from_arrow(pa_arr, name)


def _buf(a: np.ndarray | None) -> pa.Buffer | None:
    return None if a is None else pa.py_buffer(a)


def to_arrow(c: HostColumn) -> pa.Array:
    """The Arrow array over a HostColumn's buffers (lists get int32 offsets when they fit)."""
    t = T.arrow_type(c.type)
    nulls = c.null_count()
    if c.type in T.FIXED_TYPES:
        if c.type == "bool":
            return pa.array(c.values().astype(bool), mask=~c.validity_bool() if nulls else None)
        return pa.Array.from_buffers(t, c.n, [_buf(c.valid), pa.py_buffer(c.data)], null_count=nulls)
    if c.type == "str":
        return pa.Array.from_buffers(pa.large_string(), c.n, [_buf(c.valid), pa.py_buffer(c.offsets),
                                                              pa.py_buffer(c.bytes)], null_count=nulls)
    assert c.offsets is not None  # (a list column: its offsets are set)
    offsets = c.offsets
    if offsets[-1] < 2**31 - 1:
        offsets = offsets.astype(np.int32)
        list_t = t
    else:
        list_t = pa.large_list(t.value_type)
    total = int(c.offsets[-1])
    if c.type == "list<str>":
        assert c.str_offsets is not None
        nstr = total
        child = pa.Array.from_buffers(pa.large_string(), nstr, [None, pa.py_buffer(c.str_offsets[: nstr + 1]),
                                                                pa.py_buffer(c.bytes)])
    else:
        assert c.data is not None
        child = pa.Array.from_buffers(t.value_type, total, [None, pa.py_buffer(c.data[:total])])
    return pa.Array.from_buffers(list_t, c.n, [_buf(c.valid), pa.py_buffer(offsets)], null_count=nulls,
                                 children=[child])


def to_series(c: HostColumn, index: pd.Index, name: str, nullable: bool | None = None) -> pd.Series:
    """A pandas series over a HostColumn: pandas ``str`` for strings, ``ArrowDtype`` for lists.

    Fixed-width columns by ``nullable`` (whether the column *may* hold nulls, known from the
    input dtypes: see :meth:`fbrapids.kernels.Plan.nullable_outputs`), so the dtype never
    depends on the rows: floats are numpy (nulls as NaN); ints and bools are numpy when not
    nullable, ``ArrowDtype`` when nullable.  ``nullable=None``: by the rows (numpy when
    there are no nulls).

    Example:
        >>> c = HostColumn("i32", 2, data=np.array([1, 2], dtype=np.int32))
        >>> str(to_series(c, pd.RangeIndex(2), "h").dtype), str(to_series(c, pd.RangeIndex(2), "h", True).dtype)
        ('int32', 'int32[pyarrow]')
    """
    nulls = c.null_count() if c.type in T.FIXED_TYPES else 0
    if c.type in T.FLOAT_TYPES and nullable is not None:
        values = c.values()
        data = values if not nulls else np.where(c.validity_bool(), values, np.nan).astype(values.dtype)
        return pd.Series(data, index=index, name=name, copy=False)
    if c.type in T.FIXED_TYPES and not nulls and not nullable:
        data = c.values().astype(bool) if c.type == "bool" else c.values()
        return pd.Series(data, index=index, name=name, copy=False)
    arr = to_arrow(c)
    if c.type == "str":
        # pandas 3.1 takes ArrowStringArray(values, *, dtype); pandas-stubs 3.1 lists (values, copy) instead
        strings = pd.arrays.ArrowStringArray(arr, dtype=_STR_DTYPE)  # type: ignore[call-arg]
        return pd.Series(strings, index=index, name=name, copy=False)
    return pd.Series(pd.arrays.ArrowExtensionArray(arr), index=index, name=name, copy=False)


def empty_series(type_name: str, name: str, nullable: bool = False) -> pd.Series:
    """An empty series of the dtype :func:`to_series` gives for ``type_name`` (dask meta)."""
    if nullable and type_name in T.INT_TYPES:
        return pd.Series(pd.arrays.ArrowExtensionArray(pa.array([], T.arrow_type(type_name))), name=name)
    if type_name in T.FIXED_TYPES:
        return pd.Series(np.zeros(0, dtype=bool if type_name == "bool" else T.NUMPY_DTYPE[type_name]), name=name)
    if type_name == "str":
        return pd.Series([], dtype=_STR_DTYPE, name=name)
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.array([], T.arrow_type(type_name))), name=name)
