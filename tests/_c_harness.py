"""Build a test shim from tests/csrc with the system C compiler and load it with ctypes.

Example::

    lib = build_harness("farmhash_harness.c", tmp_path)
    lib.h_fp64(...)
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CSRC = REPO / "fbrapids" / "kernels" / "csrc"
HARNESS_DIR = Path(__file__).resolve().parent / "csrc"


def find_cc() -> str | None:
    """The system C compiler (gcc or cc), or None."""
    return shutil.which("gcc") or shutil.which("cc")


def build_harness(name: str, out_dir: Path) -> ctypes.CDLL:
    """Compile tests/csrc/<name> against fbrapids/kernels/csrc into out_dir and load it."""
    cc = find_cc()
    if cc is None:
        raise RuntimeError("no C compiler found (install gcc) to build the C test harness")
    src = HARNESS_DIR / name
    so = Path(out_dir) / (src.stem + ".so")
    cmd = [cc, "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function",
           "-fPIC", "-shared", "-I", str(CSRC), str(src), "-o", str(so), "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {src} failed:\n{' '.join(cmd)}\n{proc.stderr}")
    return ctypes.CDLL(str(so))


def ptr(a: np.ndarray) -> ctypes.c_void_p:
    """Raw data pointer of a contiguous numpy array."""
    assert a.flags["C_CONTIGUOUS"]
    return ctypes.c_void_p(a.ctypes.data)


def pack_strings(items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Arrow-style (bytes, int64 offsets[n+1]) of a list of byte strings."""
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in items], dtype=np.int64) if items else []
    data = np.frombuffer(b"".join(items) + b"\0", dtype=np.uint8).copy()
    return data, offsets
