"""Run a plan on the GPU: the CUDA meta-kernels through ``cupy.RawModule``, one launch per
GPU layer; layers placed on the CPU (operators whose footprint exceeds the device budget)
run through the host runtime and their results are copied to the device.

Column marshalling in this first version goes through Arrow host buffers: a cudf input
column is copied to the host once per partition (``to_pandas``: Arrow layout, strings as
large_string, i.e. int64 offsets -- cudf's int32 offsets are widened there), its buffers
are uploaded with cupy, and the outputs come back the same way into cudf columns.  The
kernels themselves, the pool (one atomicAdd per block) and the compaction run on the
device.  Requires cupy and cudf (the ``gpu`` extra); written against their public APIs
(``cupy.RawModule``, the ``cudf.Series`` constructor), and exercised by the tests marked ``gpu``.

Example (on a GPU machine)::

    gdf = cudf.DataFrame(df)
    out = gdf.fbx.extract(h=ops.hour("ts"))   # runs CudaPlan(plan).run(gdf)
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pandas as pd

from fbrapids import backend as backends
from fbrapids.kernels import counters as S
from fbrapids.kernels import types as T
from fbrapids.kernels.abi import check_error, input_slots, layer_abi, output_slots
from fbrapids.kernels.columns import HostColumn, from_series, pack_validity, to_series
from fbrapids.kernels.plan import Plan
from fbrapids.kernels.pool import initial_pool_bytes
from fbrapids.kernels.render import CUDA_BLOCK, kernel_name, render_module
from fbrapids.kernels.runtime import RunResult, Runtime
from fbrapids.kernels.runtime_host import HostPlan

COMPACT_SRC = r"""
extern "C" __global__ void fbx_compact(long long n, const char* pool, const long long* off, const long long* cnt,
                                       long long elem, const long long* out_off, char* values) {
  long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= n) return;
  long long nb = cnt[r] * elem;
  for (long long i = 0; i < nb; ++i) values[out_off[r] * elem + i] = pool[off[r] + i];
}
extern "C" __global__ void fbx_compact_ls(long long n, const char* pool, const long long* offa, const long long* cnta,
                                          const long long* offb, const long long* cntb, const long long* loff,
                                          const long long* boff, long long* soffs, char* bytes) {
  long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r == 0) soffs[0] = 0;
  if (r >= n) return;
  const long long* ends = (const long long*)(pool + offa[r]);
  for (long long i = 0; i < cnta[r]; ++i) soffs[loff[r] + i + 1] = boff[r] + ends[i];
  for (long long i = 0; i < cntb[r]; ++i) bytes[boff[r] + i] = pool[offb[r] + i];
}
"""


class CudaPlan(Runtime):
    """A plan compiled for the device (GPU layers) plus the host (CPU-placed layers)."""

    def __init__(self, plan: Plan) -> None:
        be = backends.get_backend("gpu")
        self.cp = be.xp
        self.cudf = be.xdf
        self.backend = be
        self.plan = plan
        self.gpu_layers = [l for l in plan.layers if l.placement == "gpu"]
        self.cpu_layers = [l for l in plan.layers if l.placement == "cpu"]
        self.source = render_module(plan, "cuda", self.gpu_layers)
        self.module = self.cp.RawModule(code=self.source, options=("--std=c++17",)) if self.gpu_layers else None
        self.compact_module = self.cp.RawModule(code=COMPACT_SRC)
        #: CPU-placed layers, each compiled as a plan of its own for the host runtime
        self.host_layers = {l.index: HostPlan(plan.layer_plan(l)) for l in self.cpu_layers}
        self.stats = S.KernelStats()
        self._lock = threading.Lock()
        self._pool_cap = initial_pool_bytes()

    # -- marshalling ---------------------------------------------------------------------
    def _upload(self, c: HostColumn) -> dict[str, Any]:
        cp = self.cp
        d = {"col": c}
        for k in ("valid", "data", "offsets", "str_offsets", "bytes"):
            a = getattr(c, k)
            d[k] = None if a is None else cp.asarray(a)
        return d

    @staticmethod
    def _ptrs(dev: dict[str, Any], type_name: str) -> list[int]:
        def p(k: str) -> int:
            if k == "valid_bit":
                return 0
            a = dev.get(k)
            return 0 if a is None else int(a.data.ptr)

        return [p(k) for k in input_slots(type_name)]

    def _download(self, dev: dict[str, Any], type_name: str, n: int) -> HostColumn:
        get = {k: (None if v is None or k == "col" else v.get()) for k, v in dev.items()}
        return HostColumn(type_name, n, valid=get.get("valid"), data=get.get("data"), offsets=get.get("offsets"),
                          str_offsets=get.get("str_offsets"), bytes=get.get("bytes"))

    # -- running -------------------------------------------------------------------------
    def run(self, gdf: Any) -> RunResult:
        """The plan's output columns as cudf series (index of ``gdf``)."""
        cp = self.cp
        host_df = gdf[[c for c in self.plan.input_columns()]]  # from_series reads cudf via Arrow
        n = len(host_df)
        dev: dict[int, dict[str, Any]] = {}
        for node in self.plan.nodes:
            if node.op is None:
                dev[node.id] = self._upload(from_series(host_df[node.expr.name], node.expr.name))
        st = S.KernelStats(partitions=1, rows=n)
        pool = cp.empty(self._pool_cap, dtype=cp.uint8)
        head, err = cp.zeros(1, dtype=cp.uint64), cp.zeros(1, dtype=cp.int32)
        for layer in self.plan.layers:
            if layer.placement == "cpu":
                cols = {nid: self._download(dev[nid], self.plan.nodes[nid].type, n)
                        for nid in {a for i in layer.nodes for a in self.plan.nodes[i].args}}
                self._run_host_layer(layer, cols, dev, st)
                continue
            pool = self._run_layer(layer, n, dev, pool, head, err, st)
        with self._lock:
            self.stats += st
        S.record(st)
        out = {}
        index = gdf.index.to_pandas() if hasattr(gdf.index, "to_pandas") else pd.RangeIndex(n)
        for name, nid in self.plan.outputs.items():
            hc = self._download(dev[nid], self.plan.nodes[nid].type, n)
            out[name] = backends.to_backend(to_series(hc, index, name), self.backend)
        return RunResult(out, {}, st)

    def _run_host_layer(self, layer, cols: dict[int, HostColumn], dev, st) -> None:
        """A CPU-placed layer: the host runtime's ``run`` on host copies of its inputs,
        results copied to the device."""
        res = self.host_layers[layer.index].run({f"n{nid}": c for nid, c in cols.items()})
        st += res.stats
        for nid in layer.nodes:
            dev[nid] = self._upload(res.columns[f"n{nid}"])

    def _run_layer(self, layer, n: int, dev, pool, head, err, st):
        cp = self.cp
        abi = layer_abi(self.plan, layer)
        ptrs = [0] * abi.nslots
        for nid, first in abi.inputs.items():
            for i, p in enumerate(self._ptrs(dev[nid], self.plan.nodes[nid].type)):
                ptrs[first + i] = p
        outs: dict[int, dict[str, Any]] = {}
        keep = []
        for nid, o in abi.outputs.items():
            node = self.plan.nodes[nid]
            b: dict[str, Any] = {"valid": cp.empty(n, dtype=cp.uint8)}
            for i, k in enumerate(output_slots(o.type)):
                if k == "data":
                    b[k] = cp.empty(n, dtype=T.NUMPY_DTYPE[o.type])
                elif k != "valid":
                    b[k] = cp.zeros(n, dtype=cp.int64)
                ptrs[o.first + i] = int(b[k].data.ptr)
            if o.status is not None:
                b["status"] = cp.full(n, -1, dtype=cp.int8)
                ptrs[o.status] = int(b["status"].data.ptr)
            for buf, slot in zip(node.impl.buffers, o.buffers):
                dbuf = cp.asarray(buf)
                keep.append(dbuf)
                ptrs[slot] = int(dbuf.data.ptr)
            outs[nid] = b
        bufs = cp.asarray(np.asarray(ptrs or [0], dtype=np.uint64))
        fn = self.module.get_function(kernel_name(layer))
        grid = (max((n + CUDA_BLOCK - 1) // CUDA_BLOCK, 1),)
        while True:
            head.fill(0)
            err.fill(0)
            if n:
                fn(grid, (CUDA_BLOCK,), (np.int64(n), bufs, pool, np.uint64(pool.size), head, err))
                st.launches += 1
            e = int(err.get()[0])
            if check_error(e, layer.index, (f for i in layer.nodes for f in self.plan.nodes[i].features)):
                need = int(head.get()[0])
                self._pool_cap = max(2 * pool.size, need + 128 * (1 + n // CUDA_BLOCK))
                pool = cp.empty(self._pool_cap, dtype=cp.uint8)
                st.regrowths += 1
                continue
            break
        st.peak_pool_bytes = max(st.peak_pool_bytes, int(head.get()[0]))
        st.pool_capacity = max(st.pool_capacity, int(pool.size))
        for nid, o in abi.outputs.items():
            b = outs[nid]
            valid_host = b["valid"].get()
            packed = pack_validity(valid_host)
            d: dict[str, Any] = {"valid": None if packed is None else cp.asarray(packed)}
            if o.type in T.FIXED_TYPES:
                d["data"] = b["data"]
            elif o.type == "list<str>":
                loff = cp.concatenate([cp.zeros(1, cp.int64), cp.cumsum(b["cnt"])])
                boff = cp.concatenate([cp.zeros(1, cp.int64), cp.cumsum(b["cnt2"])])
                soffs = cp.empty(int(loff[-1].get()) + 1, dtype=cp.int64)
                data = cp.empty(max(int(boff[-1].get()), 1), dtype=cp.uint8)
                self.compact_module.get_function("fbx_compact_ls")(
                    grid, (CUDA_BLOCK,), (np.int64(n), pool, b["off"], b["cnt"], b["off2"], b["cnt2"], loff, boff,
                                          soffs, data))
                d.update(offsets=loff, str_offsets=soffs, bytes=data)
                st.compactions += 1
            else:
                elem = 1 if o.type == "str" else 8
                offs = cp.concatenate([cp.zeros(1, cp.int64), cp.cumsum(b["cnt"])])
                total = int(offs[-1].get())
                vals = cp.empty(max(total, 1), dtype=cp.uint8 if elem == 1 else cp.int64)
                self.compact_module.get_function("fbx_compact")(
                    grid, (CUDA_BLOCK,), (np.int64(n), pool, b["off"], b["cnt"], np.int64(elem), offs, vals))
                d["offsets"] = offs
                d["bytes" if elem == 1 else "data"] = vals
                st.compactions += 1
            dev[nid] = d
        return pool  # reset is O(1): head.fill(0) at the next launch
