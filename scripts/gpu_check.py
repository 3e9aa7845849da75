#!/usr/bin/env python
"""Everything that needs a GPU, in one command (``make gpu-check OUT=dir``), on a machine with
the GPU backend installed (docs/gpu.md: ``pip install -e ".[gpu]"``, or the offline set with
``PYTHONPATH=/tmp/site:$PWD``).

Steps, most telling first, each within its own time limit (``--budget``: all of them, by
default the sum of the limits of the steps run); the first five are the first pass
(:data:`FIRST_PASS`), what a first run must bring back:

1. ``gpu-fixes``: ``pytest -m gpu`` over the files of the known GPU-path fixes;
2. ``diff-cudf``: the differential suite's cudf / dask-cudf twins (``pytest -m gpu tests/differential``);
3. ``demo-gpu``: ``fbrapids demo --backend gpu``;
4. ``extract-10m``: ``benchmarks/extract.py --backend gpu --rows 10000000``: GPU output equal to the CPU's;
5. ``embedding-cuda``: ``benchmarks/embedding.py`` with ``FBRAPIDS_DEVICE=cuda``;
6. ``pytest-gpu``: the rest of ``pytest -m gpu``; 7. ``inference-cuda``; 8. ``suite-gpu``: the
   whole suite with ``FBRAPIDS_BACKEND=gpu`` (the longest, last).

``--failed`` reruns only the steps that failed (or were not run) in ``OUT/gpu-check.json``.
The steps use the kernel cache ``--kernel-cache`` (default ``.gpu/kernels`` when there:
``make gpu-kernels`` compiles the CUDA modules ahead, without a device) and count its hits
and compiles per step (``$FBRAPIDS_KERNEL_CACHE_LOG``).  ``--rehearse`` runs the sequence on
a machine without a device, each step stood in for by its CUDA modules looked up in that
cache (``scripts/gpu_kernels.py --lookup``; a miss fails it, counting the seconds NVRTC took
for it) or a stub (``true``); with ``--site`` it also checks that the unpacked offline set
holds every module the first pass's files import at module level.

Writes ``OUT/gpu-check.json`` (per step: command, exit status, seconds, its limit, kernel cache
hits and compiles, last lines, and the JSON line a benchmark printed) and ``OUT/gpu-check.log``
(every step's whole output), and ends with a one-screen table of the steps.

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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
#: the kernel cache ``make gpu-kernels`` fills, used when ``--kernel-cache`` is not given
DEFAULT_CACHE = REPO / ".gpu" / "kernels"


#: the files of the GPU-path fixes, run first (the differential suite's twins are step 2)
FIX_TESTS = ("tests/gpu/test_gpu_cuda_path_device.py", "tests/gpu/test_gpu_fixes_device.py", "tests/kernels/test_kernels_cuda_compile.py",
             "tests/trainers/test_trainer_device_batch.py", "tests/frames/test_backend_device_memory.py")


#: what each step proves when it passes (docs/gpu.md's table is rendered from it)
PROVES = {
    "gpu-fixes": "the known GPU-path fixes hold on a device: device joins and cleaning, 64-bit GAUC keys, the "
                 "CUDA kernels equal the CPU's bit for bit, device batches equal the host's, the RMM pool counts",
    "diff-cudf": "every operation of the differential suite gives on cudf / dask-cudf what it gives on pandas",
    "demo-gpu": "the whole pipeline (read, clean, join, extract, stream, train, evaluate) runs on the GPU",
    "extract-10m": "the extraction chain at 10 million rows: rows/s on the GPU, every output equal to the CPU's",
    "embedding-cuda": "the embedding store's device cache tier (the slot map's CUDA kernels)",
    "pytest-gpu": "the rest of the tests marked gpu",
    "inference-cuda": "scoring an exported model on the device",
    "suite-gpu": "the whole suite with the GPU backend",
}
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


#: the steps of the first pass: what a first run must bring back (the rest as far as the budget goes)
FIRST_PASS = ("gpu-fixes", "diff-cudf", "demo-gpu", "extract-10m", "embedding-cuda")


def _files_of(cmd: list[str]) -> list[Path]:
    """The Python files a step's command runs: the scripts it names, the test files under the
    paths it names (``--ignore`` ones left out), and the conftest files on their way."""
    ignored = {REPO / a.split("=", 1)[1] for a in cmd if a.startswith("--ignore=")}
    ignored |= {REPO / b for a, b in zip(cmd, cmd[1:]) if a == "--ignore"}
    files: set[Path] = set()
    for a in cmd:
        p = REPO / a
        if a.startswith("-") or not p.exists() or p in ignored:
            continue
        found = [p] if p.is_file() else [f for f in p.rglob("*.py") if not any(f.is_relative_to(i) for i in ignored)]
        for f in found:
            files.add(f)
            files.update(c for c in (REPO / "conftest.py", REPO / "tests" / "conftest.py") if c.exists())
    return sorted(files)


def missing_imports(files: list[Path], site: Path, host: list[str]) -> dict[str, list[str]]:
    """The modules ``files`` import at module level that neither the set unpacked in ``site``,
    the host's own packages (``host``), fbrapids' declared dependencies, the standard library
    nor the repository provides: ``{module: [files importing it]}``."""
    import ast
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    given = {d.split(">")[0].split("=")[0].split("[")[0].strip().replace("-", "_") for d in declared} | set(host)
    here = {p.stem for p in site.iterdir()} | {p.name for p in site.iterdir()} if site.is_dir() else set()
    local = {p.stem for d in ("fbrapids", "tests", "benchmarks", "scripts") for p in (REPO / d).rglob("*.py")}
    local |= {"fbrapids", "benchmarks", "tests"}
    out: dict[str, list[str]] = {}
    for f in files:
        try:
            tree = ast.parse(f.read_bytes())
        except (SyntaxError, ValueError):  # a fixture that is not Python source
            continue
        for node in tree.body:  # module level only: imports inside functions are lazy
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for top in {n.split(".")[0] for n in names}:
                if top in sys.stdlib_module_names or top in given or top in here or top in local:
                    continue
                out.setdefault(top, []).append(f.relative_to(REPO).as_posix())
    return out


def kernel_cache_note(cache: Path | None, rehearse: bool = False) -> str:
    """One line on the kernel cache the steps use: its manifest against this machine's NVRTC
    (in a rehearsal the manifest's keys are looked up as they are: no comparison)."""
    if cache is None:
        return "kernel cache: none carried (every CUDA module compiles on first use; make gpu-kernels)"
    manifest = cache / "manifest.json"
    if not manifest.exists():
        return f"kernel cache {cache}: no manifest.json (make gpu-kernels writes it)"
    m = json.loads(manifest.read_text())
    n = sum(len(s["modules"]) for s in m["steps"].values())
    line = f"kernel cache {cache}: {n} modules for {m['arch']}, NVRTC {m['nvrtc']}"
    if rehearse:
        return line
    try:
        from fbrapids.kernels.nvrtc import nvrtc_version

        here = ".".join(map(str, nvrtc_version()))
    except Exception as exc:  # noqa: BLE001 - no NVRTC here: every lookup would fail the same way
        return f"{line}; no NVRTC here ({exc})"
    return line + ("" if here == m["nvrtc"] else f"; this machine's NVRTC is {here}: no hit possible, rebuild it "
                   f"with that NVRTC (make gpu-kernels GPU_NVRTC=...)")


def _step_command(name: str, cmd: list[str], args: argparse.Namespace) -> list[str]:
    """The command a step runs: its own, or in the rehearsal its stand-in: the step's CUDA
    modules looked up in the kernel cache (``scripts/gpu_kernels.py --lookup``: hits, and the
    seconds NVRTC would spend on each miss), else ``true`` (``false`` when a path it names is
    missing)."""
    if not args.rehearse:
        return cmd
    lost = [a for prev, a in zip(cmd, cmd[1:]) if prev != "--ignore" and not a.startswith("--ignore")
            and (a.endswith(".py") or a.startswith("tests/")) and not (REPO / a).exists()]
    if lost:
        return ["false"]
    if args.kernel_cache is not None and (args.kernel_cache / "manifest.json").exists():
        steps_there = json.loads((args.kernel_cache / "manifest.json").read_text())["steps"]
        if name in steps_there:
            return [sys.executable, str(REPO / "scripts" / "gpu_kernels.py"), "--cache", str(args.kernel_cache),
                    "--lookup", name]
    return ["true"]


def run_step(name: str, cmd: list[str], env: dict[str, str], limit: float, args: argparse.Namespace,
             log: Any) -> dict[str, Any]:
    """Run one step within ``limit`` seconds; its record for ``gpu-check.json``."""
    step_env = {**os.environ, **env}
    kernel_log = args.out / f"kernels-{name}.jsonl"
    kernel_log.unlink(missing_ok=True)
    if args.kernel_cache is not None:
        step_env.update(FBRAPIDS_KERNEL_CACHE=str(args.kernel_cache.resolve()),
                        FBRAPIDS_KERNEL_CACHE_LOG=str(kernel_log.resolve()))
    t = time.monotonic()
    try:
        proc = subprocess.run(_step_command(name, cmd, args), cwd=REPO, env=step_env, capture_output=True,
                              text=True, timeout=limit)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc = 124
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    secs = time.monotonic() - t
    log.write(f"==== {name}: {' '.join(cmd)} (env {env}) -> rc {rc} in {secs:.1f} s\n{out}\n")
    log.flush()
    result = _last_json(out)
    kernels = _kernels(kernel_log, result if args.rehearse else None)
    return {"name": name, "cmd": " ".join(cmd), "env": env, "rc": rc, "seconds": round(secs, 1), "limit": limit,
            "kernels": kernels, "tail": out.strip().splitlines()[-15:], "result": result}


def _kernels(kernel_log: Path, lookup: dict | None) -> dict[str, float]:
    """A step's kernel cache lookups: from the cache's log (every process of the step), or in
    the rehearsal from the lookup's report (its misses' compile seconds as measured here)."""
    if lookup is not None and "hits" in lookup:
        return {"hits": lookup["hits"], "builds": lookup["misses"], "compile_seconds": lookup["pending_seconds"]}
    if not kernel_log.exists():
        return {"hits": 0, "builds": 0, "compile_seconds": 0.0}
    from fbrapids.kernels.cache import read_log

    got = read_log(kernel_log)
    return {"hits": got["hits"], "builds": got["builds"] + got["rebuilds"], "compile_seconds": got["compile_seconds"]}


def table(summary: dict[str, Any]) -> str:
    """The one-screen account of a run: each step, its time against its limit, pass / FAIL /
    not run, and its kernel cache hits and compiles."""
    lines = [f"{'step':<16}{'seconds':>9}{'limit':>7}  {'result':<18}kernels (cache hits / compiled, seconds)"]
    for s in summary["steps"]:
        if "rc" not in s:
            lines.append(f"{s['name']:<16}{'-':>9}{s.get('limit', 0):>7.0f}  {'not run':<18}{s.get('status', '')}")
            continue
        k = s.get("kernels") or {}
        verdict = "pass" if s["rc"] == 0 else ("FAIL: time limit" if s["rc"] == 124 else f"FAIL (rc {s['rc']})")
        kern = f"{k.get('hits', 0)} / {k.get('builds', 0)}, {k.get('compile_seconds', 0.0):.1f} s" if k else ""
        lines.append(f"{s['name']:<16}{s['seconds']:>9.1f}{s.get('limit', 0):>7.0f}  {verdict:<18}{kern}")
    ran = [s for s in summary["steps"] if "rc" in s]
    lines.append(f"{len([s for s in ran if s['rc'] == 0])} passed, {len([s for s in ran if s['rc'] != 0])} failed, "
                 f"{len(summary['steps']) - len(ran)} not run; {sum(s['seconds'] for s in ran):.0f} s of "
                 f"{summary['budget']:.0f} s budgeted")
    return "\n".join(lines)


def _plan(args: argparse.Namespace) -> tuple[list[tuple[str, list[str], dict[str, str], int]], float]:
    """The steps to run (``--only`` / ``--failed``) and the budget: ``--budget``, else the sum
    of their limits (a budget below that sum is said, naming the steps it may leave out)."""
    chosen = [s for s in steps(sys.executable) if args.only is None or s[0] in args.only]
    limits = sum(limit for *_, limit in chosen)
    budget = args.budget if args.budget is not None else float(limits)
    if budget < limits:
        sys.stdout.write(f"gpu-check: --budget {budget:.0f} s is under the {limits} s of these steps' limits: the "
                         "last steps may not run (a budget of their sum, the default, runs each to its limit)\n")
    return chosen, budget


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("gpu-check-out"))
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for all the steps run (default: the sum of their limits)")
    ap.add_argument("--only", nargs="*", default=None, help="run only these steps")
    ap.add_argument("--strict", action="store_true", help="exit 3 (not 0) when there is no device")
    ap.add_argument("--failed", action="store_true", help="rerun only what failed in OUT/gpu-check.json")
    ap.add_argument("--rehearse", action="store_true",
                    help="no device needed: each step stands in by its kernel cache lookup (or a stub)")
    ap.add_argument("--kernel-cache", type=Path, default=None,
                    help=f"the kernel cache the steps use (default: {DEFAULT_CACHE.relative_to(REPO)} when there, "
                         "filled by make gpu-kernels)")
    ap.add_argument("--site", type=Path, default=None,
                    help="with --rehearse: the unpacked set, checked to hold what the first pass imports")
    ap.add_argument("--pack", type=Path, default=None, help="with --site: the set's pack.json (its host_packages)")
    args = ap.parse_args(argv)
    if args.kernel_cache is None and DEFAULT_CACHE.is_dir():
        args.kernel_cache = DEFAULT_CACHE
    if args.failed:
        again = _failed_before(args.out)
        args.only = sorted(again) if again is not None else args.only
        if again == set():
            sys.stdout.write(f"gpu-check: every step in {args.out / 'gpu-check.json'} passed; nothing to rerun\n")
            return 0
    missing = () if args.rehearse else _no_device()
    if not missing and not args.rehearse:
        from fbrapids.frames.backend import gpu_missing  # the packages too (imports pandas: after the device check)

        missing = gpu_missing()
    if missing:
        sys.stdout.write(f"gpu-check: no GPU backend here ({'; '.join(missing)}); nothing run\n")
        return 3 if args.strict else 0
    args.out.mkdir(parents=True, exist_ok=True)
    chosen, budget = _plan(args)
    if args.site is not None:  # the set is complete for the first pass: every module-level import found
        pack = json.loads(args.pack.read_text()) if args.pack and args.pack.exists() else {}
        host = pack.get("host_packages", []) + pack.get("built_on_host", [])
        files = [f for name, cmd, *_ in chosen if name in FIRST_PASS for f in _files_of(cmd)]
        lost = missing_imports(files, args.site, host)
        sys.stdout.write(f"gpu-check: the first pass's {len(files)} files import nothing the set lacks\n" if not lost
                         else f"gpu-check: the set lacks {sorted(lost)} (imported by {sorted(lost.items())})\n")
        if lost:
            return 1
    sys.stdout.write(kernel_cache_note(args.kernel_cache, args.rehearse) + "\n")
    summary: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "budget": budget, "steps": [],
                               "planned_seconds": sum(limit for *_, limit in chosen)}
    if args.failed and (args.out / "gpu-check.json").exists():  # keep the steps not rerun
        before = json.loads((args.out / "gpu-check.json").read_text())["steps"]
        summary["steps"] = [s for s in before if s["name"] not in (args.only or ())]
    deadline = time.monotonic() + budget
    with (args.out / "gpu-check.log").open("a" if args.failed else "w") as log:
        for name, cmd, env, limit in chosen:
            left = deadline - time.monotonic()
            if left < 10:
                summary["steps"].append({"name": name, "limit": limit, "status": "not run: budget spent"})
                continue
            summary["steps"].append(run_step(name, cmd, env, min(limit, left), args, log))
            (args.out / "gpu-check.json").write_text(json.dumps(summary, indent=1))  # after every step
            s = summary["steps"][-1]
            verdict = "ok" if s["rc"] == 0 else f"FAIL rc={s['rc']}"
            sys.stdout.write(f"gpu-check {name:<15} {verdict} {s['seconds']:.1f} s\n")
            sys.stdout.flush()
    summary["failed"] = sum(1 for s in summary["steps"] if s.get("rc", 0) != 0)
    (args.out / "gpu-check.json").write_text(json.dumps(summary, indent=1))
    sys.stdout.write(table(summary) + "\n")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
