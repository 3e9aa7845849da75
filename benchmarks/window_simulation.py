"""RAM-tier hit rate against Belady's optimum by how many batches ahead the eviction
policy is told, simulated in numpy on ``benchmarks/embedding.py``'s own stream and
capacities (no store involved): the study behind the ``lfu_window`` policy and the
trainer's window (``fit(lookahead=32)``).

The simulated cache is the RAM tiers as one set of ``rows // 10`` rows that must hold each
batch's distinct ids; after each batch, while over capacity, it drops the rows not in the
batch with the smallest key.  ``lfu``: key = lookup count so far (``lfu_full`` keeps RAM
full like this).  ``window W``: rows used again within the next ``W`` batches rank above
all others, the sooner the higher, the rest by count (``lfu_window``).  ``partition P``:
what a trainer taking whole partitions of ``P`` batches knows: the rest of the current
partition (``+1``: and the next one, queued behind it).  Hits are counted over the
measured batches only, as the benchmark counts them.

Usage: ``python benchmarks/window_simulation.py`` (the benchmark's defaults; about 15 s of CPU).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from embedding import ZipfStream, belady_hit_rate  # noqa: E402


def simulate(seq: list[tuple[np.ndarray, np.ndarray]], rows: int, capacity: int, count_from: int,
             known_until: "callable[[int], int] | None") -> float:
    """Hit rate over ``seq[count_from:]`` (distinct ids and counts per batch) of a cache of
    ``capacity`` rows that knows, at batch ``t``, the batches up to ``known_until(t)``
    (None: none, plain LFU)."""
    never = np.int64(1) << np.int64(40)
    nxt: list[np.ndarray] = [np.empty(0, np.int64)] * len(seq)
    seen = np.full(rows, never, dtype=np.int64)
    for t in range(len(seq) - 1, -1, -1):
        nxt[t] = seen[seq[t][0]].copy()
        seen[seq[t][0]] = t
    next_use = seen
    cached = np.zeros(rows, dtype=bool)
    freq = np.zeros(rows, dtype=np.int64)
    hit = total = 0
    for t, (u, c) in enumerate(seq):
        if t >= count_from:
            hit += int(c[cached[u]].sum())
            total += int(c.sum())
        freq[u] += c
        next_use[u] = nxt[t]
        cached[u] = True
        over = int(cached.sum()) - capacity
        if over > 0:
            cand = np.flatnonzero(cached)
            cand = cand[~np.isin(cand, u)]
            key = freq[cand].astype(np.float64)
            if known_until is not None:
                nu = next_use[cand]
                key = np.where(nu <= known_until(t), 1e15 - nu, key)
            cached[cand[np.argpartition(key, over - 1)[:over]]] = False
    return hit / total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1 << 20)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--pooling", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=1.05)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--windows", default="1,5,10,20,32,40,80")
    ap.add_argument("--partitions", default="16,40,128")
    args = ap.parse_args()
    stream = ZipfStream(args.rows, args.alpha, args.batch * args.pooling, args.seed)
    warm = stream.draw(args.warmup, -1)
    meas = [b for r in range(args.rounds) for b in stream.draw(args.batches, r)]
    seq = [np.unique(b, return_counts=True) for b in warm + meas]
    cap = max(args.rows // 10, 2)
    opt = belady_hit_rate(warm, meas, cap)
    print(f"{args.rows} ids, Zipf {args.alpha}, batches of {args.batch} x {args.pooling} ids, RAM {cap} rows, "
          f"{args.warmup} warm-up + {len(meas)} measured batches; Belady {opt:.4f}")

    def row(label: str, rate: float) -> None:
        print(f"{label:36s} {rate:.4f}  {rate / opt:.3f} of Belady", flush=True)

    row("lfu (history counts only)", simulate(seq, args.rows, cap, len(warm), None))
    for w in (int(x) for x in args.windows.split(",") if x):
        row(f"window {w} batches + lfu", simulate(seq, args.rows, cap, len(warm), lambda t, w=w: t + w))
    for p in (int(x) for x in args.partitions.split(",") if x):
        for ahead in (0, 1):
            row(f"partition of {p} batches +{ahead} queued",
                simulate(seq, args.rows, cap, len(warm), lambda t, p=p, a=ahead: (t // p + 1 + a) * p - 1))


if __name__ == "__main__":
    main()
