"""Run a plan's meta-kernels on the host: one ctypes launch per layer, over Arrow buffers.

Per layer: allocate the outputs, presize the pool from a high quantile of the layer's
recent bytes per row (:class:`~fbrapids.kernels.pool.PoolSizer`, capped, so steady-state
runs do not overflow and one outlier row cannot inflate later presizes), launch the layer
kernel over all rows (OpenMP inside), re-run after growing the pool if it overflowed
anyway, compact the variable-length results out of the pool into Arrow buffers, reset the
pool.  Launches per frame = number of layers.

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
import functools
import threading
from types import ModuleType
from typing import TYPE_CHECKING, AbstractSet, Callable, Mapping, Sized, TypeAlias, Union

import numpy as np

from fbrapids.errors import KernelRuntimeError, OperatorError
from fbrapids.kernels import counters as S, dictionary as D, host_helpers as R, host_memory as HM, types as T
from fbrapids.kernels.abi import InputLayout, LayerABI, check_error, layer_abi, output_slots
from fbrapids.kernels.columns import HostColumn, from_series, pack_validity
from fbrapids.kernels.compile_host import load_source
from fbrapids.kernels.device_columns import DeviceColumn
from fbrapids.kernels.device_types import XArray
from fbrapids.kernels.plan import Layer, Plan
from fbrapids.kernels.pool import HostPool, PoolSizer, row_sample
from fbrapids.kernels.render import HOST_BLOCK, kernel_name, render_module
from fbrapids.kernels.runtime import InputColumn, RunResult, Runtime, row_pool_bytes

if TYPE_CHECKING:  # (annotations only)
    from fbrapids.frames.backend import FrameLike

_local = threading.local()


def thread_pool() -> HostPool:
    """This thread's pool (dask may run partitions in several threads of one process)."""
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = HostPool()
    return pool


def _rows(col: HostColumn | DeviceColumn | Sized) -> int:
    return col.n if isinstance(col, (HostColumn, DeviceColumn)) else len(col)


#: a node's value in a host run: a HostColumn, or an input column in the kernels' slot layout (a DeviceColumn)
HostValue: TypeAlias = Union[HostColumn, DeviceColumn]

_ARGTYPES = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p]


def check_fit(plan: Plan, nid: int, arg: HostColumn) -> None:
    """Raise when a value of ``arg`` does not fit the type node ``nid`` converts it to
    (``Impl.checks_fit``, e.g. ``cast``), naming the features, the input, the row and the value."""
    assert arg.data is not None  # (the checked conversions take fixed-width inputs)
    check_fit_values(plan, nid, arg.data[: arg.n], arg.validity_bool())


def check_fit_values(plan: Plan, nid: int, data: XArray, valid: XArray, xp: ModuleType = np) -> None:
    """:func:`check_fit` of the argument's ``data`` and ``valid`` (bool) arrays of the
    array module ``xp``: the host's numpy arrays, or the CUDA runtime's cupy arrays (one
    count read back when every value fits)."""
    node = plan.nodes[nid]
    to = node.implementation().checks_fit
    if to is None:
        raise OperatorError(f"{node.what}: its operator declares no conversion to check")
    bad = T.misfits(data, to, xp=xp) & valid
    count = int(bad.sum())
    if count:
        row = int(xp.argmax(bad.astype(xp.int8)))
        value = data[row].item()
        raise KernelRuntimeError(
            f"feature {', '.join(repr(f) for f in node.features)}: {node.label}: {plan.nodes[node.args[0]].what} "
            f"row {row} holds {value!r}, which does not fit {to} ({count} such rows); a conversion never "
            f"wraps: clip the values first")


