"""The conformance stage fails on each of the definite GPU-path bugs it guards put back (D1-D3): the stage
runs on a copy of the sources with the old code restored, and must exit 1 naming the fault.
Runs in the GPU venv (``make gpu-conformance``); skipped where the wheels are absent."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytest.importorskip("pylibcudf")
pytest.importorskip("cudf")

PLAN, NVRTC = "fbrapids/kernels/plan.py", "fbrapids/kernels/nvrtc.py"
INPUTS, BATCH = "fbrapids/views/inputs.py", "fbrapids/trainers/device_batch.py"

RENDER = "fbrapids/kernels/render.py"

#: name -> ([(file, old text, buggy text)], the check that must fail, what its output must say)
MUTATIONS = {
    # D1: every operator of one depth in one kernel again, the renderer's guard gone: ptxas must refuse it
    "D1-one-layer": ([(PLAN, 'for chunk in (_by_parts(ids, nodes) if placement == "gpu" else [ids] if ids else []):',
                       "for chunk in ([ids] if ids else []):"),
                      (RENDER, "    if abi.nparts > CUDA_MAX_PARTS:", "    if False:")],
                     "ptxas-limits", "too much shared data"),
    # D1: NVRTC stops at PTX again (no real -arch): ptxas never runs
    "D1-no-ptxas": ([(NVRTC, 'opts.append(f"-arch={arch or os.environ.get(ENV_ARCH) or DEFAULT_ARCH}")',
                      'opts.append("-arch=compute_90")')], "ptxas-limits", "ptxas did not run"),
    # D2: the unit parsed from str(dtype)
    "D2-str-unit": ([(INPUTS, 'return s.astype("int64") // _PER_SECOND[datetime_unit(dtype)]',
                      'unit = np.datetime_data(np.dtype(str(dtype).split(",")[0].replace(" ", "")))[0] '
                      'if "[" in str(dtype) else "ns"\n        return s.astype("int64") // _PER_SECOND.get(unit, 1)')],
                    "dtype-paths", "Invalid datetime metadata"),
    # D3: only cudf.ListDtype taken as a list
    "D3-cudf-list-only": ([(BATCH, '    if is_list_dtype(dtype):\n        return "list"',
                            '    if type(dtype).__name__ == "ListDtype":\n        return "list"')],
                          "dtype-paths", "(D3)"),
}


def _copy(tmp: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    shutil.copytree(REPO / "fbrapids", tmp / "fbrapids", ignore=ignore)
    (tmp / "tests" / "kernels").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "kernels" / "test_kernels_cuda_compile.py", tmp / "tests" / "kernels")
    return tmp


def _stage(repo: Path, check: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_conformance"), "--repo", str(repo),
                           "--only", check], capture_output=True, text=True, timeout=600, cwd=repo,
                          env={"PATH": "/usr/bin:/bin", "FBRAPIDS_BACKEND": "", "HOME": str(repo)})


@pytest.fixture(scope="module")
def clean_copy(tmp_path_factory):
    """An unmutated copy passes (the copy, not the installed tree, is what the stage checks): the
    dtype paths here; the ptxas check's failures below can only come from ptxas itself (its
    messages), and the whole stage has passed on the real tree before these tests run."""
    repo = _copy(tmp_path_factory.mktemp("clean"))
    proc = _stage(repo, "dtype-paths")
    assert proc.returncode == 0 and "dtype-paths" in proc.stdout, proc.stdout + proc.stderr
    return repo


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_the_stage_fails_on_each_bug_put_back(clean_copy, tmp_path, name):
    edits, check, why = MUTATIONS[name]
    repo = _copy(tmp_path)
    for rel, good, bad in edits:
        source = (repo / rel).read_text()
        assert good in source, f"the mutation site moved: {good!r} is no longer in {rel}"
        (repo / rel).write_text(source.replace(good, bad, 1))
    mutated = _stage(repo, check)
    assert mutated.returncode == 1, mutated.stdout + mutated.stderr
    assert why in mutated.stdout, mutated.stdout
