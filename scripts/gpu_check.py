#!/usr/bin/env python
"""Everything that needs a GPU, in one command (``make gpu-check OUT=dir``), on a machine set up
as ``../shared/gpu/README.md`` says (``PYTHONPATH=/tmp/site:$PWD``).

Steps, most telling first, so that the first ~5 minutes answer the most and a rerun of what
failed still fits the 15 minutes a lent GPU machine has (each step has its own time limit,
``--budget`` in all; ``docs/gpu.md`` gives the whole sequence):

1. ``gpu-fixes``: ``pytest -m gpu`` over the files of the known GPU-path fixes (issues 23, 36);
2. ``diff-cudf``: the differential suite's cudf / dask-cudf twins (``pytest -m gpu tests/differential``);
3. ``demo-gpu``: ``fbrapids demo --backend gpu``;
4. ``extract-10m``: ``benchmarks/extract.py --backend gpu --rows 10000000``: GPU output equal to the CPU's;
5. ``embedding-cuda``: ``benchmarks/embedding.py`` with ``FBRAPIDS_DEVICE=cuda``;
6. ``pytest-gpu``: the rest of ``pytest -m gpu``; 7. ``inference-cuda``; 8. ``suite-gpu``: the
   whole suite with ``FBRAPIDS_BACKEND=gpu`` (the longest, last).

``--failed`` reruns only the steps that failed (or were not run) in ``OUT/gpu-check.json``.
``--rehearse`` runs the sequence on a machine without a device with every step's command
replaced by a stub (``true``): it checks the plan (order, limits within the budget, output
files) and nothing else.

Writes ``OUT/gpu-check.json`` (per step: command, exit status, seconds, last lines, and the
JSON line a benchmark printed) and ``OUT/gpu-check.log`` (every step's whole output).

Without a device it writes nothing and exits at once with one line saying so, with status 0:
nothing failed, and CI or a user's ``make gpu-check`` on a CPU machine must not read as a
broken build (``--strict``: exit 3 instead, for a runner that must have a device).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


#: the files of the GPU-path fixes, run first (the differential suite's twins are step 2)
FIX_TESTS = ("tests/gpu/test_gpu_issue36_device.py", "tests/gpu/test_gpu_fixes_device.py", "tests/kernels/test_kernels_cuda_compile.py",
             "tests/trainers/test_trainer_device_batch.py", "tests/frames/test_backend_device_memory.py")


#: the synthetic launch-bound plan's operators in the extract step (``benchmarks/extract.py --synthetic-ops``)
SYNTHETIC_OPS = 200


def steps(py: str) -> list[tuple[str, list[str], dict[str, str], int]]:
    """``(name, argv, extra environment, seconds allowed)`` in running order."""
    gpu = {"FBRAPIDS_BACKEND": "gpu"}
    cuda = {"FBRAPIDS_DEVICE": "cuda"}
    pytest = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu"]
    return [
        ("gpu-fixes", pytest + ["--maxfail", "20", *FIX_TESTS], gpu, 75),
        ("diff-cudf", pytest + ["--maxfail", "20", "tests/differential"], gpu, 90),
        ("demo-gpu", [py, "-m", "fbrapids.app.cli", "demo", "--backend", "gpu"], {}, 50),
        ("extract-10m", [py, "benchmarks/extract.py", "--backend", "gpu", "--rows", "10000000", "--repeat", "1",
                         "--skip-pandas", "--synthetic-ops", str(SYNTHETIC_OPS), "--out", "gpu-check-extract.json"], gpu, 100),
        ("embedding-cuda", [py, "benchmarks/embedding.py", "--rounds", "1"], cuda, 35),
        ("pytest-gpu", pytest + ["--maxfail", "20", "--ignore", "tests/differential", "--ignore", "tests/notebooks/test_notebooks.py",
                                 "--ignore", "tests/notebooks", *[f"--ignore={f}" for f in FIX_TESTS]], gpu, 100),
        ("inference-cuda", [py, "benchmarks/inference.py", "--no-http"], cuda, 40),
        ("suite-gpu", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ignore", "tests/notebooks/test_notebooks.py",
                       "--ignore", "tests/notebooks", "--maxfail", "30"], gpu, 240),
    ]


def _failed_before(out: Path) -> set[str] | None:
    """The steps that failed or did not run in an earlier ``OUT/gpu-check.json`` (None: none there)."""
    path = out / "gpu-check.json"
    if not path.exists():
        return None
    return {s["name"] for s in json.loads(path.read_text())["steps"] if s.get("rc", 1) != 0}


def _last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def _no_device() -> tuple[str, ...]:
    """Why there is no device, asked of the driver alone (so it answers even without pandas)."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return ("no CUDA device is visible: there is no NVIDIA driver (libcuda.so.1 cannot be loaded)",)
    count = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return ("no CUDA device is visible: the driver reports none",)
    return ()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("gpu-check-out"))
    ap.add_argument("--budget", type=float, default=570, help="seconds for all steps (one device call is 600)")
    ap.add_argument("--only", nargs="*", default=None, help="run only these steps")
    ap.add_argument("--strict", action="store_true", help="exit 3 (not 0) when there is no device")
    ap.add_argument("--failed", action="store_true", help="rerun only what failed in OUT/gpu-check.json")
    ap.add_argument("--rehearse", action="store_true", help="no device needed: every step's command is a stub")
    args = ap.parse_args(argv)
    if args.failed:
        again = _failed_before(args.out)
        args.only = sorted(again) if again is not None else args.only
    missing = () if args.rehearse else _no_device()
    if not missing and not args.rehearse:
        from fbrapids.frames.backend import gpu_missing  # the packages too (imports pandas: after the device check)

        missing = gpu_missing()
    if missing:
        sys.stdout.write(f"gpu-check: no GPU backend here ({'; '.join(missing)}); nothing run\n")
        return 3 if args.strict else 0
    args.out.mkdir(parents=True, exist_ok=True)
    log_path, summary = args.out / "gpu-check.log", {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "steps": []}
    deadline = time.monotonic() + args.budget
    failed = 0
    planned = sum(limit for name, _, _, limit in steps(sys.executable) if args.only is None or name in args.only)
    summary["planned_seconds"] = planned
    if args.failed and (args.out / "gpu-check.json").exists():  # keep the steps not rerun
        before = json.loads((args.out / "gpu-check.json").read_text())["steps"]
        summary["steps"] = [s for s in before if s["name"] not in (args.only or ())]
    with log_path.open("a" if args.failed else "w") as log:
        for name, cmd, env, limit in steps(sys.executable):
            if args.only is not None and name not in args.only:
                continue
            left = deadline - time.monotonic()
            if left < 10:
                summary["steps"].append({"name": name, "status": "not run: budget spent"})
                continue
            t = time.monotonic()
            run_cmd = cmd
            if args.rehearse:  # the stub, only in the rehearsal: it fails where a path the step names is missing
                lost = [a for prev, a in zip(cmd, cmd[1:]) if prev != "--ignore" and not a.startswith("--ignore")
                        and (a.endswith(".py") or a.startswith("tests/")) and not (REPO / a).exists()]
                run_cmd = ["false"] if lost else ["true"]
            try:
                proc = subprocess.run(run_cmd, cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True,
                                      timeout=min(limit, left))
                rc, out = proc.returncode, proc.stdout + proc.stderr
            except subprocess.TimeoutExpired as exc:
                rc = 124
                out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            secs = time.monotonic() - t
            failed += rc != 0
            log.write(f"==== {name}: {' '.join(cmd)} (env {env}) -> rc {rc} in {secs:.1f} s\n{out}\n")
            log.flush()
            summary["steps"].append({"name": name, "cmd": " ".join(cmd), "env": env, "rc": rc, "seconds": round(secs, 1),
                                     "tail": out.strip().splitlines()[-15:], "result": _last_json(out)})
            (args.out / "gpu-check.json").write_text(json.dumps(summary, indent=1))  # after every step
            sys.stdout.write(f"gpu-check {name:<15} {'ok' if rc == 0 else f'FAIL rc={rc}'} {secs:.1f} s\n")
            sys.stdout.flush()
    summary["failed"] = failed
    (args.out / "gpu-check.json").write_text(json.dumps(summary, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
