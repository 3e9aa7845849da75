"""The kernels' device input ABI, run on the host: the same rendered text reads columns laid
out as cudf hands them to the CUDA runtime -- sliced (row 0 at an offset, validity bits
starting mid-byte), string offsets int32 or int64, list offsets int32, int32 or int64
offsets inside list<str>, BOOL8 as one byte per row -- and gives exactly what the
ordinary host path gives on the same values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from fbrapids import ops
from fbrapids.kernels import to_series
from fbrapids.kernels.abi import InputLayout
from fbrapids.kernels.device_columns import DeviceColumn
from fbrapids.kernels.plan import build_plan
from fbrapids.kernels.runtime_host import HostPlan

N, OFFSET = 300, 5  # rows read, first row read: validity bits start mid-byte


def _addr(buf: pa.Buffer | None) -> int:
    return 0 if buf is None else buf.address


def _offsets_width(t: pa.DataType) -> int:
    return 8 if (pa.types.is_large_string(t) or pa.types.is_large_list(t)) else 4


def cudf_like(arr: pa.Array, type_name: str) -> tuple[DeviceColumn, InputLayout]:
    """Host addresses of a (sliced) Arrow array, as CudaPlan reads a cudf column: pointers
    to row 0 (offset applied), the validity bitmap's base and the bit offset of row 0."""
    o = arr.offset
    slots = {"valid": _addr(arr.buffers()[0]) if arr.null_count else 0, "valid_bit": o if arr.null_count else 0}
    if type_name in ("i64", "i32", "f64"):
        slots["data"] = _addr(arr.buffers()[1]) + o * arr.type.byte_width
        return DeviceColumn(type_name, len(arr), slots, keep=[arr]), InputLayout()
    ow = _offsets_width(arr.type)
    slots["offsets"] = _addr(arr.buffers()[1]) + o * ow
    if type_name == "str":
        slots["bytes"] = _addr(arr.buffers()[2])
        return DeviceColumn(type_name, len(arr), slots, keep=[arr]), InputLayout(offsets=ow)
    child = arr.values  # offsets are absolute into the (unsliced) child
    if type_name == "list<str>":
        sow = _offsets_width(child.type)
        slots["str_offsets"] = _addr(child.buffers()[1]) + child.offset * sow
        slots["bytes"] = _addr(child.buffers()[2])
        return DeviceColumn(type_name, len(arr), slots, keep=[arr]), InputLayout(offsets=ow, str_offsets=sow)
    slots["data"] = _addr(child.buffers()[1]) + child.offset * 8
    return DeviceColumn(type_name, len(arr), slots, keep=[arr]), InputLayout(offsets=ow)


def frame(rng: np.random.Generator, n: int, large: bool) -> dict[str, pa.Array]:
    words = ["red", "shoe", "é", "blue", "x"]
    s_t = pa.large_string() if large else pa.string()
    q = [None if rng.random() < 0.2 else " ".join(rng.choice(words, rng.integers(0, 5))) for _ in range(n)]
    seq = [None if rng.random() < 0.2 else list(rng.choice(words, rng.integers(0, 4))) for _ in range(n)]
    ids = [None if rng.random() < 0.2 else rng.integers(0, 50, rng.integers(0, 4)).tolist() for _ in range(n)]
    uid = [None if rng.random() < 0.1 else int(v) for v in rng.integers(0, 10**6, n)]
    return {"q": pa.array(q, s_t), "seq": pa.array(seq, pa.list_(s_t)), "ids": pa.array(ids, pa.list_(pa.int64())),
            "uid": pa.array(uid, pa.int64())}


FEATURES = {"h": ops.hash_bucket("q", 1 << 20), "tok": ops.split("q", " "), "len": ops.length("seq"),
            "bi": ops.ngrams("seq", 2, buckets=1 << 16), "last": ops.last_k("seq", 2), "x": ops.cross("ids", "uid", buckets=977),
            "fi": ops.first_k("ids", 2), "fill": ops.fill_null("q", "?"), "uidh": ops.hash_bucket("uid", 1000)}
TYPES = {"q": "str", "seq": "list<str>", "ids": "list<i64>", "uid": "i64"}


@pytest.mark.parametrize("large", [False, True], ids=["int32-offsets", "int64-offsets"])
def test_sliced_cudf_layouts_read_like_the_host_path(large):
    full = frame(np.random.default_rng(7 if large else 3), N + 2 * OFFSET, large)
    sliced = {k: v.slice(OFFSET, N) for k, v in full.items()}
    plan = build_plan(FEATURES, TYPES)
    ids = {plan.nodes[i].expr.name: i for i in range(len(plan.nodes)) if plan.nodes[i].op is None}
    cols, layouts = {}, {}
    for name, arr in sliced.items():
        cols[name], lay = cudf_like(arr, TYPES[name])
        layouts[ids[name]] = lay
    assert layouts[ids["q"]].offsets == (8 if large else 4) and layouts[ids["ids"]].offsets == 4
    got = HostPlan(plan, layouts=layouts).run(cols)
    frame_ = pd.DataFrame({k: pd.Series(pd.arrays.ArrowExtensionArray(v)) for k, v in sliced.items()})
    want = HostPlan(plan).run(frame_)
    for name in FEATURES:
        g = to_series(got.columns[name], frame_.index, name)
        w = to_series(want.columns[name], frame_.index, name)
        assert g.equals(w), name
    nulls_q = sliced["q"].null_count
    assert to_series(got.columns["h"], frame_.index, "h").isna().sum() == nulls_q > 0


