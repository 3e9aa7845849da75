"""Take rows of a variable-width Arrow column with a host kernel that writes its output once.

pyarrow's ``take`` of a ``list<int64>`` column builds an index of every kept value, then
gathers the values into buffers that grow as they fill; on fresh memory (a joined frame's
list columns, hundreds of MB) that costs several times the copy itself.  Here
(``csrc/fbx_row_take.c``) the output offsets come first, exact (a prefix sum of the kept
rows' lengths), then the values are copied once into a buffer of that size, one ``memcpy``
per run of rows that are contiguous in the input (a sorted subset of rows, as a join's or a
filter's kept rows are, copies long runs), with OpenMP over blocks of rows.

Handled: ``string`` / ``large_string`` / ``binary`` / ``large_binary`` and ``list`` /
``large_list`` of a fixed-width child without nulls of its own, sliced or chunked.  A row
index ``-1`` gives a null (a left join's miss); a null input row stays null, with length 0.
Anything else (:func:`takes_type` is False) is left to the caller, and so is an output whose
offsets would overflow their type.  Values and nulls are those of ``pyarrow.compute.take``.
With a fill value, a miss or a null row is that value instead (:func:`fill_null_var_width`:
``pyarrow.compute.fill_null`` of a string column, as a take of every row).  The offsets and values
buffers are :func:`fbrapids.kernels.host_memory.arrow_buffer`'s (a large one reuses the
pages of an earlier output).

Example:
    >>> import numpy as np, pyarrow as pa
    >>> arr = pa.array([[1, 2], None, [], [3]], pa.list_(pa.int64()))
    >>> take_var_width(arr, np.array([3, 0, -1, 1])).to_pylist()
    [[3], [1, 2], None, None]
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np
import pyarrow as pa

from fbrapids.kernels import host_memory as HM
from fbrapids.kernels.compile_host import load_source
from fbrapids.kernels.headers import CSRC, without_includes

_P = ctypes.c_void_p
_I = ctypes.c_int64
@functools.lru_cache(maxsize=None)
def lib() -> ctypes.CDLL:
    """The loaded take kernels (compiled on first use, then from the disk cache)."""
    so = load_source(without_includes((CSRC / "fbx_row_take.c").read_text()))
    for bits in (32, 64):
        offsets = getattr(so, f"fbx_take_offsets{bits}")
        offsets.argtypes = [_I, _P, _P, _P, _I, _I, _P, _P, _P]
        offsets.restype = _I
        values = getattr(so, f"fbx_take_values{bits}")
        values.argtypes = [_I, _P, _P, _P, _I, _P, _I, _P, _P, _P]
        values.restype = None
    return so


def _fixed_width(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t)) and t.bit_width % 8 == 0


def takes_type(t: pa.DataType) -> bool:
    """Whether :func:`take_var_width` takes columns of Arrow type ``t``.

    Example:
        >>> takes_type(pa.large_string()), takes_type(pa.list_(pa.int64())), takes_type(pa.int64())
        (True, True, False)
    """
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return True
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and _fixed_width(t.value_type)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _offset_bits(t: pa.DataType) -> int:
    return 64 if (pa.types.is_large_list(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t)) else 32


def _one_array(values: "pa.Array | pa.ChunkedArray") -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        if values.num_chunks == 1:
            return values.chunk(0)
        return pa.concat_arrays(values.chunks) if values.num_chunks else pa.array([], values.type)
    return values


def take_var_width(values: "pa.Array | pa.ChunkedArray", rows: np.ndarray,
                   bounds: tuple[int, int] | None = None, fill: bytes | None = None) -> pa.Array | None:
    """``values`` at ``rows`` (int64; ``-1``: a null), or None when the kernel does not apply
    (an unsupported type, a list child with nulls, a row beyond the end, or more values
    than the offsets can address).  ``bounds``: ``(rows.min(), rows.max())`` when the
    caller knows them (one pass over the rows for every column of a frame).  ``fill``: the
    bytes of a string / binary value that a miss or a null input row becomes (no nulls
    are left)."""
    if not takes_type(values.type) or (fill is not None and _is_list(values.type)):
        return None
    arr = _one_array(values)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    n, length = len(rows), len(arr)
    if n and bounds is None:
        bounds = (int(rows.min()), int(rows.max()))
    if n and bounds is not None and bounds[1] >= length:  # (n: bounds is set)
        return None  # the caller's own take reports the row out of bounds
    bits = _offset_bits(arr.type)
    if _is_list(arr.type):
        child = arr.values  # the child as the offsets address it (a list's own slice is in its offsets)
        if child.null_count:
            return None
        elem = child.type.bit_width // 8
        base = child.buffers()[1].address + child.offset * elem
    else:
        elem = 1
        base = arr.buffers()[2].address if arr.buffers()[2] is not None else 0
    in_off = arr.buffers()[1].address + arr.offset * (bits // 8)
    in_valid = arr.buffers()[0]
    has_nulls = fill is None and ((arr.null_count > 0) or (n > 0 and bounds is not None and bounds[0] < 0))
    valid_in = in_valid.address if (in_valid is not None and arr.null_count) else None
    fill_buf = np.frombuffer(fill + b"\0", dtype=np.uint8) if fill is not None else None
    out_off = HM.arrow_buffer((n + 1) * (bits // 8))
    out_valid = pa.allocate_buffer((n + 7) // 8) if has_nulls else None
    null_count = np.zeros(1, dtype=np.int64)
    so = lib()
    total = getattr(so, f"fbx_take_offsets{bits}")(
        n, rows.ctypes.data, in_off, valid_in, arr.offset, -1 if fill is None else len(fill), out_off.address,
        out_valid.address if out_valid is not None else None, null_count.ctypes.data)
    if total < 0:
        return None
    out_values = HM.arrow_buffer(total * elem)
    if total:
        getattr(so, f"fbx_take_values{bits}")(n, rows.ctypes.data, in_off, valid_in, arr.offset, base, elem,
                                              None if fill_buf is None else fill_buf.ctypes.data, out_off.address,
                                              out_values.address)
    nulls = int(null_count[0])
    validity = out_valid if nulls else None
    if _is_list(arr.type):
        child = pa.Array.from_buffers(arr.type.value_type, total, [None, out_values], null_count=0)
        return pa.Array.from_buffers(arr.type, n, [validity, out_off], null_count=nulls, children=[child])
    return pa.Array.from_buffers(arr.type, n, [validity, out_off, out_values], null_count=nulls)


def fill_null_var_width(values: "pa.Array | pa.ChunkedArray", fill: bytes) -> pa.Array | None:
    """A string / binary column's nulls replaced by ``fill`` (its bytes), as
    ``pyarrow.compute.fill_null``: a take of every row with a fill; None for another type.

    Example:
        >>> fill_null_var_width(pa.array(["a", None, "bc"]), b"-").to_pylist()
        ['a', '-', 'bc']
    """
    n = len(values)
    return take_var_width(values, np.arange(n, dtype=np.int64), (0, n - 1) if n else None, fill)

