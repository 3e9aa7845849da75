"""The kernel disk cache (location, concurrent processes) and the missing-compiler error."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from fbrapids.kernels import compile_host
from fbrapids.kernels.cache import cache_dir

SRC = "FBX_KERNEL long long fbx_cache_demo(long long x) { return x * 3 + %d; }"


def _compile_in_child(args):
    cache, salt = args
    os.environ["FBRAPIDS_KERNEL_CACHE"] = cache
    from fbrapids.kernels.compile_host import load_source

    lib = load_source(SRC % salt)
    lib.fbx_cache_demo.restype = __import__("ctypes").c_longlong
    lib.fbx_cache_demo.argtypes = [__import__("ctypes").c_longlong]
    return lib.fbx_cache_demo(5)


def test_cache_location_and_concurrent_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("FBRAPIDS_KERNEL_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    salt = os.getpid()  # a source no other test run has compiled
    with mp.get_context("spawn").Pool(4) as pool:
        results = pool.map(_compile_in_child, [(str(tmp_path), salt)] * 8)
    assert results == [15 + salt] * 8
    libs = list(tmp_path.glob("*.so"))
    assert len(libs) == 1  # eight processes, one artefact, no half-written temp files left
    assert not list(tmp_path.glob(".*.so"))


def test_missing_compiler_says_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CC", raising=False)
    compile_host.find_compiler.cache_clear()
    try:
        with pytest.raises(compile_host.CompilerNotFoundError, match="install gcc"):
            compile_host.find_compiler()
    finally:
        monkeypatch.undo()
        compile_host.find_compiler.cache_clear()
