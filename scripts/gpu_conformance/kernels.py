"""Every CUDA source fbrapids generates, compiled for a real architecture (``sm_90``), so that
ptxas runs as it does when cupy loads a kernel on the device: shared memory, registers and
other per-kernel limits fail here instead (D1: a wide layer ptxas refused on the device).

Jobs (each a name -> a function giving ``(source, what it covers)``):

* ``limits``: a probe that ptxas runs at all (a kernel over the 48 KiB shared-memory limit must
  fail), then plans at each layer's pool-part limit (32 list<i64> outputs, 16 list<str>) and
  past it (48 list outputs at one depth: cut in two);
* ``layouts``: one plan with every built-in operator, over cudf's offset layouts (int32 string /
  list offsets); ``all-ops``: the same over the host's int64 layout (not in the stage by default:
  ~40 s of CPU for what ``layouts`` and ``workload`` already compile);
* ``dictionary``: the CUDA dictionary path's one-operator plans and layer kernel with a skip array;
* ``workload``: the synthetic workload's plan; ``helpers``: the runtime's device helpers and
  the embedding store's slot map.

The heavy jobs run in parallel processes (NVRTC + ptxas take ~40 s of CPU for the all-ops plan).
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable

ARCH = "sm_90"


def _builtins(repo: Path):
    sys.path.insert(0, str(repo / "tests" / "kernels"))
    import test_kernels_cuda_compile as T  # every_builtin / wide / SCHEMA: one list, shared with the CPU tests

    return T


def _limits(repo: Path) -> list[tuple[str, str, int]]:
    from fbrapids.kernels.abi import CUDA_MAX_PARTS, layer_abi
    from fbrapids.kernels.plan import build_plan
    from fbrapids.kernels.render import render_module

    T = _builtins(repo)
    probe = ('extern "C" __global__ void k(unsigned long long* o) { __shared__ unsigned long long s[49 * 128]; '
             's[threadIdx.x] = 1; __syncthreads(); o[0] = s[threadIdx.x + 1]; }')
    out = [("probe: 49 KiB of shared memory (ptxas must refuse it)", probe, -1)]
    for n_int, n_str in ((CUDA_MAX_PARTS, 0), (0, CUDA_MAX_PARTS // 2), (48, 0)):
        plan = build_plan(T.wide(n_int, n_str), T.SCHEMA, backend="gpu")
        parts = [layer_abi(plan, l).nparts for l in plan.layers]
        out.append((f"{n_int} list<i64> + {n_str} list<str> outputs at one depth: layers of {parts} parts",
                    render_module(plan, "cuda"), len(plan.layers)))
    return out


def _all_ops(repo: Path, cudf_layouts: bool) -> list[tuple[str, str, int]]:
    from fbrapids import ops
    from fbrapids.kernels.abi import InputLayout
    from fbrapids.kernels.plan import build_plan
    from fbrapids.kernels.render import render_module

    T = _builtins(repo)
    feats = T.every_builtin()
    feats["deep"] = ops.cross(ops.split("q", " ", buckets=10), ops.hour("ts"), buckets=100, cap=8)
    plan = build_plan(feats, T.SCHEMA, backend="gpu")
    layouts = None
    if cudf_layouts:
        ids = {plan.nodes[i].expr.name: i for i in range(len(plan.nodes)) if plan.nodes[i].op is None}
        layouts = {ids["q"]: InputLayout(offsets=4), ids["ctx"]: InputLayout(offsets=8),
                   ids["ids"]: InputLayout(offsets=4), ids["seq"]: InputLayout(offsets=4, str_offsets=4)}
    what = f"every built-in ({len(feats)} features) in one plan" + (", cudf offset layouts" if cudf_layouts else "")
    return [(what, render_module(plan, "cuda", layouts=layouts), len(plan.layers))]


def _workload(repo: Path) -> list[tuple[str, str, int]]:
    from fbrapids.datasets.synthetic.views import features
    from fbrapids.kernels.plan import build_plan
    from fbrapids.kernels.render import render_module

    schema = {"ts": "i64", "user_id": "i64", "ad_id": "i64", "advertiser_id": "i64", "category": "i32",
              "gender": "str", "city": "str", "os": "str", "geo_city": "str", "age": "i32", "price": "f64",
              "query": "str", "title": "str", "interests": "str"}
    plan = build_plan(features(), schema, backend="gpu")
    return [("the synthetic workload's plan", render_module(plan, "cuda"), len(plan.layers))]


def _dictionary(repo: Path) -> list[tuple[str, str, int]]:
    """The CUDA dictionary path's kernels: each eligible operator's one-operator plan (run over
    a categorical's categories) and the layer kernel with its skip array."""
    from fbrapids import ops
    from fbrapids.kernels.plan import build_plan
    from fbrapids.kernels.render import render_module
    from fbrapids.kernels.runtime_cuda import dictionary_eligible

    plan = build_plan({"hs": ops.hash("c"), "bs": ops.hash_bucket("c", 1000), "hi": ops.hash("k"),
                       "bi": ops.hash_bucket("k", 97)}, {"c": "str", "k": "i32"}, backend="gpu")
    coded = {n.id for n in plan.nodes if n.op is None}
    eligible = [n.id for n in plan.nodes if n.op is not None and dictionary_eligible(n, coded)]
    out = [(f"dictionary path: {plan.nodes[i].label} over its categories", render_module(plan.node_plan(i), "cuda"), 1)
           for i in eligible]
    return out + [("dictionary path: the layer kernel with its skip array", render_module(plan, "cuda"), 1)]


def _helpers(repo: Path) -> list[tuple[str, str, int]]:
    from fbrapids.kernels.runtime_cuda import device_helpers_source
    from fbrapids.trainers.sparse.slot_map import slot_map_source

    return [("the runtime's device helpers", device_helpers_source(), 0),
            ("the embedding store's slot map", slot_map_source(), 0)]


JOBS: dict[str, Callable[[Path], list[tuple[str, str, int]]]] = {
    "limits": _limits, "all-ops": lambda r: _all_ops(r, False), "layouts": lambda r: _all_ops(r, True),
    "workload": _workload, "helpers": _helpers, "dictionary": _dictionary}


def run_job(repo: str, name: str) -> list[str]:
    """Compile one job's sources for ARCH; a line per source, ``FAIL`` where it went wrong."""
    sys.path.insert(0, repo)
    from fbrapids.errors import NvrtcCompileError
    from fbrapids.kernels.nvrtc import compile_cuda

    lines = []
    for what, src, layers in JOBS[name](Path(repo)):
        t = time.perf_counter()
        try:
            ptx = compile_cuda(src, name=f"{name}.cu", arch=ARCH)
            err = None
        except NvrtcCompileError as exc:
            ptx, err = "", str(exc)
        secs = time.perf_counter() - t
        if layers < 0:  # the probe: ptxas must have refused it
            ok = err is not None and "too much shared data" in err
            lines.append(f"{'ok  ' if ok else 'FAIL'} {name}: {what}: "
                         + ("refused by ptxas" if ok else "ACCEPTED: ptxas did not run (is -arch a real sm_XX?)"))
            continue
        if err is None:
            missing = [i for i in range(layers) if f"fbx_layer_{i}" not in ptx]
            err = f"kernels missing from the PTX: {missing}" if missing else None
        lines.append(f"{'ok  ' if err is None else 'FAIL'} {name}: {what} ({secs:.1f} s)"
                     + ("" if err is None else f": {err.splitlines()[0] if err else ''} "
                        + " | ".join(l for l in err.splitlines() if "ptxas" in l or "error" in l)[:400]))
    return lines


def run(repo: Path, names: list[str], workers: int = 2) -> list[str]:
    if workers <= 1 or len(names) == 1:
        return [l for n in names for l in run_job(str(repo), n)]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_job, str(repo), n) for n in names]
        return [l for f in futures for l in f.result()]
