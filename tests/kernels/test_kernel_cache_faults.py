"""The kernel cache under faults (a fault-suite case): an empty ``.so`` (what a power loss left
before fsync), a flipped bit, a lost digest are rebuilt, never loaded; each run in a fresh
process that computes a right result and counts its rebuilds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

KERNEL = textwrap.dedent("""
    import ctypes, json, logging, sys
    logging.basicConfig(level=logging.INFO)
    from fbrapids.kernels import cache
    from fbrapids.kernels.compile_host import load_source
    lib = load_source("FBX_KERNEL long long fbx_faults_demo(long long x) { return x * 3 + %s; }" % sys.argv[1])
    lib.fbx_faults_demo.restype = ctypes.c_longlong
    lib.fbx_faults_demo.argtypes = [ctypes.c_longlong]
    print(json.dumps({"result": lib.fbx_faults_demo(5), **cache.stats}))
""")

EXTRACT = textwrap.dedent("""
    import json
    import numpy as np, pandas as pd
    import fbrapids
    from fbrapids import ops
    from fbrapids.kernels import cache
    ts = np.arange(0, 200 * 3600, 1800, dtype=np.int64)
    out = pd.DataFrame({"ts": ts}).fbx.extract(h=ops.hour("ts"))
    print(json.dumps({"result": out["h"].astype("int64").tolist(), **cache.stats}))
""")


def _child(script: str, cache: Path, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), FBRAPIDS_KERNEL_CACHE=str(cache))
    got = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=300)
    assert got.returncode == 0, f"exit {got.returncode}: {got.stderr[-2000:]}"
    return {**json.loads(got.stdout.strip().splitlines()[-1]), "log": got.stderr}


def _flip_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10  # in the middle: code or tables of the library
    path.write_bytes(bytes(data))


def test_damaged_entries_are_rebuilt_and_the_results_are_right(tmp_path: Path) -> None:
    salt = str(os.getpid())  # a source no other run has compiled
    want = 15 + int(salt)
    first = _child(KERNEL, tmp_path, salt)
    assert first["result"] == want and (first["builds"], first["rebuilds"]) == (1, 0)
    [lib] = tmp_path.glob("*.so")
    digest = lib.with_name(lib.name + ".sha256")
    assert digest.read_text().split()[1] == str(lib.stat().st_size)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left

    again = _child(KERNEL, tmp_path, salt)
    assert again["result"] == want and (again["hits"], again["builds"], again["rebuilds"]) == (1, 0, 0)

    damages = {"empty": lambda: lib.write_bytes(b""), "flipped bit": lambda: _flip_bit(lib),
               "digest lost": lambda: digest.unlink()}
    for what, damage in damages.items():
        good = lib.read_bytes()
        damage()
        got = _child(KERNEL, tmp_path, salt)
        assert got["result"] == want and (got["builds"], got["rebuilds"]) == (0, 1), what
        assert str(lib) in got["log"], what  # the damaged file is named
        assert lib.stat().st_size == len(good) == int(digest.read_text().split()[1]), what  # rebuilt whole


def test_an_extraction_on_a_damaged_cache_rebuilds_and_is_right(tmp_path: Path) -> None:
    want = [int(t // 3600 % 24) for t in range(0, 200 * 3600, 1800)]
    first = _child(EXTRACT, tmp_path)
    libs = sorted(tmp_path.glob("*.so"))
    assert first["result"] == want and first["builds"] == len(libs) >= 1
    for damage in ("empty", "flipped bit"):
        for lib in libs:
            lib.write_bytes(b"") if damage == "empty" else _flip_bit(lib)
        got = _child(EXTRACT, tmp_path)
        assert got["result"] == want and (got["builds"], got["rebuilds"]) == (0, len(libs)), damage
