"""The device run's plan, checked without a device: ``gpu_check.py --rehearse`` runs
the steps in their order with stub commands (every path a step names must exist), ``--failed``
reruns only what failed; ``gpu_slim_fatbin.py`` zeroes the other architectures' device code and
nothing else (the file's size and every entry header kept)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import gpu_slim_fatbin  # noqa: E402


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check.py"), *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO)


def test_the_rehearsal_runs_the_steps_most_telling_first_and_reruns_only_what_failed(tmp_path):
    proc = _run("--rehearse", "--out", str(tmp_path), "--budget", "330")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "gpu-check.json").read_text())
    names = [s["name"] for s in summary["steps"]]
    assert names[:5] == ["gpu-fixes", "diff-cudf", "demo-gpu", "extract-10m", "embedding-cuda"]
    assert names[-1] == "suite-gpu" and all(s["rc"] == 0 for s in summary["steps"])
    assert "--rows 10000000" in next(s["cmd"] for s in summary["steps"] if s["name"] == "extract-10m")
    summary["steps"][1]["rc"] = 1  # as if the cudf twins had failed
    (tmp_path / "gpu-check.json").write_text(json.dumps(summary))
    proc = _run("--rehearse", "--out", str(tmp_path), "--failed")
    ran = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("gpu-check ")]
    assert proc.returncode == 0 and ran == ["diff-cudf"], proc.stdout
    again = json.loads((tmp_path / "gpu-check.json").read_text())
    assert [s["name"] for s in again["steps"]] == names[:1] + names[2:] + ["diff-cudf"]  # the rest kept


def _entry(arch: int, payload: bytes, kind: int = 2) -> bytes:
    return struct.pack("<HHIQ", kind, 0, 64, len(payload)) + bytes(12) + struct.pack("<I", arch) + bytes(32) + payload


def test_slimming_zeroes_only_the_other_architectures_payloads():
    body = _entry(80, b"A" * 40) + _entry(90, b"B" * 24) + _entry(120, b"C" * 16, kind=1)
    fat = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body
    blob = bytearray(b"elf-head" + struct.pack("<I", 0xBA55ED50) + b"junk" + fat + b"tail")  # a stray magic first
    before = bytes(blob)
    assert gpu_slim_fatbin.slim(blob, 90) == (56, 24)
    assert len(blob) == len(before) and b"A" not in blob and b"C" not in blob and blob.count(b"B") == 24
    changed = [i for i, (a, b) in enumerate(zip(before, blob)) if a != b]
    assert all(before[i] in b"AC" for i in changed)  # headers, the kept entry and the rest untouched


def test_the_rehearsal_unpacks_a_set_carried_in_parts(tmp_path):
    """gpu_rehearse.sh on a small stand-in set (parts of an xz archive, as gpu_pack.sh cuts them):
    every call's carry within the limit, the parts joined and unpacked by the device's unpack.sh,
    then the check and its rerun (stubs)."""
    import shutil
    import tarfile

    if not all(shutil.which(t) for t in ("bash", "xz", "split", "bc")):
        import pytest

        pytest.skip("needs bash, xz, split and bc")
    gpu = tmp_path / ".gpu"
    site = tmp_path / "site"
    (site / "cudf").mkdir(parents=True)
    (site / "cudf_cu13-26.10.2.dist-info").mkdir()
    (site / "cudf" / "__init__.py").write_text("x = 1\n")
    (site / "cudf" / "blob").write_bytes(bytes(range(256)) * 400)
    for name in ("hypothesis", "pytest"):  # what the first pass's tests import (farmhash: built on the host)
        (site / name).mkdir()
        (site / name / "__init__.py").write_text("")
    with tarfile.open(tmp_path / "site.tar.xz", "w:xz") as tar:
        tar.add(site, arcname=".")
    blob = (tmp_path / "site.tar.xz").read_bytes()
    for i in range(3):
        (gpu / f"c{i}").mkdir(parents=True)
        (gpu / f"c{i}" / f"part{i}").write_bytes(blob[i * len(blob) // 3: (i + 1) * len(blob) // 3])
    (gpu / "setup").mkdir()
    (gpu / "pack.json").write_text(json.dumps({"host_packages": ["torch", "numpy"], "built_on_host": ["farmhash"]}))
    shutil.copy(REPO / "scripts" / "gpu_unpack.sh", gpu / "setup" / "unpack.sh")
    import os

    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_rehearse.sh"), str(gpu)], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env={**os.environ, "PY": sys.executable})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cudf 26.10.2 unpacked" in proc.stdout
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["parts"] == 3 and len(report["copies"]) == 4
    assert report["unpacked_site_bytes"] >= 256 * 400
    assert [s["name"] for s in report["first_pass"]] == ["gpu-fixes", "diff-cudf", "demo-gpu", "extract-10m",
                                                         "embedding-cuda"]
    assert "first pass's" in proc.stdout and "files import nothing the set lacks" in proc.stdout


def test_slimming_keeps_lto_ir_and_fat_binaries_without_sass_for_the_device():
    """libcudf holds 21 fat binaries whose only entry is an sm_75 LTO-IR (kind 8),
    which nvJitLink links for the device at run time; the slimmer zeroed them (arch != 90).
    A fat binary with no SASS for the kept architecture (PTX only) is kept whole too."""
    def fat(*entries: bytes) -> bytes:
        body = b"".join(entries)
        return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body

    lto_only = fat(_entry(75, b"L" * 32, kind=8))
    ptx_only = fat(_entry(120, b"X" * 16, kind=1))
    served = fat(_entry(80, b"A" * 40), _entry(90, b"B" * 24), _entry(75, b"M" * 8, kind=8))
    blob = bytearray(b"head" + lto_only + ptx_only + served)
    assert gpu_slim_fatbin.slim(blob, 90) == (40, 32 + 16 + 24 + 8)
    assert blob.count(b"L") == 32 and blob.count(b"X") == 16 and blob.count(b"M") == 8 and b"A" not in blob


def test_the_first_pass_imports_only_what_the_set_holds(tmp_path):
    """The differential suite imports hypothesis at module level and the extract
    benchmark imported farmhash even with --skip-pandas; neither was in the set."""
    import gpu_check

    site = tmp_path / "site"
    (site / "cudf").mkdir(parents=True)
    first = [f for name, cmd, *_ in gpu_check.steps("python") if name in gpu_check.FIRST_PASS
             for f in gpu_check._files_of(cmd)]  # noqa: SLF001
    assert REPO / "benchmarks" / "extract.py" in first and REPO / "tests" / "differential" / "diff_harness.py" in first
    lost = gpu_check.missing_imports(first, site, ["torch", "numpy", "pandas", "pyarrow", "cupy"])
    assert set(lost) == {"hypothesis", "farmhash", "pytest"} and "benchmarks/extract.py" not in str(lost)
    (site / "hypothesis").mkdir()
    (site / "pytest").mkdir()
    assert gpu_check.missing_imports(first, site, ["torch", "numpy", "pandas", "pyarrow", "cupy", "farmhash"]) == {}
    wheels = (REPO / "scripts" / "gpu_wheels.txt").read_text().split()
    assert {"hypothesis", "attrs", "pytest", "pluggy", "iniconfig"} <= set(wheels)


def test_the_rehearsal_looks_each_step_up_in_the_kernel_cache(tmp_path, monkeypatch):
    """A step stands in by its CUDA modules found in the carried cache (hits), a
    missing one counted with the seconds NVRTC took for it when the cache was filled."""
    from fbrapids.kernels import cache

    kc = tmp_path / "kernels"
    kc.mkdir()
    monkeypatch.setenv("FBRAPIDS_KERNEL_CACHE", str(kc))
    cache.cached_artifact("k" * 32, ".cubin", lambda tmp: tmp.write_bytes(b"\x7fELF cubin"))
    manifest = {"arch": "sm_90", "nvrtc": "13.0", "steps": {"demo-gpu": {"plans": 1, "modules": [
        {"key": "k" * 32, "what": "the workload", "seconds": 14.4},
        {"key": "m" * 32, "what": "a plan never compiled", "seconds": 20.0}]}}}
    (kc / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "gc"
    proc = _run("--rehearse", "--out", str(out), "--kernel-cache", str(kc), "--only", "demo-gpu")
    step = json.loads((out / "gpu-check.json").read_text())["steps"][0]
    assert step["name"] == "demo-gpu" and step["kernels"] == {"hits": 1, "builds": 1, "compile_seconds": 20.0}
    assert step["rc"] == 1 and proc.returncode == 1  # a miss: the first pass would compile on the device
    assert "demo-gpu" in proc.stdout and "1 / 1, 20.0 s" in proc.stdout  # the table
    import gpu_kernels

    cache.cached_artifact("m" * 32, ".cubin", lambda tmp: tmp.write_bytes(b"\x7fELF cubin"))
    assert gpu_kernels.lookup(kc, "demo-gpu") == {"step": "demo-gpu", "modules": 2, "hits": 2, "misses": 0,
                                                  "pending_seconds": 0, "cold_seconds": 34.4}


def test_the_cubin_key_holds_the_nvrtc_version_and_the_architecture(monkeypatch):
    from fbrapids.kernels import runtime_cuda

    monkeypatch.setattr(runtime_cuda, "nvrtc_version", lambda: (13, 0))
    key = runtime_cuda.cubin_key("extern \"C\" __global__ void k() {}", "sm_90")
    assert key != runtime_cuda.cubin_key("extern \"C\" __global__ void k() {}", "sm_80")
    monkeypatch.setattr(runtime_cuda, "nvrtc_version", lambda: (13, 5))
    assert key != runtime_cuda.cubin_key("extern \"C\" __global__ void k() {}", "sm_90")