class HostPlan(Runtime):
    """A plan compiled for the host (the given layers; by default all of them)."""

    def __init__(self, plan: Plan, layers: list[Layer] | None = None,
                 layouts: dict[int, InputLayout] | None = None) -> None:
        self.plan = plan
        self.layers = list(plan.layers) if layers is None else layers
        #: input offset widths other than int64 (inputs then come as columns with ``pointers()``)
        self.layouts = dict(layouts or {})
        self.source = render_module(plan, "host", self.layers, self.layouts)
        self.lib = load_source(self.source)
        self.kernels = []
        for layer in self.layers:
            fn = getattr(self.lib, kernel_name(layer))
            fn.argtypes, fn.restype = _ARGTYPES, None
            self.kernels.append(fn)
        self.abis = [layer_abi(plan, l) for l in self.layers]
        #: per layer, the presize of its pool from recent runs' bytes per row
        self.sizers = [PoolSizer() for _ in self.layers]
        self.stats = S.KernelStats()
        self._lock = threading.Lock()
        self._sizer_lock = threading.Lock()
        #: per dictionary-path operator, its one-operator plan (run over distinct values)
        self._distinct_runtimes: dict[int, HostPlan] = {}

    @property
    def pool_bytes_per_row(self) -> list[float]:
        """Per layer, the bytes per row its next presize uses."""
        return [s.per_row() for s in self.sizers]

    def run(self, columns: Mapping[str, InputColumn] | FrameLike,
            pool: HostPool | None = None, record: bool = True) -> RunResult:
        """Run every layer over the input columns; the plan's outputs as HostColumns.

        ``columns`` maps each input name to a pandas series, a HostColumn, or any column
        with ``n`` and ``pointers()`` in the slot order of :mod:`fbrapids.kernels.abi`
        (read with this plan's ``layouts``).  With the
        default (per-thread) pool, each layer's pool is sized before the launch from that
        layer's recent bytes per row (:class:`~fbrapids.kernels.pool.PoolSizer`), so only a
        first run or an unusually heavy partition overflows and re-runs.  A pool passed by
        the caller is used at the size the caller gave it.

        Operators that may run once per distinct value do so where :func:`fbrapids.kernels.
        dictionary.choose` says (the layer kernel skips them); ``record=False`` leaves the
        process-wide counters to the caller (a run inside another run).
        """
        plan = self.plan
        presize = pool is None
        pool = pool or thread_pool()
        n = _rows(next(iter(columns.values()), [])) if isinstance(columns, Mapping) else len(columns)
        values: dict[int, HostValue] = {}
        for node in plan.nodes:
            if node.op is None:
                col = columns[node.column()]
                values[node.id] = col if isinstance(col, (HostColumn, DeviceColumn)) else from_series(col, node.column())
        run_stats = S.KernelStats(partitions=1, rows=n)
        status: dict[int, np.ndarray] = {}
        presizes0 = pool.presizes
        how = D.mode() if plan.dictionary and plan.dictionary_nodes else "off"
        coded = {nid: D.Coded(*own) for nid, own in
                 ((nid, c.dictionary() if isinstance(c, HostColumn) else None) for nid, c in values.items())
                 if own is not None}
        skip = D.flags(plan)
        for layer, fn, abi, sizer in zip(self.layers, self.kernels, self.abis, self.sizers):
            done = self._dictionary_path(layer, n, values, coded, skip, how, run_stats) if how != "off" else set()
            if len(done) == len(layer.nodes):
                continue  # every operator of the layer ran once per distinct value: no launch
            if presize and abi.nparts:
                need = sizer.estimate(n, abi.nparts)
                if need:
                    pool.reserve(need)
            self._run_layer(layer, fn, abi, n, values, status, pool, run_stats, sizer, skip, done)
        run_stats.presizes = pool.presizes - presizes0
        run_stats.regrowths = pool.regrowths - pool.reported_regrowths
        pool.reported_regrowths = pool.regrowths
        run_stats.pool_capacity = pool.capacity
        with self._lock:
            self.stats += run_stats
        if record:
            S.record(run_stats)
        out = {name: values[nid] for name, nid in plan.outputs.items()}
        st = {name: status[nid] for name, nid in plan.outputs.items() if nid in status}
        return RunResult(out, st, run_stats)

    def _dictionary_path(self, layer: Layer, n: int, values: dict[int, HostValue],
                         coded: dict[int, D.Coded], skip: np.ndarray, how: str, st: S.KernelStats) -> set[int]:
        """Run the layer's operators that take the dictionary path on this partition (their
        results into ``values``, their codes into ``coded``, their skip flags set); returns their ids."""
        plan = self.plan
        done: set[int] = set()
        # the path reads host columns (a column in the device layout keeps its operators on the row path)
        host = {nid: c for nid, c in values.items() if isinstance(c, HostColumn)}
        eligible = [nid for nid in layer.nodes if plan.nodes[nid].dict_slot is not None
                    and all(a in coded or a in host for a in plan.nodes[nid].args)]
        chosen = {nid for nid in eligible if D.choose(plan, plan.nodes[nid], host, coded, n, how)}
        # the chosen operators' plain inputs coded at once, in parallel (each is one thread's work)
        plain = {a: host[a] for nid in chosen for a in plan.nodes[nid].args if a not in coded}
        coded.update(D.encode_all(plain))
        for nid in eligible:
            node = plan.nodes[nid]
            if nid not in chosen and not (all(a in coded for a in node.args)
                                          and D.choose(plan, node, host, coded, n, how)):
                continue  # (an operator over inputs the others coded meanwhile may take the path too)
            res = D.run_coded(plan, node, host, coded, functools.partial(self._run_distinct, nid, st=st), how)
            if res is None:
                continue
            values[nid] = host[nid] = D.take(res.values, res.codes)
            coded[nid] = res
            skip[node.dict_slot] = 1
            done.add(nid)
            made = D.hash_count(node, res.values)
            st.hashes += made
            st.hashes_saved += D.hash_count(node, host[nid]) - made
            st.dictionary_runs += 1
        return done

    def _run_distinct(self, nid: int, columns: list[HostColumn], st: S.KernelStats) -> HostColumn:
        """Operator ``nid`` over the distinct values ``columns`` (one per argument), row by row."""
        runtime = self._distinct_runtimes.get(nid)
        if runtime is None:
            runtime = self._distinct_runtimes[nid] = HostPlan(self.plan.node_plan(nid))
        res = runtime.run({f"a{i}": c for i, c in enumerate(columns)}, record=False)
        for k in ("launches", "compactions", "regrowths", "presizes"):
            setattr(st, k, getattr(st, k) + getattr(res.stats, k))
        st.peak_pool_bytes = max(st.peak_pool_bytes, res.stats.peak_pool_bytes)
        return res.columns["out"]

    def _run_layer(self, layer: Layer, fn: Callable[..., None], abi: LayerABI, n: int, values: dict[int, HostValue],
                   status: dict[int, np.ndarray], pool: HostPool, st: S.KernelStats, sizer: PoolSizer,
                   skip: np.ndarray | None = None, done: AbstractSet[int] = frozenset()) -> None:
        """Run one layer (re-running it after an overflow); the operators in ``done`` (on
        the dictionary path, flagged in ``skip``) keep the values they have."""
        plan = self.plan
        for nid in layer.nodes:  # host columns: device columns (the device ABI) are the CUDA runtime's to check
            if plan.nodes[nid].implementation().checks_fit and isinstance(arg := values[plan.nodes[nid].args[0]], HostColumn):
                check_fit(plan, nid, arg)
        ptrs = [0] * abi.nslots
        for nid, first in abi.inputs.items():
            for i, p in enumerate(values[nid].pointers()):
                ptrs[first + i] = p
        outs: dict[int, dict[str, np.ndarray]] = {}
        keep = []
        for nid, o in abi.outputs.items():
            node = plan.nodes[nid]
            bufs: dict[str, np.ndarray] = {"valid": HM.empty(n, np.uint8)}
            for i, name in enumerate(output_slots(o.type)):
                if name == "data":
                    bufs[name] = HM.empty(n, T.NUMPY_DTYPE[o.type])
                elif name != "valid":
                    bufs[name] = (HM.zeros if name.startswith("off") else HM.empty)(n, np.int64)
                ptrs[o.first + i] = bufs[name].ctypes.data
            if o.status is not None:
                bufs["status"] = HM.full(n, -1, np.int8)
                ptrs[o.status] = bufs["status"].ctypes.data
            for buf, slot in zip(node.implementation().buffers, o.buffers):
                ptrs[slot] = buf.ctypes.data
                keep.append(buf)
            outs[nid] = bufs
        if abi.skip is not None and skip is not None:
            ptrs[abi.skip] = skip.ctypes.data
        arr = (ctypes.c_void_p * max(abi.nslots, 1))(*ptrs)
        while True:
            pool.reset()
            fn(n, ctypes.cast(arr, ctypes.c_void_p), pool.address, pool.capacity,
               pool.head.ctypes.data, pool.err.ctypes.data)
            st.launches += 1
            err = int(pool.err[0])
            try:
                overflow = check_error(err, layer.index, (f for i in layer.nodes for f in plan.nodes[i].features))
            except Exception:
                pool.reset()
                raise
            if overflow:
                pool.grow(pool.used() + 128 * (1 + n // HOST_BLOCK))
                continue
            break
        used = pool.used()
        st.peak_pool_bytes = max(st.peak_pool_bytes, used)
        if abi.nparts and n:
            sample = row_pool_bytes(abi, outs, row_sample(n))
            with self._sizer_lock:
                sizer.observe_rows(sample, used)
        for nid, o in abi.outputs.items():
            if nid in done:
                continue
            b = outs[nid]
            valid = pack_validity(b["valid"])
            if o.type in T.FIXED_TYPES:
                values[nid] = col = HostColumn(o.type, n, valid=valid, data=b["data"])
            elif o.type == "list<str>":
                loff, soffs, data = R.compact_str_list(pool.buffer, b["off"], b["cnt"], b["off2"], b["cnt2"])
                values[nid] = col = HostColumn(o.type, n, valid=valid, offsets=loff, str_offsets=soffs, bytes=data)
                st.compactions += 1
            else:
                offsets, data = R.compact(pool.buffer, b["off"], b["cnt"], 1 if o.type == "str" else 8, HOST_BLOCK)
                if o.type == "str":
                    values[nid] = col = HostColumn(o.type, n, valid=valid, offsets=offsets, bytes=data)
                else:
                    values[nid] = col = HostColumn(o.type, n, valid=valid, offsets=offsets, data=data)
                st.compactions += 1
            if "status" in b:
                status[nid] = b["status"]
            st.hashes += D.hash_count(plan.nodes[nid], col)
        pool.reset()  # O(1): everything that outlives the layer was compacted out above
