"""Run a plan's meta-kernels on the host: one ctypes launch per layer, over Arrow buffers.

Per layer: allocate the outputs, size the pool from the layer's peak pool bytes per row
seen so far (so steady-state runs never overflow), launch the layer kernel over all rows
(OpenMP inside), re-run after growing the pool if it overflowed anyway, compact the
variable-length results out of the pool into Arrow buffers, reset the pool.  Launches per frame = number of layers.

Example:
    >>> import pandas as pd
    >>> from fbrapids import ops
    >>> from fbrapids.kernels.plan import build_plan
    >>> plan = build_plan({"h": ops.hour("ts")}, {"ts": "i64"})
    >>> res = HostPlan(plan).run({"ts": pd.Series([3600, 7300])})
    >>> res.columns["h"].data.tolist(), res.stats.launches
    ([1, 2], 1)
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fbrapids.kernels import host_runtime as R
from fbrapids.kernels import stats as S
from fbrapids.kernels import types as T
from fbrapids.kernels.columns import HostColumn, from_series, pack_validity
from fbrapids.kernels.compile_host import load_source
from fbrapids.kernels.plan import Layer, Plan
from fbrapids.kernels.pool import HostPool
from fbrapids.kernels.render import HOST_BLOCK, kernel_name, layer_abi, render_module
from fbrapids.errors import KernelRuntimeError

FBX_ERR_POOL_OVERFLOW = 1
FBX_ERR_KEY_TOO_LONG = 2

_local = threading.local()


def thread_pool() -> HostPool:
    """This thread's pool (dask may run partitions in several threads of one process)."""
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = HostPool()
    return pool


@dataclass
class RunResult:
    """Output columns by feature name, side status arrays by feature name, and counters."""

    columns: dict[str, HostColumn]
    status: dict[str, np.ndarray] = field(default_factory=dict)
    stats: S.KernelStats = field(default_factory=S.KernelStats)


POOL_HEADROOM = 1.125  #: presized pool = peak bytes per row so far x rows x this


_ARGTYPES = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p]


