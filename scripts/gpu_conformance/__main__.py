"""The GPU conformance stage: ``python scripts/gpu_conformance [-v] [--only NAME ...] [--repo DIR]``
in the GPU venv, from the repository root.  One line per check; exit status 1 when any check
fails (CI fails).  ``--repo`` checks another copy of the sources (the mutation tests run the
stage on a copy with a known bug put back); ``--only`` runs the named checks
(``ptxas-limits``: only the ptxas job of the part limits)."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_ap = argparse.ArgumentParser()
_ap.add_argument("-v", action="store_true")
_ap.add_argument("--only", nargs="*", default=None)
_ap.add_argument("--repo", type=Path, default=HERE.parents[1])
ARGS, _ = _ap.parse_known_args()
REPO = ARGS.repo.resolve()
sys.path[:0] = [str(HERE.parent), str(REPO)]

from gpu_conformance import checks  # noqa: E402


def main(argv: list[str]) -> int:
    verbose = ARGS.v
    logging.basicConfig(level=logging.WARNING)
    failed = 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        dry_meta = lambda repo: checks.check_dry_meta(repo, Path(tmp))  # noqa: E731
        dry_meta.__name__ = "check_dry_meta"
        limits = lambda repo: checks.check_ptxas(repo, ("limits",))  # noqa: E731
        limits.__name__ = "check_ptxas_limits"
        # ptxas first (its worker processes start before this one loads cudf), then lazy-import and
        # cli-help, which time fresh processes, before this one loads anything else
        runs = [checks.check_ptxas, checks.check_lazy_import, checks.check_cli_help, checks.check_imports,
                checks.check_api, checks.check_shared_dtypes, checks.check_dtype_paths, checks.check_cupy_ftz,
                checks.check_dry_builders, dry_meta, checks.check_dry_join]
        if ARGS.only:
            known = {r.__name__.replace("check_", "").replace("_", "-"): r for r in runs + [limits]}
            runs = [known[name] for name in ARGS.only]
        for run in runs:
            t = time.perf_counter()
            try:
                res = run(REPO)
            except Exception as exc:  # noqa: BLE001 - a crashing check is a failing check
                res = checks.Result(getattr(run, "__name__", "check").replace("check_", ""), False,
                                    f"crashed: {type(exc).__name__}: {exc}")
            res.seconds = time.perf_counter() - t
            failed += not res.ok
            sys.stdout.write(f"gpu-conformance {res.name:<14} {('skip' if res.skipped else 'ok  ') if res.ok else 'FAIL'} {res.summary} "
                             f"({res.seconds:.1f} s)\n")
            for line in res.details:
                if verbose or not line.startswith(("unchecked", "ok ")):
                    sys.stdout.write(f"    {line}\n")
            sys.stdout.flush()
    sys.stdout.write(f"gpu-conformance: {len(runs) - failed}/{len(runs)} checks passed in "
                     f"{time.perf_counter() - start:.1f} s\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
