"""Device columns: cudf column buffers as kernel slots, and kernel results as cudf columns,
both without copies and without a trip through the host.

Reading (``read_column``) follows libcudf's documented layouts (pylibcudf ``Column``):

* fixed width: ``data()`` holds the values (BOOL8: one byte per row, 0/1), row ``i`` at
  ``data.ptr + (offset + i) * itemsize``;
* strings: chars in the parent's ``data()``, offsets in ``child(0)`` (INT32 or INT64), read
  from the child's base plus the parent's offset;
* lists: offsets in ``child(0)`` (always INT32; its own begin plus the parent's offset),
  values in ``child(1)`` from its own begin (a strings column for ``list<str>``);
* validity: ``null_mask()``, uint32 words, LSB first, bit ``offset + i``; None when the
  column has no nulls.

The kernel gets pointers to the first row (the offset applied) and the validity bit
offset (``valid_bit`` slot); :class:`~fbrapids.kernels.abi.InputLayout` says which offset
widths the kernel must read.  List elements narrower than 64 bits are widened on the
device (a device copy, never a host one).

Building (``fixed_column``, ``strings_column``, ``list_column``) wraps cupy buffers with
``pylibcudf.gpumemoryview`` into ``pylibcudf.Column`` objects (string offsets INT32 when
the bytes fit, INT64 above; list offsets INT32, as libcudf requires).

Requires cupy and pylibcudf (the ``gpu`` extra); exercised by the tests marked ``gpu``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

from fbrapids.errors import ColumnTypeError, KernelRuntimeError
from fbrapids.kernels.abi import InputLayout, input_slots
from fbrapids.kernels.device_types import DataType, DeviceArray, GpuMemoryView, PlcColumn

INT32_MAX = 2**31 - 1

#: pylibcudf TypeId name -> kernel type name, for fixed-width columns
FIXED_TYPE_IDS = {"INT8": "i8", "INT16": "i16", "INT32": "i32", "INT64": "i64", "UINT8": "u8", "UINT16": "u16",
                  "UINT32": "u32", "UINT64": "u64", "FLOAT32": "f32", "FLOAT64": "f64", "BOOL8": "bool"}
_ID_OF = {v: k for k, v in FIXED_TYPE_IDS.items()}
_ITEMSIZE = {"i8": 1, "i16": 2, "i32": 4, "i64": 8, "u8": 1, "u16": 2, "u32": 4, "u64": 8, "f32": 4, "f64": 8,
             "bool": 1}


@dataclass
class DeviceColumn:
    """One input column as the kernel reads it: slot name -> device address (the
    ``valid_bit`` slot holds the bit offset), the offset widths, and what keeps the
    buffers alive."""

    type: str
    n: int
    slots: dict[str, int]
    layout: InputLayout = field(default_factory=InputLayout)
    keep: list[object] = field(default_factory=list)

    def pointers(self) -> list[int]:
        return [self.slots.get(name, 0) for name in input_slots(self.type)]


def _tid(plc: ModuleType, col: PlcColumn) -> str:
    return col.type().id().name


def _ptr(span: GpuMemoryView | None) -> int:
    return 0 if span is None else int(span.ptr)


def _offsets_width(plc: ModuleType, offsets: PlcColumn, what: str) -> int:
    tid = _tid(plc, offsets)
    if tid == "INT32":
        return 4
    if tid == "INT64":
        return 8
    raise ColumnTypeError(f"{what}: offsets of type {tid} (expected INT32 or INT64)")


def _widen_values(cp: ModuleType, plc: ModuleType, child: PlcColumn, kind: str, keep: list[object]) -> int:
    """The address of ``child``'s values as 64-bit integers (widened on the device when narrower)."""
    tid = _tid(plc, child)
    size = child.size()
    if tid in ("INT64", "UINT64"):
        return _ptr(child.data()) + child.offset() * 8
    t = FIXED_TYPE_IDS.get(tid)
    if t is None or t in ("f32", "f64", "bool"):
        raise ColumnTypeError(f"list column of {tid} elements: the kernels read integer or string lists")
    dtype = cp.dtype({"i8": "int8", "i16": "int16", "i32": "int32", "u8": "uint8", "u16": "uint16",
                      "u32": "uint32"}[t])
    base = _ptr(child.data()) + child.offset() * dtype.itemsize
    mem = cp.cuda.UnownedMemory(base, max(size, 1) * dtype.itemsize, child)
    view = cp.ndarray((size,), dtype, cp.cuda.MemoryPointer(mem, 0))
    wide = view.astype(cp.uint64 if kind == "list<u64>" else cp.int64)
    if not size:
        wide = cp.zeros(1, dtype=wide.dtype)
    keep.append(wide)
    return int(wide.data.ptr)