def test_bool8_bytes_and_bit_offset_validity():
    """cudf BOOL8: one byte per row; validity from an uint32-word mask with row 0 at bit 3."""
    vals = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1, 1], dtype=np.uint8)
    valid = np.array([1, 1, 0, 1, 1, 1, 0, 1, 1, 1], dtype=bool)
    words = np.zeros(16, dtype=np.uint32)  # a 64-byte padded mask
    bits = np.zeros(32, dtype=bool)
    bits[3: 3 + len(valid)] = valid
    words[0] = int(np.packbits(bits, bitorder="little").view(np.uint32)[0])
    col = DeviceColumn("bool", len(vals), {"data": vals.ctypes.data, "valid": words.ctypes.data, "valid_bit": 3},
                       keep=[vals, words])
    # the fill is False: the null rows hold 1 in their bytes, so a filled row shows it was read as null
    # (a fill of 7 no longer builds: a bool holds 0 / 1 only, and a value is never wrapped)
    plan = build_plan({"b": ops.cast("b", "i32"), "f": ops.fill_null("b", False)}, {"b": "bool"})
    res = HostPlan(plan).run({"b": col})
    b = res.columns["b"]
    assert b.validity_bool().tolist() == valid.tolist()
    assert b.data[valid].tolist() == vals[valid].astype(int).tolist()
    assert res.columns["f"].data.tolist() == [int(v) if ok else 0 for v, ok in zip(vals, valid)]


class _HostCuda:
    """cupy's ``cuda.UnownedMemory`` / ``MemoryPointer`` over host addresses."""

    class UnownedMemory:
        def __init__(self, ptr: int, size: int, owner: object) -> None:
            self.ptr, self.size, self.owner = ptr, size, owner

    class MemoryPointer:
        def __init__(self, mem: "_HostCuda.UnownedMemory", offset: int) -> None:
            self.mem, self.offset = mem, offset


class _HostCp:
    """The few cupy names ``device_columns.fixed_arrays`` uses, on host memory (numpy)."""

    cuda = _HostCuda
    dtype, zeros, ones, arange = staticmethod(np.dtype), staticmethod(np.zeros), staticmethod(np.ones), staticmethod(np.arange)
    bool_, uint32, int64, int8 = np.bool_, np.uint32, np.int64, np.int8

    @staticmethod
    def ndarray(shape: tuple[int], dtype: np.dtype, memptr: _HostCuda.MemoryPointer) -> np.ndarray:
        import ctypes

        raw = (ctypes.c_char * memptr.mem.size).from_address(memptr.mem.ptr + memptr.offset)
        return np.frombuffer(raw, dtype=dtype, count=shape[0])


@pytest.mark.parametrize("type_name", ["i64", "f64"])
def test_cuda_cast_check_reads_sliced_columns_like_the_host(type_name):
    """The CUDA runtime's cast check (CudaPlan._check_fits) reads a fixed-width column's data
    and validity bits (starting mid-byte) through fixed_arrays and raises exactly the host
    runtime's error: the same row, value and count."""
    from fbrapids.errors import KernelRuntimeError
    from fbrapids.kernels.columns import from_arrow
    from fbrapids.kernels.device_columns import fixed_arrays
    from fbrapids.kernels.runtime_host import check_fit, check_fit_values

    vals = [None if i % 3 == 0 else (i % 100 if type_name == "i64" else i % 100 * 0.75) for i in range(N + 2 * OFFSET)]
    vals[OFFSET + 4] = 300 if type_name == "i64" else float("nan")  # does not fit i8
    vals[OFFSET + 7] = -129 if type_name == "i64" else 1e30
    vals[OFFSET + 6] = None
    arr = pa.array(vals, pa.int64() if type_name == "i64" else pa.float64()).slice(OFFSET, N)
    dc, _ = cudf_like(arr, type_name)
    data, valid = fixed_arrays(_HostCp, dc)
    assert valid.tolist() == [v is not None for v in arr.to_pylist()]
    assert [repr(d) for d, ok in zip(data.tolist(), valid) if ok] == [repr(v) for v in arr.to_pylist() if v is not None]
    plan = build_plan({"k": ops.cast("x", "i8")}, {"x": type_name})
    nid = plan.outputs["k"]
    with pytest.raises(KernelRuntimeError) as host:
        check_fit(plan, nid, from_arrow(arr, "x"))
    with pytest.raises(KernelRuntimeError) as device:
        check_fit_values(plan, nid, data, valid)
    assert str(device.value) == str(host.value) and "row 4 holds" in str(host.value)
