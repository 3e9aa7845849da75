#!/usr/bin/env python
"""Everything that needs a GPU, in one command (``make gpu-check OUT=dir``), on a machine set up
as ``../shared/gpu/README.md`` says (``PYTHONPATH=/tmp/site:$PWD``).

Steps, cheapest and most telling first, so the first failures come back even if a later step
runs out of the 10-minute device call (each has its own time limit, ``--budget`` in all):

1. ``pytest -m gpu``;
2. the whole suite with ``FBRAPIDS_BACKEND=gpu``;
3. ``fbrapids demo --backend gpu``;
4. ``benchmarks/extract.py --backend gpu --rows 10000000``;
5. ``benchmarks/embedding.py`` and ``benchmarks/inference.py`` with ``FBRAPIDS_DEVICE=cuda``.

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


def steps(py: str) -> list[tuple[str, list[str], dict[str, str], int]]:
    """``(name, argv, extra environment, seconds allowed)`` in running order."""
    gpu = {"FBRAPIDS_BACKEND": "gpu"}
    cuda = {"FBRAPIDS_DEVICE": "cuda"}
    return [
        ("pytest-gpu", [py, "-m", "pytest", "-q", "--maxfail", "20", "-m", "gpu", "-p", "no:cacheprovider",
                        "--ignore", "tests/test_notebooks.py"], gpu, 120),
        ("suite-gpu", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ignore", "tests/test_notebooks.py",
                       "--ignore", "tests/notebooks", "--maxfail", "30"], gpu, 240),
        ("demo-gpu", [py, "-m", "fbrapids.cli", "demo", "--backend", "gpu"], {}, 90),
        ("extract-10m", [py, "benchmarks/extract.py", "--backend", "gpu", "--rows", "10000000", "--repeat", "2",
                         "--skip-pandas"], gpu, 150),
        ("embedding-cuda", [py, "benchmarks/embedding.py", "--rounds", "1"], cuda, 60),
        ("inference-cuda", [py, "benchmarks/inference.py", "--no-http"], cuda, 60),
    ]


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
    args = ap.parse_args(argv)
    missing = _no_device()
    if not missing:
        from fbrapids.backend import gpu_missing  # the packages too (imports pandas: after the device check)

        missing = gpu_missing()
    if missing:
        sys.stdout.write(f"gpu-check: no GPU backend here ({'; '.join(missing)}); nothing run\n")
        return 3 if args.strict else 0
    args.out.mkdir(parents=True, exist_ok=True)
    log_path, summary = args.out / "gpu-check.log", {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "steps": []}
    deadline = time.monotonic() + args.budget
    failed = 0
    with log_path.open("w") as log:
        for name, cmd, env, limit in steps(sys.executable):
            if args.only and name not in args.only:
                continue
            left = deadline - time.monotonic()
            if left < 10:
                summary["steps"].append({"name": name, "status": "not run: budget spent"})
                continue
            t = time.monotonic()
            try:
                proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True,
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
