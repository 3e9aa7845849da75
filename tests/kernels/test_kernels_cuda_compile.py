"""CUDA without a GPU: every built-in, and one plan using all of them, render to CUDA that
NVRTC compiles; GPU execution (marked ``gpu``) compares bit for bit with the CPU backend."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fbrapids import ops
from fbrapids.kernels.nvrtc import compile_cuda, nvrtc_available
from fbrapids.kernels.plan import build_plan
from fbrapids.kernels.render import render_module

pytestmark = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed (pip install nvidia-cuda-nvrtc)")

#: the plans below compile to PTX only (no ptxas: minutes on 2 cores); the GPU conformance stage
#: compiles them for sm_90 through ptxas (scripts/gpu_conformance), the D1 tests here do too
PTX_ONLY = "compute_90"

SCHEMA = {"ts": "i64", "uid": "i64", "u": "u64", "age": "i32", "price": "f64", "q": "str", "ctx": "str",
          "seq": "list<str>", "ids": "list<i64>"}


def every_builtin() -> dict:
    return {
        "fill_i": ops.fill_null("age", -1), "fill_s": ops.fill_null("q", ""), "fill_l": ops.fill_null("ids", []),
        "fill_ls": ops.fill_null("seq", []), "log1p": ops.log1p("price"), "clip": ops.clip("price", 0, 10),
        "cast": ops.cast("age", "i8"), "bucketize": ops.bucketize("age", [0, 18, 30]),
        "hash_s": ops.hash("q"), "hash_u": ops.hash("u"), "hash_l": ops.hash_bucket("seq", 100),
        "hash_li": ops.hash_bucket("ids", 100), "hash_i": ops.hash_bucket("uid", 100),
        "cross_s": ops.cross("uid", "q", buckets=1000), "cross_l": ops.cross("ids", "seq", "age", cap=64),
        "split_s": ops.split("q", " "), "split_h": ops.split("q", "|", buckets=99), "length": ops.length("q"),
        "lower": ops.lower("q"), "substring": ops.substring("q", -2, 1), "ngrams": ops.ngrams("seq", 2),
        "ngrams_h": ops.ngrams("seq", 3, buckets=7), "first_k": ops.first_k("ids", 2), "last_k": ops.last_k("seq", 2),
        "hour": ops.hour("ts"), "weekday": ops.weekday("ts"), "day": ops.day("ts"),
        "lookup_s": ops.lookup("q", {"a": 1}), "lookup_i": ops.lookup("uid", [5, 6]),
        "json_get": ops.json_get("ctx", "device.os"),
        "json_scan": ops.call("json_scan", "ctx", paths=("device.os", "geo.city")),
        "json_pick": ops.call("json_pick", "ctx", ops.call("json_scan", "ctx", paths=("a", "b.c", "d")), index=1,
                              group=3, path="b.c"),
    }


def _reads(feature, column: str) -> bool:
    """Whether ``feature`` reads input ``column``."""
    plan = build_plan({"f": feature}, SCHEMA, backend="gpu")
    return any(n.op is None and n.expr.name == column for n in plan.nodes)


@pytest.mark.parametrize("name", sorted(every_builtin()))
def test_each_builtin_compiles_under_nvrtc(name):
    plan = build_plan({name: every_builtin()[name]}, SCHEMA, backend="gpu")
    ptx = compile_cuda(render_module(plan, "cuda"), name=f"{name}.cu", arch=PTX_ONLY)
    assert "fbx_layer_0" in ptx


def test_all_ops_plan_renders_one_kernel_per_layer():
    """Every built-in in one plan renders a kernel per layer.  Compiled by the CI's
    gpu-conformance stage instead (NVRTC and ptxas for sm_90, ~27 s of NVRTC here): its job
    ``layouts`` compiles this same plan over cudf's offset layouts, and each built-in over the
    host's layout compiles above (test_each_builtin_compiles_under_nvrtc)."""
    feats = every_builtin()
    feats["deep"] = ops.cross(ops.split("q", " ", buckets=10), ops.hour("ts"), buckets=100, cap=8)
    plan = build_plan(feats, SCHEMA, backend="gpu")
    src = render_module(plan, "cuda")
    assert len(plan.layers) > 1
    assert src.count("FBX_KERNEL void fbx_layer_") == len(plan.layers) and 'extern "C" __global__' in src