def fixed_arrays(cp: ModuleType, dc: DeviceColumn) -> tuple[DeviceArray, DeviceArray]:
    """A fixed-width :class:`DeviceColumn`'s rows as cupy arrays, without copying the data:
    ``(data, valid)``, ``valid`` a bool array unpacked from the null mask (bit
    ``valid_bit + i``; all true without a mask).  BOOL8 data reads as uint8 0 / 1."""
    dtype = cp.dtype({"bool": "uint8", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
                      "u16": "uint16", "u32": "uint32", "u64": "uint64", "f32": "float32",
                      "f64": "float64"}[dc.type])
    n = dc.n
    if not n:
        return cp.zeros(0, dtype=dtype), cp.zeros(0, dtype=cp.bool_)
    mem = cp.cuda.UnownedMemory(dc.slots["data"], n * dtype.itemsize, dc)
    data = cp.ndarray((n,), dtype, cp.cuda.MemoryPointer(mem, 0))
    if not dc.slots.get("valid"):
        return data, cp.ones(n, dtype=cp.bool_)
    bit = int(dc.slots.get("valid_bit", 0))
    words = -(-(bit + n) // 32)
    wmem = cp.cuda.UnownedMemory(dc.slots["valid"], words * 4, dc)
    mask = cp.ndarray((words,), cp.uint32, cp.cuda.MemoryPointer(wmem, 0))
    idx = cp.arange(n, dtype=cp.int64) + bit
    return data, ((mask[idx >> 5] >> (idx & 31).astype(cp.uint32)) & 1).astype(cp.bool_)


def read_column(cp: ModuleType, plc: ModuleType, col: PlcColumn, type_name: str, name: str) -> DeviceColumn:
    """The kernel slots of a pylibcudf column of kernel type ``type_name`` (no copies,
    except list elements narrower than 64 bits, widened on the device)."""
    n, o = col.size(), col.offset()
    mask = col.null_mask() if col.null_count() else None
    slots = {"valid": _ptr(mask), "valid_bit": o if mask is not None else 0}
    keep: list[object] = [col]
    tid = _tid(plc, col)
    if type_name in _ITEMSIZE:
        if FIXED_TYPE_IDS.get(tid) != type_name:
            raise ColumnTypeError(f"column {name!r}: device type {tid} where the plan expects {type_name}")
        slots["data"] = _ptr(col.data()) + o * _ITEMSIZE[type_name]
        return DeviceColumn(type_name, n, slots, InputLayout(), keep)
    if type_name == "str":
        if tid != "STRING":
            raise ColumnTypeError(f"column {name!r}: device type {tid} where the plan expects a string column")
        if col.num_children() == 0:  # an empty strings column may have no offsets child
            if n:
                raise ColumnTypeError(f"column {name!r}: a strings column of {n} rows without offsets")
            return DeviceColumn(type_name, 0, slots, InputLayout(), keep)
        offs = col.child(0)
        ow = _offsets_width(plc, offs, f"column {name!r}")
        slots["offsets"] = _ptr(offs.data()) + o * ow
        slots["bytes"] = _ptr(col.data())
        return DeviceColumn(type_name, n, slots, InputLayout(offsets=ow), keep)
    if tid != "LIST":
        raise ColumnTypeError(f"column {name!r}: device type {tid} where the plan expects {type_name}")
    offs, child = col.child(0), col.child(1)
    if _offsets_width(plc, offs, f"column {name!r}") != 4:
        raise ColumnTypeError(f"column {name!r}: list offsets must be INT32 (libcudf's size_type)")
    slots["offsets"] = _ptr(offs.data()) + (offs.offset() + o) * 4  # offsets().begin() + offset(), as libcudf
    if type_name == "list<str>":
        if _tid(plc, child) != "STRING":
            raise ColumnTypeError(f"column {name!r}: list elements of type {_tid(plc, child)}, expected strings")
        if child.num_children() == 0:
            slots["str_offsets"], slots["bytes"] = 0, 0
            return DeviceColumn(type_name, n, slots, InputLayout(offsets=4, str_offsets=8), keep)
        soffs = child.child(0)
        sow = _offsets_width(plc, soffs, f"column {name!r} (list elements)")
        slots["str_offsets"] = _ptr(soffs.data()) + child.offset() * sow
        slots["bytes"] = _ptr(child.data())
        return DeviceColumn(type_name, n, slots, InputLayout(offsets=4, str_offsets=sow), keep)
    slots["data"] = _widen_values(cp, plc, child, type_name, keep)
    return DeviceColumn(type_name, n, slots, InputLayout(offsets=4), keep)


def _view(plc: ModuleType, a: DeviceArray) -> GpuMemoryView:
    return plc.gpumemoryview(a)


def _dtype(plc: ModuleType, type_id: str) -> DataType:
    return plc.DataType(getattr(plc.TypeId, type_id))


def _mask(plc: ModuleType, mask: DeviceArray | None, nulls: int) -> GpuMemoryView | None:
    return _view(plc, mask) if nulls else None


def fixed_column(plc: ModuleType, type_name: str, data: DeviceArray, mask: DeviceArray | None,
                 nulls: int) -> PlcColumn:
    """A fixed-width pylibcudf column over ``data`` (n values; ``bool`` as 0/1 bytes)."""
    n = int(data.size)
    return plc.Column(_dtype(plc, _ID_OF[type_name]), n, _view(plc, data), _mask(plc, mask, nulls), nulls, 0, [])


def offsets_column(cp: ModuleType, plc: ModuleType, offsets64: DeviceArray, total: int, lists: bool) -> PlcColumn:
    """An offsets child: INT32 when ``total`` fits (always for lists), else INT64."""
    if total <= INT32_MAX:
        off = offsets64.astype(cp.int32)
        return plc.Column(_dtype(plc, "INT32"), int(off.size), _view(plc, off), None, 0, 0, [])
    if lists:
        raise KernelRuntimeError(f"a list result of {total:,} elements passes cudf's limit of {INT32_MAX:,} "
                                 "elements per list column: extract smaller partitions")
    return plc.Column(_dtype(plc, "INT64"), int(offsets64.size), _view(plc, offsets64), None, 0, 0, [])


def strings_column(cp: ModuleType, plc: ModuleType, n: int, offsets64: DeviceArray, chars: DeviceArray, total: int,
                   mask: DeviceArray | None, nulls: int) -> PlcColumn:
    """A strings pylibcudf column: ``offsets64`` (n + 1, int64) into ``chars`` (``total`` bytes)."""
    off = offsets_column(cp, plc, offsets64, total, lists=False)
    return plc.Column(_dtype(plc, "STRING"), n, _view(plc, chars), _mask(plc, mask, nulls), nulls, 0, [off])


def list_column(cp: ModuleType, plc: ModuleType, n: int, offsets64: DeviceArray, total: int, child: PlcColumn,
                mask: DeviceArray | None, nulls: int) -> PlcColumn:
    """A list pylibcudf column of ``child`` (``total`` elements) cut by ``offsets64``."""
    off = offsets_column(cp, plc, offsets64, total, lists=True)
    return plc.Column(_dtype(plc, "LIST"), n, None, _mask(plc, mask, nulls), nulls, 0, [off, child])


def int64_child(plc: ModuleType, type_name: str, values: DeviceArray, total: int) -> PlcColumn:
    """The element column of a ``list<i64>`` / ``list<u64>`` result (``total`` values)."""
    tid = "UINT64" if type_name == "list<u64>" else "INT64"
    return plc.Column(_dtype(plc, tid), total, _view(plc, values), None, 0, 0, [])
