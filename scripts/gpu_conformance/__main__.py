"""The GPU conformance stage: ``python scripts/gpu_conformance [-v]`` in the GPU venv, from the
repository root.  One line per check; exit status 1 when any check fails (CI fails)."""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE.parent), str(REPO)]

from gpu_conformance import checks  # noqa: E402


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    logging.basicConfig(level=logging.WARNING)
    failed = 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        # lazy-import and cli-help first: they time fresh processes, before this one loads anything
        runs = [checks.check_lazy_import, checks.check_cli_help, checks.check_imports, checks.check_api,
                checks.check_shared_dtypes, checks.check_dry_builders,
                lambda repo: checks.check_dry_meta(repo, Path(tmp)), checks.check_dry_join]
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
                if verbose or not line.startswith("unchecked"):
                    sys.stdout.write(f"    {line}\n")
            sys.stdout.flush()
    sys.stdout.write(f"gpu-conformance: {len(runs) - failed}/{len(runs)} checks passed in "
                     f"{time.perf_counter() - start:.1f} s\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
