#!/usr/bin/env python
"""The device check's CUDA kernels compiled ahead, with no device (``make gpu-kernels``).

A GPU machine's first run compiles every plan's CUDA modules with NVRTC (the big plans take
tens of CPU seconds each).  None of it needs the device: a plan depends on the features and
the input schema, a CUBIN on the source, the options, the architecture and the NVRTC version
(:func:`fbrapids.kernels.runtime_cuda.cubin_key`).  So, here:

1. **record**: each extracting step of ``scripts/gpu_check.py`` is run as its CPU twin (the
   same command on the CPU backend, small data where rows do not change the plans) with
   ``$FBRAPIDS_PLAN_RECORD`` set (:mod:`fbrapids.kernels.plan_record`);
2. **compile**: every recorded plan is built for the GPU and each CUDA module a
   :class:`~fbrapids.kernels.runtime_cuda.CudaPlan` would load for it is compiled for
   ``--arch`` into the kernel cache ``--cache``: the device helpers, the layers over both
   offset layouts cudf gives string inputs (int32 from parquet and libcudf, int64 from
   pandas / Arrow ``large_string``; list offsets are always int32), and the dictionary
   path's one-operator plans.  The seconds each plan took are printed;
3. ``--cache/manifest.json``: the NVRTC version, the architecture, and per step its modules.

On the GPU machine ``scripts/gpu_check.py --kernel-cache DIR`` runs the steps with that
cache and reports, per step, the cache hits and any module compiled there.  ``--lookup
STEP`` looks up one step's modules (a hit, or a compile: what the step would spend on
kernels); the rehearsal (``scripts/gpu_rehearse.sh``) runs it in place of each device step.

Usage::

    python scripts/gpu_kernels.py --cache .gpu/kernels            # record, compile, manifest
    python scripts/gpu_kernels.py --cache .gpu/kernels --lookup demo-gpu
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ARCH = "sm_90"
#: the kernel cache in force before this script pointed it at ``--cache`` (the CPU twins use it)
USER_CACHE = os.environ.get("FBRAPIDS_KERNEL_CACHE")
#: what the GPU gets as a device budget in the compiled plans (placement: every operator fits)
BUDGET = 1 << 36


def twins(py: str) -> dict[str, list[str]]:
    """Per extracting step of ``scripts/gpu_check.py``, the command whose plans it runs on
    the CPU backend (the demo at its default size and seed: fitted operators' states come
    from the data; the extract benchmark at a small size: its plans do not depend on rows).
    The pytest steps' GPU tests are skipped without a device, so their (small) plans are not
    recorded: the device run reports them as compiled there."""
    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_check

    return {
        "demo-gpu": [py, "-m", "fbrapids.app.cli", "demo", "--backend", "cpu"],
        "extract-10m": [py, "benchmarks/extract.py", "--rows", "20000", "--repeat", "1", "--skip-pandas",
                        "--synthetic-ops", str(gpu_check.SYNTHETIC_OPS), "--out", "-"],
    }


def record(step: str, cmd: list[str], out: Path) -> float:
    """Run ``cmd`` (a step's CPU twin) recording its plans into ``out``; its seconds."""
    out.unlink(missing_ok=True)
    env = {**os.environ, "FBRAPIDS_BACKEND": "cpu", "FBRAPIDS_PLAN_RECORD": str(out)}
    if USER_CACHE is None:  # the twins' host kernels go to the user's own cache, not the one filled here
        env.pop("FBRAPIDS_KERNEL_CACHE", None)
    else:
        env["FBRAPIDS_KERNEL_CACHE"] = USER_CACHE
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 5):  # pytest's 5: every test skipped here (they need a device)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"gpu-kernels: recording {step} failed (rc {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return time.perf_counter() - t0


