"""Flip random bytes / bits in a parquet file's footer and count what pyarrow and
:func:`fbrapids.views.parquet_footer.check_footer` make of each mutant.

Each mutant is checked in this process, then read by pyarrow in a forked child (footer,
every column chunk's metadata and statistics, every row group): a child killed by a
signal is an abort (pyarrow's SIGABRT on some corrupt footers).  The figure that matters
is ``abort_accepted``: mutants the check let through that then aborted pyarrow (0 wanted).

    python scripts/fuzz_parquet_footer.py data/impressions.parquet --trials 2000 --seed 1
"""

from __future__ import annotations

import argparse
import os
import random
import struct
import tempfile

import pyarrow.parquet as pq

from fbrapids.errors import ViewError
from fbrapids.views.parquet_footer import check_footer


def _read_all(path: str) -> None:
    f = pq.ParquetFile(path, page_checksum_verification=True)
    m = f.metadata
    for g in range(m.num_row_groups):
        rg = m.row_group(g)
        for c in range(rg.num_columns):
            s = rg.column(c).statistics
            if s is not None and s.has_min_max:
                s.min, s.max
    f.read()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    data = open(args.path, "rb").read()
    start = len(data) - 8 - struct.unpack("<I", data[-8:-4])[0]
    rng = random.Random(args.seed)
    counts = {"refused": 0, "accepted_read": 0, "accepted_error": 0, "abort_refused": 0, "abort_accepted": 0}
    mutant = os.path.join(tempfile.mkdtemp(), "mutant.parquet")
    for _ in range(args.trials):
        b = bytearray(data)
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            pos = rng.randrange(start, len(data) - 4)
            b[pos] = rng.randrange(256) if rng.random() < 0.5 else b[pos] ^ (1 << rng.randrange(8))
        with open(mutant, "wb") as f:
            f.write(b)
        try:
            check_footer(mutant)
            accepted = True
        except ViewError:
            accepted = False
        pid = os.fork()
        if pid == 0:
            os.close(2)
            try:
                _read_all(mutant)
                os._exit(0)
            except Exception:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            counts["abort_accepted" if accepted else "abort_refused"] += 1
        elif accepted:
            counts["accepted_read" if os.WEXITSTATUS(status) == 0 else "accepted_error"] += 1
        else:
            counts["refused"] += 1
    print(f"{args.path}: {args.trials} mutants of its {len(data) - 8 - start:,}-byte footer: {counts}")


if __name__ == "__main__":
    main()
