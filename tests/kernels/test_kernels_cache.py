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


def test_building_ahead_compiles_once_and_a_load_meanwhile_waits_for_it(tmp_path, monkeypatch):
    """A library built ahead on a background thread is compiled once: the same source twice
    is one build, and a load started while it builds waits on the cache's lock and finds it
    built (a hit, not a second compile)."""
    from fbrapids.kernels import cache

    monkeypatch.setenv("FBRAPIDS_KERNEL_CACHE", str(tmp_path))
    src = "FBX_KERNEL long long fbx_ahead_demo(long long x) { return x * 5 + %d; }" % os.getpid()
    before = dict(cache.stats)
    ahead = compile_host.BuildAhead([src, src])
    assert ahead.missing == 1
    lib = compile_host.load_source(src)  # most likely while the compiler still runs
    ahead.wait()
    lib.fbx_ahead_demo.restype = __import__("ctypes").c_longlong
    lib.fbx_ahead_demo.argtypes = [__import__("ctypes").c_longlong]
    assert lib.fbx_ahead_demo(2) == 10 + os.getpid()
    assert cache.stats["builds"] - before["builds"] == 1 and cache.stats["hits"] - before["hits"] == 1
    assert cache.stats["compile_seconds"] > before["compile_seconds"]
    assert [p.name for p in tmp_path.glob("*.so")] == [compile_host.library_key(src) + ".so"]
    assert compile_host.BuildAhead([src]).missing == 0


def test_a_source_that_fails_to_build_ahead_fails_at_its_load(tmp_path, monkeypatch):
    """Building ahead raises nothing; the load raises the compiler's error, naming the line."""
    monkeypatch.setenv("FBRAPIDS_KERNEL_CACHE", str(tmp_path))
    bad = "FBX_KERNEL int fbx_ahead_bad_%d(int x) { return x + ; }" % os.getpid()
    ahead = compile_host.BuildAhead([bad])
    assert ahead.missing == 1
    ahead.wait()
    with pytest.raises(compile_host.KernelCompileError, match="rejected a generated meta-kernel"):
        compile_host.load_source(bad)
    assert not list(tmp_path.glob("*.so"))
