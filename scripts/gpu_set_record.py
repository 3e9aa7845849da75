#!/usr/bin/env python
"""The offline set's sizes, its kernel cache and the rehearsal's first pass, as one committed
JSON (``benchmarks/results/figures/gpu_set.json``), from which docs/gpu.md's figures are rendered
(``scripts/docs_figures.py``): ``make gpu-rehearse`` runs it after ``scripts/gpu_rehearse.sh``.

Usage: ``python scripts/gpu_set_record.py [.gpu]``
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results" / "figures" / "gpu_set.json"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    dest = Path(args[0]) if args else REPO / ".gpu"
    sys.path.insert(0, str(REPO))
    from benchmarks.machine import machine_description

    manifest = json.loads((dest / "kernels" / "manifest.json").read_text())
    kernels = {"arch": manifest["arch"], "nvrtc": manifest["nvrtc"],
               "compile_seconds": manifest["compile_seconds"],
               "steps": {name: {"plans": s["plans"], "modules": len(s["modules"]),
                                "compile_seconds": s["compile_seconds"]} for name, s in manifest["steps"].items()}}
    record = {"pack": json.loads((dest / "pack.json").read_text()), "kernels": kernels,
              "rehearsal": json.loads((dest / "rehearsal.json").read_text()),
              "machine": machine_description(),
              "measured_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "command": "make gpu-pack gpu-kernels gpu-rehearse"}
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    sys.stdout.write(f"wrote {OUT.relative_to(REPO)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
