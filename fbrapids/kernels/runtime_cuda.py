"""Run a plan on the GPU, resident on the device: the CUDA meta-kernels through
``cupy.RawModule``, one launch per GPU layer, reading cudf column buffers in place and
building the results as cudf columns from device buffers.

Per run of a partition (a cudf frame):

* inputs: each column's buffers through pylibcudf (``Series.to_pylibcudf``: data, null
  mask, offsets, the column offset; :mod:`fbrapids.kernels.device_columns`), no copies;
* per GPU layer: the layer's pointer table (a device buffer allocated once per plan) is
  refreshed with one small host-to-device copy of ``nslots`` addresses; the pool (kept per
  plan, presized from :class:`~fbrapids.kernels.pool.PoolSizer`, capped) takes the
  variable-length results; validity is packed into cudf null masks on the device
  (``fbx_pack_validity``), offsets are scanned on the device, and the layer makes ONE
  device-to-host read: its status vector (error word, pool head, sampled bytes-per-row
  quantile, null counts, result totals);
* results: compacted out of the pool into fresh buffers (``fbx_compact``) and wrapped as
  pylibcudf / cudf columns (string offsets INT32 when they fit, list offsets INT32);
* operator parameter buffers (lookup tables, boundaries) are uploaded once per plan;
* layers placed on the CPU (an operator whose footprint passes the device budget) run
  through the host runtime's public ``run`` on a plan of their own; their inputs are
  copied to the host and their results back (counted as column bytes).

Bytes moved either way are counted in the plan's ``stats`` (``bytes_to_device``,
``bytes_to_host`` and the column-data part of each), so a steady-state extract can be
checked to move no column data.  Requires cupy, cudf and pylibcudf (the ``gpu`` extra);
exercised by the tests marked ``gpu``.

Example (on a GPU machine)::

    gdf = cudf.DataFrame(df)
    out = gdf.fbx.extract(h=ops.hour("ts"))   # runs CudaPlan(plan).run(gdf)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Mapping

import numpy as np
import pandas as pd

from fbrapids.errors import ArgumentError, BackendUnavailableError
from fbrapids.frames import backend as backends
from fbrapids.kernels import counters as S, dictionary as D, types as T
from fbrapids.kernels.abi import CUDA_BLOCK, POOL_ALIGN, InputLayout, LayerABI, check_error, layer_abi, output_slots
from fbrapids.kernels.columns import HostColumn, empty_series, from_arrow
from fbrapids.kernels.device_columns import (
    DeviceColumn,
    fixed_arrays,
    fixed_column,
    int64_child,
    list_column,
    read_column,
    strings_column,
)
from fbrapids.kernels.device_types import DeviceArray, DeviceFunction, DeviceModule, PlcColumn, XArray
from fbrapids.kernels.headers import CSRC, inline_headers, without_includes
from fbrapids.kernels.nvrtc import RUNTIME_OPTIONS, compile_cubin, nvrtc_version
from fbrapids.kernels.plan import Layer, Node, Plan
from fbrapids.kernels.pool import PRESIZE_QUANTILE, PoolSizer, initial_pool_bytes, row_sample
from fbrapids.kernels.render import kernel_name, render_module
from fbrapids.kernels.runtime import InputColumn, OutputColumn, RunResult, Runtime, row_pool_bytes
from fbrapids.kernels.runtime_host import HostPlan, check_fit_values

if TYPE_CHECKING:  # (annotations only: no import at run time; cudf has no stubs, so mypy sees Any)
    import cudf

    from fbrapids.frames.backend import FrameLike

DEVICE_HELPERS = "fbx_device_helpers.cu"
#: status vector of a layer: [error word, pool head, bytes-per-row quantile, then per output
#: its null count, then per variable-length output its element total (and byte total for
#: list<str>)]
STATUS_ERR, STATUS_HEAD, STATUS_QUANTILE, STATUS_FIXED = 0, 1, 2, 3


def status_layout(abi: LayerABI) -> tuple[int, dict[int, int]]:
    """The length of a layer's status vector (int64 values) and where each
    variable-length output's totals sit in it."""
    totals_at: dict[int, int] = {}
    pos = STATUS_FIXED + len(abi.outputs)
    for nid, o in abi.outputs.items():
        if T.is_var(o.type):
            totals_at[nid] = pos
            pos += 2 if o.type == "list<str>" else 1
    return pos, totals_at