def test_cuda_runtime_device_helpers_compile():
    """Compaction and validity packing, the device helpers CudaPlan runs around the layers."""
    from fbrapids.kernels.runtime_cuda import device_helpers_source

    ptx = compile_cuda(device_helpers_source(), name="device_helpers.cu", arch=PTX_ONLY)
    for entry in ("fbx_compact", "fbx_compact_ls", "fbx_pack_validity"):
        assert f".entry {entry}(" in ptx, entry


def test_cudf_input_layouts_compile_under_nvrtc():
    """cudf columns come with int32 string offsets (or int64 ones), int32 list offsets and
    int32 or int64 offsets inside list<str>: every such layout renders and compiles."""
    from fbrapids.kernels.abi import InputLayout

    feats = every_builtin()
    plan = build_plan(feats, SCHEMA, backend="gpu")
    ids = {plan.nodes[i].expr.name: i for i in range(len(plan.nodes)) if plan.nodes[i].op is None}
    for sow in (4, 8):
        layouts = {ids["q"]: InputLayout(offsets=4), ids["ctx"]: InputLayout(offsets=8),
                   ids["ids"]: InputLayout(offsets=4), ids["seq"]: InputLayout(offsets=4, str_offsets=sow)}
        src = render_module(plan, "cuda", layouts=layouts)
        assert f"const fbx_i32* in{ids['q']}_o" in src and f"const fbx_i64* in{ids['ctx']}_o" in src
    # sow 4: the whole plan is compiled for sm_90 (ptxas included) by the CI's gpu-conformance stage,
    # job `layouts`; sow 8 changes only the features reading `seq`: those are compiled here
    seq = {k: v for k, v in feats.items() if _reads(v, "seq")}
    assert len(seq) >= 5, sorted(seq)
    plan = build_plan(seq, SCHEMA, backend="gpu")
    sid = next(i for i in range(len(plan.nodes)) if plan.nodes[i].op is None and plan.nodes[i].expr.name == "seq")
    src = render_module(plan, "cuda", layouts={sid: InputLayout(offsets=4, str_offsets=8)})
    assert f"const fbx_i64* in{sid}_so" in src and f"const fbx_i32* in{sid}_o" in src
    ptx = compile_cuda(src, name="layouts_8.cu", arch=PTX_ONLY)
    assert all(f"fbx_layer_{l.index}" in ptx for l in plan.layers)


def test_workload_plan_renders_one_kernel_per_layer():
    """The synthetic workload's plan renders a kernel per layer.  Compiled by the CI's
    gpu-conformance stage instead (job ``workload``: this plan, NVRTC and ptxas for sm_90; ~24 s
    of NVRTC here)."""
    from fbrapids.datasets.synthetic.views import features as workload_features

    schema = {"ts": "i64", "user_id": "i64", "ad_id": "i64", "advertiser_id": "i64", "category": "i32",
              "gender": "str", "city": "str", "os": "str", "geo_city": "str", "age": "i32", "price": "f64",
              "query": "str", "title": "str", "interests": "str"}
    plan = build_plan(workload_features(), schema, backend="gpu")
    src = render_module(plan, "cuda")
    assert src.count("FBX_KERNEL void fbx_layer_") == len(plan.layers) > 0


