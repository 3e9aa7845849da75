"""Value types of the kernel layer: names, Arrow types, C storage, and type classes.

A column flowing through a plan has one of these type names:

* fixed width: ``bool``, ``i8``, ``i16``, ``i32``, ``i64``, ``u8``, ``u16``, ``u32``,
  ``u64``, ``f32``, ``f64``;
* ``str`` (Arrow large_string: int64 offsets + bytes);
* ``list<i64>``, ``list<u64>`` (large_list of 64-bit integers);
* ``list<str>`` (large_list of large_string).

Operators accept *classes* of types (``int``, ``num``, ``str``, ``list``, ...), see
:func:`matches`.

Example:
    >>> arrow_type("list<i64>")
    ListType(list<item: int64>)
    >>> matches("i32", "int"), matches("str", "num")
    (True, False)
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pyarrow as pa

from fbrapids.kernels.device_types import XArray

INT_TYPES = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool")
FLOAT_TYPES = ("f32", "f64")
FIXED_TYPES = INT_TYPES + FLOAT_TYPES
LIST_TYPES = ("list<i64>", "list<u64>", "list<str>")
VAR_TYPES = ("str",) + LIST_TYPES
ALL_TYPES = FIXED_TYPES + VAR_TYPES

C_TYPE = {
    "bool": "fbx_u8", "i8": "fbx_i8", "i16": "fbx_i16", "i32": "fbx_i32", "i64": "fbx_i64",
    "u8": "fbx_u8", "u16": "unsigned short", "u32": "fbx_u32", "u64": "fbx_u64",
    "f32": "float", "f64": "double",
    "str": "fbx_str", "list<i64>": "fbx_li", "list<u64>": "fbx_li", "list<str>": "fbx_ls",
}

NUMPY_DTYPE: dict[str, type[np.integer] | type[np.floating]] = {
    "bool": np.uint8, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
    "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
    "f32": np.float32, "f64": np.float64,
}

_ARROW = {
    "bool": pa.bool_(), "i8": pa.int8(), "i16": pa.int16(), "i32": pa.int32(), "i64": pa.int64(),
    "u8": pa.uint8(), "u16": pa.uint16(), "u32": pa.uint32(), "u64": pa.uint64(),
    "f32": pa.float32(), "f64": pa.float64(), "str": pa.large_string(),
    "list<i64>": pa.list_(pa.int64()), "list<u64>": pa.list_(pa.uint64()),
    "list<str>": pa.list_(pa.large_string()),
}

CLASSES = {
    "int": INT_TYPES,
    "float": FLOAT_TYPES,
    "num": FIXED_TYPES,
    "str": ("str",),
    "scalar": FIXED_TYPES + ("str",),
    "hashable": INT_TYPES + ("str",),
    "list": LIST_TYPES,
    "intlist": ("list<i64>", "list<u64>"),
    "strlist": ("list<str>",),
    "any": ALL_TYPES,
    "crossable": INT_TYPES + ("str",) + LIST_TYPES,  # what hash / hash_bucket / cross take
    "strorlist": ("str",) + LIST_TYPES,  # what length takes
}


def arrow_type(name: str) -> pa.DataType:
    """The Arrow type a column of type ``name`` is handed to pandas as."""
    return _ARROW[name]


def matches(type_name: str, cls: str) -> bool:
    """Whether ``type_name`` belongs to the class (or is the exact type) ``cls``."""
    return type_name == cls or type_name in CLASSES.get(cls, ())


def is_var(type_name: str) -> bool:
    """Variable-length types go through the pool; fixed ones are written in place."""
    return type_name in VAR_TYPES


def is_signed(type_name: str) -> bool:
    return type_name.startswith("i") or type_name == "list<i64>"


def from_arrow(t: pa.DataType) -> str | None:
    """The kernel type name of an Arrow type, or None when kernels cannot read it."""
    if pa.types.is_boolean(t):
        return "bool"
    for name in FIXED_TYPES:
        if name != "bool" and t == _ARROW[name]:
            return name
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_dictionary(t):
        return from_arrow(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        vt = t.value_type
        if pa.types.is_string(vt) or pa.types.is_large_string(vt):
            return "list<str>"
        if pa.types.is_unsigned_integer(vt):
            return "list<u64>"
        if pa.types.is_integer(vt):
            return "list<i64>"
    return None


def misfits(values: XArray, to: str, xp: ModuleType = np) -> XArray:
    """Where ``values`` (a fixed-width array) do not fit the type ``to``: integers outside
    its range; floats whose truncation toward zero is outside it (NaN and infinities too)
    for an integer ``to``; finite floats that overflow to infinity for a float ``to``.
    Nothing misfits ``bool`` (x != 0).  ``xp`` is the array module (``cupy`` for device
    arrays: the CUDA runtime checks with the same code).

    Example:
        >>> misfits(np.array([-1, 255, 256]), "u8").tolist()
        [True, False, True]
        >>> misfits(np.array([-0.5, 127.9, 128.0, np.inf]), "i8").tolist()
        [False, False, True, True]
        >>> misfits(np.array([2**64 - 1], dtype=np.uint64), "i64").tolist()
        [True]
    """
    if to == "bool":
        return xp.zeros(len(values), dtype=bool)
    dtype: np.dtype = np.dtype(NUMPY_DTYPE[to])
    if dtype.kind == "f":
        with np.errstate(over="ignore", invalid="ignore"):
            return xp.isfinite(values) & ~xp.isfinite(values.astype(dtype))
    lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    if values.dtype.kind == "f":  # lo and hi + 1 are 0 or +-2^k: exact in any float type
        with np.errstate(invalid="ignore"):
            t = xp.trunc(values)
            return ~((t >= lo) & (t < hi + 1))
    if values.dtype.kind not in "iu":  # bool as bytes: 0 / 1 fit every integer type
        return xp.zeros(len(values), dtype=bool)
    vmin, vmax = int(np.iinfo(values.dtype).min), int(np.iinfo(values.dtype).max)
    out = xp.zeros(len(values), dtype=bool)
    if lo > vmin:
        out |= values < lo
    if hi < vmax:
        out |= values > hi
    return out