def device_helpers_source() -> str:
    """The CUDA text of the device helpers (compaction, validity packing), headers inlined."""
    return inline_headers([]) + "\n" + without_includes((CSRC / DEVICE_HELPERS).read_text())


def cubin_key(source: str, arch: str, options: tuple[str, ...] = RUNTIME_OPTIONS) -> str:
    """The kernel cache key of ``source`` compiled for ``arch`` with ``options``: the text,
    the options, the architecture and the NVRTC version (``nvrtc 13.0``) that compiles it,
    so a CUBIN of another compiler or GPU is never loaded.

    Example:
        >>> from fbrapids.kernels.nvrtc import nvrtc_available
        >>> not nvrtc_available() or cubin_key("x", "sm_90") != cubin_key("x", "sm_80")
        True
    """
    from fbrapids.kernels import cache

    major, minor = nvrtc_version()
    return cache.source_key(source, " ".join(options), arch, f"nvrtc {major}.{minor}")


def cached_cubin(source: str, arch: str, name: str = "fbx.cu", options: tuple[str, ...] = RUNTIME_OPTIONS) -> Path:
    """The path of ``source``'s CUBIN for ``arch`` in the kernel cache, compiled by NVRTC
    when missing (no device needed: ``make gpu-kernels`` fills the cache this way)."""
    from fbrapids.kernels import cache

    return cache.cached_artifact(cubin_key(source, arch, options), ".cubin",
                                 lambda tmp: tmp.write_bytes(compile_cubin(source, arch, name, options)))


def load_module(cp: ModuleType, source: str, name: str = "fbx.cu",
                options: tuple[str, ...] = RUNTIME_OPTIONS) -> DeviceModule:
    """``source`` compiled with ``options`` for the current device (a CUBIN for its
    ``sm_XX``, cached on disk by :mod:`fbrapids.kernels.cache`, :func:`cubin_key`) and
    loaded.  Not ``cupy.RawModule(code=...)``: it appends ``-ftz=true`` after the caller's
    options (``cupy/cuda/compiler.py``), flushing float32 denormals on the device only.  The
    module's ``get_function(name)(grid, block, args)`` launches as a RawModule's does."""
    path = cached_cubin(source, f"sm_{cp.cuda.Device().compute_capability}", name, options)
    module = cp.cuda.function.Module()
    module.load(path.read_bytes())
    return module


def module_source(plan: Plan, layouts: Mapping[int, InputLayout]) -> str:
    """The CUDA source a :class:`CudaPlan` compiles for ``plan``'s GPU layers over inputs
    of ``layouts`` (only the inputs whose offsets are not int64; empty: the host layout).

    Example:
        >>> from fbrapids import ops
        >>> from fbrapids.kernels.plan import build_plan
        >>> p = build_plan({"t": ops.split("q", " ", buckets=8)}, {"q": "str"}, backend="gpu")
        >>> module_source(p, {}) != module_source(p, {0: InputLayout(offsets=4)})
        True
    """
    gpu_layers = [l for l in plan.layers if l.placement == "gpu"]
    return render_module(plan, "cuda", gpu_layers, dict(layouts) if layouts else None)


def meta_dtype(type_name: str) -> np.dtype | pd.api.extensions.ExtensionDtype:
    """The dtype of a plan output of kernel type ``type_name`` in a dask frame's meta (the
    host's, :func:`~fbrapids.kernels.columns.empty_series`); the device results take it.

    Example:
        >>> str(meta_dtype("list<i64>"))
        'list<item: int64>[pyarrow]'
    """
    return empty_series(type_name, "x").dtype


