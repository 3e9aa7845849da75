"""The conftest's marker rules, run in a child pytest: ``cpu_only(reason)`` tests skip with
their reason under ``FBRAPIDS_BACKEND=gpu`` and run otherwise; ``gpu`` tests skip where the
GPU backend is missing, whatever folder the checkout lives in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fbrapids.frames.backend import gpu_missing

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests/views/test_read_view.py::test_csv_with_header_without_header_and_tab"


def _child(backend: str, target: str) -> str:
    env = {**os.environ, "FBRAPIDS_BACKEND": backend, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", target],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    return res.stdout + res.stderr


def test_cpu_only_tests_skip_with_their_reason_on_the_gpu_backend():
    if not (ROOT / TARGET.split("::")[0]).exists():
        pytest.skip(f"{TARGET} moved")
    on_gpu = _child("gpu", TARGET)
    assert "1 skipped" in on_gpu and "CPU-only on the GPU backend: asserts the host reader's pandas dtypes" in on_gpu
    on_cpu = _child("cpu", TARGET)
    assert "1 passed" in on_cpu, on_cpu[-2000:]


def test_gpu_tests_skip_by_marker_not_by_path():
    if not gpu_missing():
        pytest.skip("a GPU backend is available here")
    out = _child("cpu", "tests/frames/test_backend_device_memory.py")
    assert "needs a GPU backend: missing" in out and " passed" in out  # the plain tests still ran
