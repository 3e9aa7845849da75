"""NVRTC compile checks without a GPU: the shared device-function headers compile as CUDA,
and compile errors carry NVRTC's log plus the offending source line."""
from __future__ import annotations

import pytest

from fbrapids.kernels.nvrtc import CSRC_DIR, NvrtcCompileError, compile_cuda, nvrtc_available, nvrtc_library

pytestmark = pytest.mark.skipif(
    not nvrtc_available(),
    reason="libnvrtc not found (pip install nvidia-cuda-nvrtc, or set $CUDA_PATH)")


FARMHASH_KERNEL = r'''
#include "farmhash.h"
FBX_KERNEL void fbx_fp64_kernel(const char* data, const fbx_i64* offsets, fbx_i64 n,
                                fbx_i64 buckets, fbx_u64* fp, fbx_i64* bucket,
                                const fbx_i64* ints, fbx_u64* int_fp) {
  fbx_i64 i = (fbx_i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  fp[i] = fbx_fp64(data + offsets[i], offsets[i + 1] - offsets[i]);
  bucket[i] = fbx_hash_bucket(fp[i], buckets);
  char buf[24];
  int len = fbx_u64_to_dec(fp[i], buf);
  int_fp[i] = fbx_fp64_i64(ints[i]) ^ (fbx_u64)len;
}
'''

JSON_KERNEL = r'''
#include "json_path.h"
FBX_KERNEL void fbx_json_kernel(const char* data, const fbx_i64* offsets, fbx_i64 n,
                                const char* path, fbx_i64 path_len,
                                fbx_i64* sizes, const fbx_i64* out_offsets, char* out,
                                int* status) {
  fbx_i64 i = (fbx_i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int st;
  char* dst = out_offsets ? out + out_offsets[i] : NULL;
  sizes[i] = fbx_json_get_string(data + offsets[i], offsets[i + 1] - offsets[i],
                                 path, path_len, dst, &st);
  status[i] = st;
}
'''


def test_library_found():
    assert "nvrtc" in nvrtc_library()


def test_farmhash_header_compiles_under_nvrtc():
    ptx = compile_cuda(FARMHASH_KERNEL, name="farmhash_kernel.cu")
    assert ".entry fbx_fp64_kernel" in ptx
    assert ".version" in ptx


def test_json_path_header_compiles_under_nvrtc():
    if not (CSRC_DIR / "json_path.h").exists():
        pytest.fail("fbrapids/kernels/csrc/json_path.h is missing")
    ptx = compile_cuda(JSON_KERNEL, name="json_kernel.cu")
    assert ".entry fbx_json_kernel" in ptx


def test_both_headers_in_one_translation_unit():
    src = FARMHASH_KERNEL + JSON_KERNEL
    ptx = compile_cuda(src, name="both.cu", options=("--std=c++17", "-arch=compute_80"))
    assert ".entry fbx_fp64_kernel" in ptx and ".entry fbx_json_kernel" in ptx
    assert ".target sm_80" in ptx


def test_syntax_error_reports_log_and_line():
    src = ('extern "C" __global__ void broken(int* x) {\n'
           '  int y = 1\n'
           '  x[0] = y + undefined_name_zz;\n'
           '}\n')
    with pytest.raises(NvrtcCompileError) as info:
        compile_cuda(src, name="broken.cu")
    msg = str(info.value)
    assert "broken.cu(3): error" in msg            # NVRTC's own log
    assert "undefined_name_zz" in info.value.log
    assert ">     3 |   x[0] = y + undefined_name_zz;" in msg  # the quoted, numbered line
    assert "      2 |   int y = 1" in msg


def test_error_inside_included_header_quotes_header_line(tmp_path):
    (tmp_path / "oops.h").write_text('#include "fbx_target.h"\n'
                                     'FBX_DEVICE int oops(int a) {\n'
                                     '  return a +* ;\n'
                                     '}\n')
    src = '#include "oops.h"\nextern "C" __global__ void k(int* x) { x[0] = oops(1); }\n'
    with pytest.raises(NvrtcCompileError) as info:
        compile_cuda(src, name="k.cu", include_dirs=[tmp_path])
    msg = str(info.value)
    assert "oops.h" in msg
    assert ">     3 |   return a +* ;" in msg


def test_missing_include_is_an_error():
    with pytest.raises(NvrtcCompileError, match="no_such_header.h"):
        compile_cuda('#include "no_such_header.h"\n', name="inc.cu")


def test_runtime_options_keep_float32_denormals():
    """P3: ``cupy.RawModule(code=...)`` appends ``-ftz=true`` to any options (the
    last -ftz wins), which flushes float32 denormals on the device only.  fbrapids compiles
    with RUNTIME_OPTIONS itself and loads the CUBIN (runtime_cuda.load_module)."""
    from fbrapids import ops
    from fbrapids.kernels.nvrtc import RUNTIME_OPTIONS, compile_cubin
    from fbrapids.kernels.plan import build_plan
    from fbrapids.kernels.render import render_module

    plan = build_plan({"c": ops.clip("x", 1e-40, 1.0), "l": ops.log1p("x")}, {"x": "f32"}, backend="gpu")
    src = render_module(plan, "cuda")
    assert "-ftz=false" in RUNTIME_OPTIONS
    assert ".ftz.f32" not in compile_cuda(src, name="f32.cu", arch="compute_90")  # float32 instructions
    assert ".ftz.f32" in compile_cuda(src, name="f32.cu", options=RUNTIME_OPTIONS + ("-ftz=true",), arch="compute_90")
    assert compile_cubin(src, "sm_90", "f32.cu")[:4] == b"\x7fELF"  # what the runtime loads