@pytest.mark.gpu
def test_gpu_matches_cpu_bit_for_bit():
    from fbrapids.frames.backend import gpu_missing

    if gpu_missing():
        pytest.skip("no GPU backend here: " + "; ".join(gpu_missing()))
    import cudf  # noqa: F401  (only reached on a GPU machine)

    from fbrapids.frames.backend import get_backend, to_backend, to_host

    df = pd.DataFrame({"ts": np.arange(1000) * 3600, "q": pd.Series([f"a b{i % 7} c" for i in range(1000)], dtype="str")})
    feats = {"h": ops.hour("ts"), "t": ops.split("q", " ", buckets=1 << 18), "x": ops.cross("ts", "q", buckets=1 << 20)}
    cpu = df.fbx.extract(**feats)
    gpu = to_host(to_backend(df, get_backend("gpu")).fbx.extract(**feats))
    for c in feats:
        assert cpu[c].tolist() == gpu[c].tolist()


# -- D1: ptxas' limits, met here rather than on the device ----------------------

def test_compile_cuda_runs_ptxas_for_sm_90():
    """A kernel over 48 KiB of static shared memory is refused by ptxas: compile_cuda must
    compile for a real architecture (it stopped at PTX, so such kernels passed here)."""
    from fbrapids.errors import NvrtcCompileError

    src = ('extern "C" __global__ void k(unsigned long long* o) { __shared__ unsigned long long s[49 * 128]; '
           's[threadIdx.x] = 1; __syncthreads(); o[0] = s[threadIdx.x + 1]; }')
    with pytest.raises(NvrtcCompileError, match="too much shared data"):
        compile_cuda(src, name="shared.cu")


def wide(n_list_int: int, n_list_str: int) -> dict:
    """Operators of one depth with ``n_list_int`` list<i64> outputs (one pool part each) and
    ``n_list_str`` list<str> ones (two parts each), among the cheapest to compile."""
    feats = {f"k{i}": ops.first_k("ids", i + 1) for i in range(n_list_int)}
    feats.update({f"l{i}": ops.split("q", chr(33 + i % 90) * (1 + i // 90)) for i in range(n_list_str)})
    return feats


def test_wide_layers_are_split_so_ptxas_accepts_them():
    """48 list outputs at one depth (the issue's case: 48 bucketed splits) made one kernel
    with 48 KiB + of shared memory, which ptxas refuses; the planner now cuts it."""
    from fbrapids.kernels.abi import CUDA_MAX_PARTS, CUDA_SHARED_LIMIT, cuda_shared_bytes, layer_abi

    plan = build_plan(wide(48, 0), SCHEMA, backend="gpu")
    assert [layer_abi(plan, l).nparts for l in plan.layers] == [CUDA_MAX_PARTS, 48 - CUDA_MAX_PARTS]
    assert cuda_shared_bytes(CUDA_MAX_PARTS) <= CUDA_SHARED_LIMIT
    ptx = compile_cuda(render_module(plan, "cuda"), name="wide.cu")
    assert all(f"fbx_layer_{l.index}" in ptx for l in plan.layers)
    assert len(build_plan(wide(48, 0), SCHEMA, backend="cpu").layers) == 1  # host kernels keep one layer


@pytest.mark.parametrize("n_int, n_str, parts", [(0, 24, [32, 16]), (32, 0, [32]),
                                                 (31, 1, [31, 2]), (40, 20, [32, 32, 16])])
def test_layers_are_cut_at_the_part_limit(n_int, n_str, parts):
    """(the conformance stage compiles plans at each limit through ptxas)"""
    from fbrapids.kernels.abi import CUDA_MAX_PARTS, layer_abi

    assert CUDA_MAX_PARTS == 32
    plan = build_plan(wide(n_int, n_str), SCHEMA, backend="gpu")
    assert [layer_abi(plan, l).nparts for l in plan.layers] == parts


def test_a_hand_made_layer_over_the_limit_is_an_error_not_a_ptxas_failure():
    from fbrapids.errors import OperatorError
    from fbrapids.kernels.plan import Layer

    plan = build_plan(wide(48, 0), SCHEMA, backend="gpu")
    plan.layers = [Layer(0, [i for l in plan.layers for i in l.nodes], "gpu")]
    with pytest.raises(OperatorError, match="48 pool parts"):
        render_module(plan, "cuda")