def output_series(cudf: ModuleType, column: PlcColumn, type_name: str, name: str,
                  index: "cudf.Index | None" = None) -> "cudf.Series":
    """A plan output (a pylibcudf column) as a cudf series of the dtype a dask frame's meta
    gives it (``features.run``: :func:`meta_dtype` moved to cudf): a list output is typed as
    pandas' Arrow list dtype, which cudf keeps on columns made from pandas (the meta is one),
    where ``from_pylibcudf`` alone would say ``cudf.ListDtype`` (checked without a device by
    the conformance stage, on host stand-in buffers)."""
    if type_name in T.LIST_TYPES:
        return backends.cudf_series_of(column, meta_dtype(type_name), name=name, index=index)
    series = cudf.Series.from_pylibcudf(column)
    if index is not None:
        series.index = index
    series.name = name
    return series


def dictionary_eligible(node: Node, coded_args: set[int]) -> bool:
    """Whether the CUDA runtime runs ``node`` once per category (its single input a cudf
    categorical column, whose codes and categories come free) instead of row by row: its
    operator's dictionary path says ``device`` (a fixed-width result whose null rule is the
    row path's plain one: a null row gives null).

    Example:
        >>> from fbrapids import ops
        >>> from fbrapids.kernels.plan import build_plan
        >>> p = build_plan({"h": ops.hash_bucket("u", 8), "c": ops.cross("u", "v", buckets=8)},
        ...                {"u": "str", "v": "i64"}, backend="gpu")
        >>> [dictionary_eligible(p.nodes[i], {0}) for i in (1, 3)]
        [True, False]
    """
    path = node.operator().dictionary
    device = path is not None and path.device
    return (node.dict_slot is not None and device and node.type in T.FIXED_TYPES
            and node.implementation().null_rule != "handles" and len(node.args) == 1 and node.args[0] in coded_args)


def gather_coded(xp: ModuleType, codes: XArray, code_valid: XArray, data: XArray,
                 valid: XArray) -> tuple[XArray, XArray]:
    """Rows of a per-category result (``data``, ``valid``: one per category) taken by the
    rows' ``codes``: ``(data, valid)`` per row; a null row (``code_valid`` false, or a code
    below 0) is null, as on the row path.  ``xp`` is cupy on the device, numpy in the CPU twin.

    Example:
        >>> import numpy as np
        >>> d, v = gather_coded(np, np.array([1, 0, -1, 1]), np.array([1, 1, 0, 1], bool),
        ...                     np.array([10, 20]), np.array([1, 1], bool))
        >>> d.tolist(), v.tolist()
        ([20, 10, 0, 20], [True, True, False, True])
    """
    ok = code_valid & (codes >= 0)
    idx = xp.where(ok, codes, 0).astype(xp.int64)
    if len(data) == 0:
        return xp.zeros(len(codes), dtype=data.dtype), xp.zeros(len(codes), dtype=bool)
    row_valid = ok & valid[idx]
    return xp.where(row_valid, data[idx], xp.zeros((), dtype=data.dtype)).astype(data.dtype), row_valid