class HostPlan:
    """A plan compiled for the host (the given layers; by default all of them)."""

    def __init__(self, plan: Plan, layers: list[Layer] | None = None) -> None:
        self.plan = plan
        self.layers = list(plan.layers) if layers is None else layers
        self.source = render_module(plan, "host", self.layers)
        self.lib = load_source(self.source)
        self.kernels = []
        for layer in self.layers:
            fn = getattr(self.lib, kernel_name(layer))
            fn.argtypes, fn.restype = _ARGTYPES, None
            self.kernels.append(fn)
        self.abis = [layer_abi(plan, l) for l in self.layers]
        #: per layer, the largest pool bytes per input row a successful launch used
        self.pool_bytes_per_row = [0.0] * len(self.layers)
        self.stats = S.KernelStats()
        self._lock = threading.Lock()

    def run(self, columns: dict[str, pd.Series] | pd.DataFrame, pool: HostPool | None = None) -> RunResult:
        """Run every layer over the input columns; the plan's outputs as HostColumns.

        With the default (per-thread) pool, each layer's pool is sized before the launch
        from that layer's peak bytes per row so far (plus headroom), so only a first run or
        an unusually heavy partition overflows and re-runs.  A pool passed by the caller is
        used at the size the caller gave it.
        """
        plan = self.plan
        presize = pool is None
        pool = pool or thread_pool()
        n = len(columns) if isinstance(columns, pd.DataFrame) else len(next(iter(columns.values()), []))
        values: dict[int, HostColumn] = {}
        for node in plan.nodes:
            if node.op is None:
                values[node.id] = from_series(columns[node.expr.name], node.expr.name)
        run_stats = S.KernelStats(partitions=1, rows=n)
        status: dict[int, np.ndarray] = {}
        presizes0 = pool.presizes
        for i, (layer, fn, abi) in enumerate(zip(self.layers, self.kernels, self.abis)):
            if presize and n and self.pool_bytes_per_row[i]:
                pool.reserve(int(self.pool_bytes_per_row[i] * n * POOL_HEADROOM) + 128 * (1 + n // HOST_BLOCK))
            used = self._run_layer(layer, fn, abi, n, values, status, pool, run_stats)
            if n:
                self.pool_bytes_per_row[i] = max(self.pool_bytes_per_row[i], used / n)
        run_stats.presizes = pool.presizes - presizes0
        run_stats.regrowths = pool.regrowths - getattr(pool, "_reported_regrowths", 0)
        pool._reported_regrowths = pool.regrowths  # type: ignore[attr-defined]
        run_stats.pool_capacity = pool.capacity
        with self._lock:
            self.stats += run_stats
        S.record(run_stats)
        out = {name: values[nid] for name, nid in plan.outputs.items()}
        st = {name: status[nid] for name, nid in plan.outputs.items() if nid in status}
        return RunResult(out, st, run_stats)

    def _run_layer(self, layer: Layer, fn, abi, n: int, values: dict[int, HostColumn],
                   status: dict[int, np.ndarray], pool: HostPool, st: S.KernelStats) -> int:
        """Run one layer (re-running it after an overflow); the pool bytes it used."""
        plan = self.plan
        ptrs = [0] * abi.nslots
        for nid, first in abi.inputs.items():
            for i, p in enumerate(values[nid].pointers()):
                ptrs[first + i] = p
        outs: dict[int, dict[str, np.ndarray]] = {}
        keep = []
        for nid, o in abi.outputs.items():
            node = plan.nodes[nid]
            bufs: dict[str, np.ndarray] = {"valid": np.empty(n, dtype=np.uint8)}
            if o.type in T.FIXED_TYPES:
                bufs["data"] = np.empty(n, dtype=T.NUMPY_DTYPE[o.type])
                order = ["data", "valid"]
            else:
                bufs["off"], bufs["cnt"] = np.zeros(n, dtype=np.int64), np.empty(n, dtype=np.int64)
                order = ["valid", "off", "cnt"]
                if o.type == "list<str>":
                    bufs["off2"], bufs["cnt2"] = np.zeros(n, dtype=np.int64), np.empty(n, dtype=np.int64)
                    order += ["off2", "cnt2"]
            for i, name in enumerate(order):
                ptrs[o.first + i] = bufs[name].ctypes.data
            if o.status is not None:
                bufs["status"] = np.full(n, -1, dtype=np.int8)
                ptrs[o.status] = bufs["status"].ctypes.data
            for b, slot in zip(node.impl.buffers, o.buffers):
                ptrs[slot] = b.ctypes.data
                keep.append(b)
            outs[nid] = bufs
        arr = (ctypes.c_void_p * max(abi.nslots, 1))(*ptrs)
        while True:
            pool.reset()
            fn(n, ctypes.cast(arr, ctypes.c_void_p), pool.address, pool.capacity,
               pool.head.ctypes.data, pool.err.ctypes.data)
            st.launches += 1
            err = int(pool.err[0])
            if err & FBX_ERR_KEY_TOO_LONG:
                pool.reset()
                raise KernelRuntimeError(
                    f"layer {layer.index}: a cross / n-gram key is longer than 4096 bytes "
                    f"(features: {', '.join(sorted({f for i in layer.nodes for f in plan.nodes[i].features}))})")
            if err & FBX_ERR_POOL_OVERFLOW:
                pool.grow(pool.used() + 128 * (1 + n // 256))
                continue
            break
        used = pool.used()
        st.peak_pool_bytes = max(st.peak_pool_bytes, used)
        for nid, o in abi.outputs.items():
            b = outs[nid]
            valid = pack_validity(b["valid"])
            if o.type in T.FIXED_TYPES:
                values[nid] = HostColumn(o.type, n, valid=valid, data=b["data"])
            elif o.type == "list<str>":
                loff, soffs, data = R.compact_str_list(pool.buffer, b["off"], b["cnt"], b["off2"], b["cnt2"])
                values[nid] = HostColumn(o.type, n, valid=valid, offsets=loff, str_offsets=soffs, bytes=data)
                st.compactions += 1
            else:
                offsets, data = R.compact(pool.buffer, b["off"], b["cnt"], 1 if o.type == "str" else 8, HOST_BLOCK)
                if o.type == "str":
                    values[nid] = HostColumn(o.type, n, valid=valid, offsets=offsets, bytes=data)
                else:
                    values[nid] = HostColumn(o.type, n, valid=valid, offsets=offsets, data=data)
                st.compactions += 1
            if "status" in b:
                status[nid] = b["status"]
        pool.reset()  # O(1): everything that outlives the layer was compacted out above
        return used