def _variants(plan: Any) -> list[dict[int, Any]]:
    """The input layouts a device run meets: string offsets int32 (parquet, libcudf results)
    or int64 (from pandas); lists always int32 list offsets (only non-host layouts listed)."""
    from fbrapids.kernels.abi import InputLayout

    out = []
    for width in (4, 8):
        lay: dict[int, Any] = {}
        for node in plan.nodes:
            if node.op is not None:
                continue
            if node.type == "str" and width == 4:
                lay[node.id] = InputLayout(offsets=4)
            elif node.type == "list<str>":
                lay[node.id] = InputLayout(offsets=4, str_offsets=width)
            elif node.type.startswith("list<"):
                lay[node.id] = InputLayout(offsets=4)
        if lay not in out:
            out.append(lay)
    return out


def modules(rec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(what, source)`` of every CUDA module a CudaPlan loads for a recorded plan."""
    from fbrapids.kernels.plan import build_plan
    from fbrapids.kernels.runtime_cuda import dictionary_eligible, module_source

    plan = build_plan(rec["features"], rec["schema"], backend="gpu", fused=rec["fused"], device_budget=BUDGET,
                      dictionary=rec["dictionary"])
    if not any(layer.placement == "gpu" for layer in plan.layers):
        return
    label = f"{plan.num_ops} ops, {len(plan.layers)} layers{'' if rec['fused'] else ', op-by-op'}"
    for lay in _variants(plan):
        yield f"{label} ({'int32' if lay else 'int64'} offsets)", module_source(plan, lay)
    coded = {n.id for n in plan.nodes if n.op is None and n.type == "str"}  # string columns may be categorical
    for node in plan.nodes:
        if node.op is not None and dictionary_eligible(node, coded):
            sub = plan.node_plan(node.id)
            for lay in _variants(sub):
                yield f"{node.label} over its categories", module_source(sub, lay)


def compile_step(records: list[dict[str, Any]], arch: str, seen: dict[str, float],
                 before: dict[str, float] | None = None) -> dict[str, Any]:
    """Compile (or find) every module of one step's recorded plans; per module its key and the
    seconds NVRTC took for it (for a module already in the cache: the seconds ``before``, the
    previous manifest, recorded when it was compiled)."""
    from fbrapids.kernels.cache import verified
    from fbrapids.kernels.runtime_cuda import DEVICE_HELPERS, cached_cubin, cubin_key, device_helpers_source

    out: dict[str, Any] = {"plans": len(records), "modules": []}
    sources = [("the runtime's device helpers", device_helpers_source(), DEVICE_HELPERS)]
    for rec in records:
        sources += [(what, src, "fbx_layers.cu") for what, src in modules(rec)]
    for what, src, name in sources:
        key = cubin_key(src, arch)
        if key not in seen:
            known = (before or {}).get(key) if verified(f"{key}.cubin") is not None else None
            t0 = time.perf_counter()
            cached_cubin(src, arch, name)
            seen[key] = known if known is not None else round(time.perf_counter() - t0, 2)
            sys.stdout.write(f"gpu-kernels   {what}: {seen[key]:.1f} s{' (compiled before)' if known else ''}\n")
            sys.stdout.flush()
        if key not in {m["key"] for m in out["modules"]}:  # the same module from two plans: loaded once
            out["modules"].append({"key": key, "what": what, "seconds": seen[key]})
    out["compile_seconds"] = round(sum(m["seconds"] for m in out["modules"]), 2)
    return out


def _distinct(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of distinct plans (a plan is built once per partition and per call)."""
    import pickle

    seen, out = set(), []
    for rec in records:
        blob = pickle.dumps((sorted((k, repr(v)) for k, v in rec["features"].items()), sorted(rec["schema"].items()),
                             rec["fused"], rec["dictionary"]))
        if blob not in seen:
            seen.add(blob)
            out.append(rec)
    return out


def build(cache: Path, arch: str, steps: list[str] | None, again: bool = False) -> dict[str, Any]:
    """Record (kept in ``cache/plans``; ``again``: recorded anew) and compile (module
    docstring); the manifest written to ``cache/manifest.json``."""
    from fbrapids.kernels.nvrtc import nvrtc_library, nvrtc_version
    from fbrapids.kernels.plan_record import read_records

    manifest: dict[str, Any] = {"arch": arch, "nvrtc": ".".join(map(str, nvrtc_version())),
                                "nvrtc_library": Path(nvrtc_library()).name, "steps": {}}
    seen: dict[str, float] = {}
    before = {}
    if (cache / "manifest.json").exists():
        old = json.loads((cache / "manifest.json").read_text())
        if old.get("nvrtc") == manifest["nvrtc"] and old.get("arch") == arch:
            before = {m["key"]: m["seconds"] for st in old["steps"].values() for m in st["modules"]}
    (cache / "plans").mkdir(exist_ok=True)
    for step, cmd in twins(sys.executable).items():
        if steps and step not in steps:
            continue
        path = cache / "plans" / f"{step}.plans"
        if again or not path.exists():
            secs = record(step, cmd, path)
            sys.stdout.write(f"gpu-kernels {step}: its CPU twin recorded in {secs:.0f} s\n")
        records = _distinct(list(read_records(path))) if path.exists() else []
        sys.stdout.write(f"gpu-kernels {step}: {len(records)} plans\n")
        manifest["steps"][step] = compile_step(records, arch, seen, before)
        sys.stdout.write(f"gpu-kernels {step}: {len(manifest['steps'][step]['modules'])} modules, "
                         f"{manifest['steps'][step]['compile_seconds']:.1f} s of compiling\n")
    manifest["compile_seconds"] = round(sum(seen.values()), 2)
    (cache / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    if not steps:  # the whole check's cache: what no step needs is not carried
        for f in [*cache.glob("*.cubin*"), *cache.glob("*.so*"), *cache.glob("*.lock")]:
            if f.name.split(".")[0] not in seen:
                f.unlink()
    return manifest


def lookup(cache: Path, step: str) -> dict[str, Any]:
    """Look up every module of ``step`` in the cache as the step does on the device: each is a
    hit, or NVRTC would compile it there for the seconds it took here (``pending_seconds``)."""
    from fbrapids.kernels import cache as kcache

    manifest = json.loads((cache / "manifest.json").read_text())
    entry = manifest["steps"].get(step, {"modules": []})
    missing = [m for m in entry["modules"] if kcache.verified(f"{m['key']}.cubin") is None]
    return {"step": step, "modules": len(entry["modules"]), "hits": len(entry["modules"]) - len(missing),
            "misses": len(missing), "pending_seconds": round(sum(m["seconds"] for m in missing), 2),
            "cold_seconds": round(sum(m["seconds"] for m in entry["modules"]), 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=REPO / ".gpu" / "kernels", help="the kernel cache to fill")
    ap.add_argument("--arch", default=ARCH, help="the GPU architecture (sm_90: H100, H200)")
    ap.add_argument("--steps", nargs="*", default=None, help="only these steps (default: every extracting step)")
    ap.add_argument("--record", action="store_true",
                    help="record the steps' plans anew (default: the records in CACHE/plans when there)")
    ap.add_argument("--lookup", metavar="STEP", default=None,
                    help="look up one step's modules in the cache (the rehearsal's stand-in for the step)")
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    os.environ["FBRAPIDS_KERNEL_CACHE"] = str(args.cache.resolve())
    if args.lookup:
        got = lookup(args.cache, args.lookup)
        sys.stdout.write(json.dumps(got) + "\n")
        return 0 if got["misses"] == 0 else 1
    t0 = time.perf_counter()
    manifest = build(args.cache, args.arch, args.steps, args.record)
    sys.stdout.write(json.dumps({"arch": manifest["arch"], "nvrtc": manifest["nvrtc"],
                                 "modules": sum(len(s["modules"]) for s in manifest["steps"].values()),
                                 "compile_seconds": manifest["compile_seconds"],
                                 "seconds": round(time.perf_counter() - t0, 1)}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