def mask_words(n: int) -> int:
    """uint32 words of a null mask of ``n`` rows, padded to 64 bytes as libcudf allocates."""
    return max(-(-n // 512) * 16, 16)


@dataclass
class DeviceValue:
    """A node's value in a run: what the kernels read, and the pylibcudf column."""

    read: DeviceColumn
    column: PlcColumn


class CudaPlan(Runtime):
    """A plan compiled for the device (GPU layers) plus the host (CPU-placed layers)."""

    def __init__(self, plan: Plan) -> None:
        be = backends.get_backend("gpu")
        self.cp, self.cudf, self.backend = be.xp, be.xdf, be
        plc = backends.try_import("pylibcudf")
        if plc is None:
            raise BackendUnavailableError("the CUDA runtime needs pylibcudf (installed with cudf)")
        self.plc = plc
        self.plan = plan
        self.gpu_layers = [l for l in plan.layers if l.placement == "gpu"]
        self.cpu_layers = [l for l in plan.layers if l.placement == "cpu"]
        #: CPU-placed layers, each compiled as a plan of its own for the host runtime
        self.host_layers = {l.index: HostPlan(plan.layer_plan(l)) for l in self.cpu_layers}
        self.abis = {l.index: layer_abi(plan, l) for l in self.gpu_layers}
        self.sizers = {l.index: PoolSizer() for l in self.gpu_layers}
        #: the source for inputs with int64 offsets; other input layouts render their own
        self.source = module_source(plan, {})
        self.modules: dict[tuple[tuple[int, int, int], ...], DeviceModule] = {}
        #: per operator on the dictionary path, its one-operator plan (run over the categories)
        self._distinct: dict[int, "CudaPlan"] = {}
        self.helpers = load_module(self.cp, device_helpers_source(), DEVICE_HELPERS)
        self.stats = S.KernelStats()
        self._lock = threading.Lock()
        self._consts: dict[int, list[DeviceArray]] | None = None
        self._tables = {l.index: self.cp.zeros(max(self.abis[l.index].nslots, 1), dtype=self.cp.uint64)
                        for l in self.gpu_layers}
        self.pool = self.cp.empty(initial_pool_bytes(), dtype=self.cp.uint8)
        self.head = self.cp.zeros(1, dtype=self.cp.uint64)
        self.err = self.cp.zeros(1, dtype=self.cp.int32)

    # -- compilation ---------------------------------------------------------------------
    def _module(self, layouts: dict[int, InputLayout]) -> DeviceModule:
        key = tuple(sorted((nid, lay.offsets, lay.str_offsets) for nid, lay in layouts.items()))
        mod = self.modules.get(key)
        if mod is None:
            src = self.source if not key else module_source(self.plan, layouts)
            mod = self.modules[key] = load_module(self.cp, src, "fbx_layers.cu")
        return mod

    def _constants(self, st: S.KernelStats) -> dict[int, list[DeviceArray]]:
        """The operators' parameter buffers on the device, uploaded once per plan."""
        if self._consts is None:
            self._consts = {}
            for l in self.gpu_layers:
                for nid in l.nodes:
                    bufs = [self.cp.asarray(b) for b in self.plan.nodes[nid].implementation().buffers]
                    st.bytes_to_device += sum(int(b.nbytes) for b in bufs)
                    self._consts[nid] = bufs
        return self._consts

    # -- running -------------------------------------------------------------------------
    def run(self, columns: Mapping[str, InputColumn] | FrameLike) -> RunResult:
        """The plan's outputs as cudf series (on the inputs' index); per-row status arrays
        as cupy arrays."""
        with self._lock:
            return self._run(columns)

    def _input(self, s: "cudf.Series", name: str, type_name: str) -> DeviceValue:
        if isinstance(s.dtype, self.cudf.CategoricalDtype):
            s = s.astype(s.cat.categories.dtype)  # decoded on the device
        if type_name in T.FLOAT_TYPES:  # NaN is null, as on the host (columns.from_series): one rule
            s = s.nans_to_nulls()
        col, _meta = s.to_pylibcudf()
        return DeviceValue(read_column(self.cp, self.plc, col, type_name, name), col)

    def _run(self, columns: Mapping[str, InputColumn] | FrameLike) -> RunResult:
        plan = self.plan
        names = plan.input_columns()
        first = _device_series(columns, names[0]) if names else None
        n = len(first) if first is not None else len(columns)
        index = getattr(columns, "index", None)
        if index is None or callable(index):
            if first is None:
                raise ArgumentError("the plan reads no column and the input has no index to put its outputs on")
            index = first.index
        st = S.KernelStats(partitions=1, rows=n)
        values: dict[int, DeviceValue] = {}
        coded: dict[int, tuple[cudf.Series, cudf.Series]] = {}  # categorical inputs: (codes, categories), free
        for node in plan.nodes:
            if node.op is None:
                name = node.column()
                col = _device_series(columns, name)
                if plan.dictionary and D.mode() != "off" and backends.is_categorical(col.dtype):
                    coded[node.id] = (col.cat.codes, self.cudf.Series(col.cat.categories))
                values[node.id] = self._input(col, name, node.type)
        layouts = {nid: v.read.layout for nid, v in values.items() if v.read.layout != InputLayout()}
        module = self._module(layouts) if self.gpu_layers else None
        status: dict[int, XArray] = {}
        for layer in plan.layers:
            if layer.placement == "cpu":
                self._run_host_layer(layer, n, values, status, st)
            else:
                assert module is not None  # (built above: this layer is one of self.gpu_layers)
                self._run_device_layer(layer, module.get_function(kernel_name(layer)), n, values, status, st, coded)
        st.pool_capacity = max(st.pool_capacity, int(self.pool.size))
        self.stats += st
        S.record(st)
        out: dict[str, OutputColumn] = {}
        for name, nid in plan.outputs.items():
            out[name] = output_series(self.cudf, values[nid].column, plan.nodes[nid].type, name, index)
        return RunResult(out, {name: status[nid] for name, nid in plan.outputs.items() if nid in status}, st)

    def _run_host_layer(self, layer: Layer, n: int, values: dict[int, DeviceValue], status: dict[int, XArray],
                        st: S.KernelStats) -> None:
        """A CPU-placed layer: the host runtime's ``run`` on host copies of its inputs,
        results copied back to the device (all counted as column bytes)."""
        args = sorted({a for nid in layer.nodes for a in self.plan.nodes[nid].args})
        cols = {}
        for a in args:
            arr = self.cudf.Series.from_pylibcudf(values[a].column).to_arrow()
            st.bytes_to_host += arr.nbytes
            st.column_bytes_to_host += arr.nbytes
            cols[f"n{a}"] = from_arrow(arr, f"n{a}")
        res = self.host_layers[layer.index].run(cols)
        for k in ("launches", "regrowths", "presizes", "compactions"):
            setattr(st, k, getattr(st, k) + getattr(res.stats, k))
        for nid in layer.nodes:
            values[nid] = self._upload(res.columns[f"n{nid}"], st)
            if f"n{nid}" in res.status:
                status[nid] = self.cp.asarray(res.status[f"n{nid}"])
                st.bytes_to_device += int(status[nid].nbytes)
                st.column_bytes_to_device += int(status[nid].nbytes)

    def _outputs(self, abi: LayerABI, n: int, ptrs: np.ndarray) -> dict[int, dict[str, DeviceArray]]:
        """Fresh output buffers of a layer, their addresses written into ``ptrs``."""
        cp = self.cp
        consts = self._consts or {}
        outs: dict[int, dict[str, DeviceArray]] = {}
        for nid, o in abi.outputs.items():
            b: dict[str, DeviceArray] = {}
            for i, name in enumerate(output_slots(o.type)):
                if name == "data":
                    b[name] = cp.empty(max(n, 1), dtype=T.NUMPY_DTYPE[o.type])[:n]
                elif name == "valid":
                    b[name] = cp.empty(max(n, 1), dtype=cp.uint8)[:n]
                else:
                    b[name] = cp.zeros(max(n, 1), dtype=cp.int64)[:n]
                ptrs[o.first + i] = b[name].data.ptr
            if o.status is not None:
                b["status"] = cp.full(n, -1, dtype=cp.int8)
                ptrs[o.status] = b["status"].data.ptr
            for buf, slot in zip(consts.get(nid, ()), o.buffers):
                ptrs[slot] = buf.data.ptr
            outs[nid] = b
        return outs

    def _reserve(self, need: int) -> None:
        if need > self.pool.size:
            self.pool = self.cp.empty(-(-need // POOL_ALIGN) * POOL_ALIGN, dtype=self.cp.uint8)

    def _check_fits(self, layer: Layer, values: dict[int, DeviceValue]) -> None:
        """The host runtime's conversion check (``Impl.checks_fit``: ``cast`` never wraps) on
        the device: each checked node's argument, data and validity as cupy arrays, the
        same ``types.misfits`` test and error (CPU-placed layers check in HostPlan); a float
        input's NaN is null here as on the host (:meth:`_input`), so it is never a misfit."""
        for nid in layer.nodes:
            node = self.plan.nodes[nid]
            if not node.implementation().checks_fit:
                continue
            data, valid = fixed_arrays(self.cp, values[node.args[0]].read)
            check_fit_values(self.plan, nid, data, valid, xp=self.cp)

    def _dictionary(self, layer: Layer, n: int, coded: dict[int, tuple[cudf.Series, cudf.Series]],
                    st: S.KernelStats) -> dict[int, DeviceValue]:
        """The layer's operators the dictionary path takes (:func:`dictionary_eligible`),
        each run once per category by its own one-operator plan (the same CUDA text) and
        gathered to the rows by the codes on the device: bit for bit the row path's result."""
        how = D.mode()
        if how == "off" or (how == "auto" and n < D.MIN_ROWS):
            return {}
        cp, done = self.cp, {}
        for nid in layer.nodes:
            node = self.plan.nodes[nid]
            if not dictionary_eligible(node, set(coded)):
                continue
            codes, cats = coded[node.args[0]]
            sub = self._distinct.get(nid)
            if sub is None:
                sub = self._distinct[nid] = CudaPlan(self.plan.node_plan(nid))
            res = sub.run({"a0": cats}).columns["out"]
            assert not isinstance(res, HostColumn)  # (a CudaPlan's outputs are cudf series)
            data, valid = fixed_arrays(cp, read_column(cp, self.plc, res.to_pylibcudf()[0], node.type, "out"))
            code_type = next(k for k in T.INT_TYPES if np.dtype(T.NUMPY_DTYPE[k]) == np.dtype(codes.dtype))
            code_data, code_valid = fixed_arrays(cp, read_column(cp, self.plc, codes.to_pylibcudf()[0], code_type,
                                                                 "codes"))
            rows, row_valid = gather_coded(cp, code_data, code_valid, data, valid)
            mask, vec = cp.empty(mask_words(n), dtype=cp.uint32), cp.zeros(1, dtype=cp.int64)
            if n:
                self.helpers.get_function("fbx_pack_validity")(
                    (max(-(-n // (32 * CUDA_BLOCK)), 1),), (CUDA_BLOCK,),
                    (np.int64(n), row_valid.astype(cp.uint8), mask, vec))
            nulls, made = (int(x) for x in cp.stack([vec[0], valid.sum()]).get())  # one read
            done[nid] = self._value(node.type, n, mask, nulls, data=rows)
            st.hashes += made
            st.hashes_saved += (n - nulls) - made
            st.dictionary_runs += 1
        return done

    def _run_device_layer(self, layer: Layer, fn: DeviceFunction, n: int, values: dict[int, DeviceValue],
                          status: dict[int, XArray], st: S.KernelStats,
                          coded: dict[int, tuple[cudf.Series, cudf.Series]] | None = None) -> None:
        cp = self.cp
        self._check_fits(layer, values)
        abi = self.abis[layer.index]
        self._constants(st)
        ptrs = np.zeros(max(abi.nslots, 1), dtype=np.uint64)
        for nid, first in abi.inputs.items():
            p = values[nid].read.pointers()
            ptrs[first: first + len(p)] = p
        outs = self._outputs(abi, n, ptrs)
        chosen = self._dictionary(layer, n, coded or {}, st) if abi.skip is not None else {}
        skip = None
        if chosen:  # the kernel skips them (their slots' flags), a host array of one byte each, uploaded once
            flags = D.flags(self.plan)
            for nid in chosen:
                flags[self.plan.nodes[nid].dict_slot] = 1
            skip = cp.asarray(flags)
            ptrs[abi.skip] = skip.data.ptr
        table = self._tables[layer.index]
        table.set(ptrs)  # the pointer table: nslots addresses, no column data
        st.bytes_to_device += int(ptrs.nbytes)
        sizer = self.sizers[layer.index]
        if abi.nparts:
            self._reserve(sizer.estimate(n, abi.nparts))
        var = [(nid, o) for nid, o in abi.outputs.items() if T.is_var(o.type)]
        pos, totals_at = status_layout(abi)
        grid = (max(-(-n // CUDA_BLOCK), 1),)
        words = mask_words(n)
        sample = row_sample(n, cp) if abi.nparts and n else None  # made on the device
        while True:
            self.head.fill(0)
            self.err.fill(0)
            if n:
                fn(grid, (CUDA_BLOCK,), (np.int64(n), table, self.pool, np.uint64(self.pool.size), self.head,
                                         self.err))
                st.launches += 1
            vec = cp.zeros(pos, dtype=cp.int64)
            vec[STATUS_ERR:STATUS_ERR + 1] = self.err.astype(cp.int64)
            vec[STATUS_HEAD:STATUS_HEAD + 1] = self.head.astype(cp.int64)
            masks, scans = {}, {}
            for k, (nid, o) in enumerate(abi.outputs.items()):
                masks[nid] = cp.empty(words, dtype=cp.uint32)
                if n:
                    self.helpers.get_function("fbx_pack_validity")(
                        (max(-(-n // (32 * CUDA_BLOCK)), 1),), (CUDA_BLOCK,),
                        (np.int64(n), outs[nid]["valid"], masks[nid], vec[STATUS_FIXED + k:]))
            for nid, o in var:
                b = outs[nid]
                scans[nid] = [_scan(cp, b["cnt"])] + ([_scan(cp, b["cnt2"])] if o.type == "list<str>" else [])
                for j, sc in enumerate(scans[nid]):
                    vec[totals_at[nid] + j: totals_at[nid] + j + 1] = sc[n:n + 1]
            if sample is not None:
                q = cp.quantile(row_pool_bytes(abi, outs, sample, xp=cp), PRESIZE_QUANTILE)
                vec[STATUS_QUANTILE:STATUS_QUANTILE + 1] = cp.ceil(q).astype(cp.int64).reshape(1)
            host = vec.get()  # the layer's one device-to-host read
            st.bytes_to_host += int(host.nbytes)
            features = (f for i in layer.nodes for f in self.plan.nodes[i].features)
            if check_error(int(host[STATUS_ERR]), layer.index, features):
                self.pool = cp.empty(max(2 * int(self.pool.size), int(host[STATUS_HEAD]) + 128 * (1 + n // CUDA_BLOCK)),
                                     dtype=cp.uint8)
                st.regrowths += 1
                continue
            break
        used = int(host[STATUS_HEAD])
        st.peak_pool_bytes = max(st.peak_pool_bytes, used)
        if sample is not None:
            sizer.observe(float(host[STATUS_QUANTILE]), len(sample), used)
        for k, (nid, o) in enumerate(abi.outputs.items()):
            if nid in chosen:  # the dictionary path's result (the kernel skipped the operator)
                values[nid] = chosen[nid]
                continue
            nulls = int(host[STATUS_FIXED + k])
            values[nid] = self._result(o.type, n, outs[nid], masks[nid], nulls, scans.get(nid),
                                       host[totals_at[nid]: totals_at[nid] + 2] if nid in totals_at else None,
                                       grid, st)
            if "status" in outs[nid]:
                status[nid] = outs[nid]["status"]

    def _result(self, type_name: str, n: int, b: dict[str, DeviceArray], mask: DeviceArray, nulls: int,
                scans: list[DeviceArray] | None, totals: np.ndarray | None, grid: tuple[int],
                st: S.KernelStats) -> DeviceValue:
        """One GPU-layer output, compacted out of the pool."""
        cp = self.cp
        if type_name in T.FIXED_TYPES:
            return self._value(type_name, n, mask, nulls, data=b["data"])
        assert scans is not None and totals is not None  # (a string or list output: its counts were scanned)
        offs, total = scans[0], int(totals[0])
        st.compactions += 1
        if type_name == "list<str>":
            nbytes = int(totals[1])
            soffs = cp.empty(total + 1, dtype=cp.int64)
            data = cp.empty(max(nbytes, 1), dtype=cp.uint8)
            soffs[:1] = 0
            if n:
                self.helpers.get_function("fbx_compact_ls")(
                    grid, (CUDA_BLOCK,), (np.int64(n), self.pool, b["off"], b["cnt"], b["off2"], b["cnt2"], offs,
                                          scans[1], soffs, data))
            return self._value(type_name, n, mask, nulls, total, nbytes, offsets=offs, str_offsets=soffs, bytes=data)
        elem = 1 if type_name == "str" else 8
        vals = cp.empty(max(total, 1), dtype=cp.uint8 if elem == 1 else cp.int64)
        if n:
            self.helpers.get_function("fbx_compact")(
                grid, (CUDA_BLOCK,), (np.int64(n), self.pool, b["off"], b["cnt"], np.int64(elem), offs, vals))
        if type_name == "str":
            return self._value(type_name, n, mask, nulls, total, offsets=offs, bytes=vals)
        return self._value(type_name, n, mask, nulls, total, offsets=offs, data=vals)

    def _value(self, type_name: str, n: int, mask: DeviceArray, nulls: int, total: int = 0, nbytes: int = 0,
               **bufs: DeviceArray) -> DeviceValue:
        """A node value from device buffers in the host layout (int64 offsets; ``mask`` a
        null mask realigned to bit 0; ``total`` elements and, for list<str>, ``nbytes``
        bytes, known on the host already): the kernel slots and the pylibcudf column."""
        cp, plc = self.cp, self.plc
        slots = {k: int(v.data.ptr) for k, v in bufs.items()}
        slots.update(valid=int(mask.data.ptr) if nulls else 0, valid_bit=0)
        read = DeviceColumn(type_name, n, slots, keep=[mask, *bufs.values()])
        if type_name in T.FIXED_TYPES:
            return DeviceValue(read, fixed_column(plc, type_name, bufs["data"], mask, nulls))
        offs = bufs["offsets"]
        if type_name == "str":
            col = strings_column(cp, plc, n, offs, bufs["bytes"], total, mask, nulls)
        elif type_name == "list<str>":
            child = strings_column(cp, plc, total, bufs["str_offsets"], bufs["bytes"], nbytes, None, 0)
            col = list_column(cp, plc, n, offs, total, child, mask, nulls)
        else:
            col = list_column(cp, plc, n, offs, total, int64_child(plc, type_name, bufs["data"], total), mask, nulls)
        return DeviceValue(read, col)

    def _upload(self, c: HostColumn, st: S.KernelStats) -> DeviceValue:
        """A host-runtime result on the device (column bytes, counted)."""
        cp = self.cp
        mask = cp.zeros(mask_words(c.n), dtype=cp.uint32)
        if c.valid is not None:
            mask.view(cp.uint8)[: c.valid.nbytes] = cp.asarray(c.valid)
        bufs = {k: cp.asarray(getattr(c, k)) for k in ("data", "offsets", "str_offsets", "bytes")
                if getattr(c, k) is not None}
        moved = c.nbytes()
        st.bytes_to_device += moved
        st.column_bytes_to_device += moved
        total = int(c.offsets[-1]) if c.offsets is not None else 0
        nbytes = int(c.str_offsets[total]) if c.str_offsets is not None else 0
        return self._value(c.type, c.n, mask, c.null_count(), total, nbytes, **bufs)


def _device_series(columns: Mapping[str, InputColumn] | FrameLike, name: str) -> "cudf.Series":
    """Input column ``name`` of a run: a cudf series (a host column is the host runtime's)."""
    col = columns[name]
    if isinstance(col, (pd.Series, HostColumn, DeviceColumn)):
        raise ArgumentError(f"column {name!r}: the CUDA runtime reads cudf columns, not a {type(col).__name__}")
    return col


def _scan(cp: ModuleType, counts: DeviceArray) -> DeviceArray:
    """Offsets from per-row counts: n + 1 int64 values starting at 0, on the device."""
    out = cp.zeros(int(counts.size) + 1, dtype=cp.int64)
    if counts.size:
        out[1:] = cp.cumsum(counts)
    return out
