"""Embedding lookups + updates per second: the tiered store vs torch and TorchRec, side by side.

One run, the same Zipf-distributed id batches for every system (measured in rounds that
alternate the systems, the best round of each counting, to damp a shared machine's noise), one table of ``--rows``
ids of width ``--dim``; each batch is ``--batch`` bags of ``--pooling`` ids, sum-pooled,
a loss, backward, and the sparse update.  Throughput = ids looked up (each with its
update) per second.

Systems:

* ``tiered_in_ram``: :class:`TieredEmbeddingStore` with every row in the top tier
  (row-wise Adagrad), ids scrambled over the full 64-bit range (raw keys, no modulo).
* ``torch_embeddingbag``: ``nn.EmbeddingBag(sparse=True)`` + ``torch.optim.Adagrad``.
* ``torchrec``: TorchRec ``EmbeddingBagCollection`` on the CPU (dense weight gradient) +
  ``torchrec.optim.RowWiseAdagrad``, as an unsharded EBC trains.
* ``torchrec_fused_tbe``: fbgemm's ``SplitTableBatchedEmbeddingBagsCodegen`` on the CPU with
  the fused exact row-wise Adagrad (the kernel TorchRec uses for FUSED sharded tables).
* ``tiered_10x``: RAM tiers (cache + host) holding 1/10 of the rows, every row on the SSD
  tier (memory-mapped file under ``--ssd-dir``): the SSD holds 10x the RAM tiers' rows.

The hit rate reported for ``tiered_10x`` is over the measured batches: the share of id
lookups (every occurrence) whose row was in the cache or host RAM rather than only in the
SSD file (``upper_tier_unique_row_hit_rate_10x``: the same over unique rows per batch);
``oracle_hit_rate_10x`` is what a perfect static cache of the hottest 10% of ids would serve
(per lookup) under the same Zipf law, the ceiling for any cache of that size.

The last line printed is one JSON object with the figures.

Usage:
    python benchmarks/embedding.py            # default run (< 2 min on 2 cores)
    python benchmarks/embedding.py --rows 4000000 --batches 200
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore  # noqa: E402

SCRAMBLE = np.uint64(0x9E3779B97F4A7C15)


def zipf_batches(rows: int, alpha: float, n: int, size: int, seed: int) -> tuple[list[np.ndarray], float]:
    """``n`` arrays of ``size`` ids in [0, rows), rank r drawn with p ~ r^-alpha, ranks
    scattered over ids by a permutation; also the mass of the top 10% of ranks."""
    rng = np.random.default_rng(seed)
    w = np.arange(1, rows + 1, dtype=np.float64) ** -alpha
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    perm = rng.permutation(rows)
    out = [perm[np.minimum(np.searchsorted(cdf, rng.random(size)), rows - 1)].astype(np.int64) for _ in range(n)]
    return out, float(cdf[rows // 10 - 1])


def bench(step: Callable[[np.ndarray], None], batches: list[np.ndarray], warmup: int) -> float:
    """Ids per second over ``batches[warmup:]``."""
    t = time.perf_counter()
    for ids in batches[warmup:]:
        step(ids)
    dt = time.perf_counter() - t
    return sum(len(b) for b in batches[warmup:]) / dt


def _weights(n_bags: int, dim: int) -> torch.Tensor:
    return torch.sin(torch.arange(n_bags * dim, dtype=torch.float32)).reshape(n_bags, dim)


def tiered_step(store: TieredEmbeddingStore, offsets: torch.Tensor, w: torch.Tensor) -> Callable[[np.ndarray], None]:
    def step(ids: np.ndarray) -> None:
        lk = store.lookup(ids.view(np.uint64) * SCRAMBLE)
        pooled = F.embedding_bag(lk.inverse, lk.rows, offsets, mode="sum")
        (pooled * w).sum().backward()
        store.apply_gradients(lk)
        store.end_step()

    return step


def torch_step(rows: int, dim: int, offsets: torch.Tensor, w: torch.Tensor) -> Callable[[np.ndarray], None]:
    emb = torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True)
    opt = torch.optim.Adagrad(emb.parameters(), lr=0.05)

    def step(ids: np.ndarray) -> None:
        opt.zero_grad(set_to_none=True)
        (emb(torch.from_numpy(ids), offsets) * w).sum().backward()
        opt.step()

    return step


def torchrec_steps(rows: int, dim: int, batch: int, pooling: int, w: torch.Tensor) -> dict[str, Callable]:
    try:
        from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
        from torchrec.optim import RowWiseAdagrad
    except Exception as exc:  # absent or broken install: say so, report the rest
        logging.warning("torchrec unavailable (%s): pip install --no-deps torchrec==1.8.0 fbgemm-gpu-cpu==1.8.0 ...",
                        exc)
        return {}
    out: dict[str, Callable] = {}
    ebc = EmbeddingBagCollection(tables=[EmbeddingBagConfig(name="t", embedding_dim=dim, num_embeddings=rows,
                                                            feature_names=["f"])], device=torch.device("cpu"))
    opt = RowWiseAdagrad(ebc.parameters(), lr=0.05)
    lengths = torch.full((batch,), pooling, dtype=torch.int64)

    def ebc_step(ids: np.ndarray) -> None:
        opt.zero_grad(set_to_none=True)
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=["f"], values=torch.from_numpy(ids), lengths=lengths)
        (ebc(kjt).values() * w).sum().backward()
        opt.step()

    out["torchrec"] = ebc_step
    try:
        from fbgemm_gpu.split_embedding_configs import EmbOptimType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen)

        tbe = SplitTableBatchedEmbeddingBagsCodegen([(rows, dim, EmbeddingLocation.HOST, ComputeDevice.CPU)],
                                                    optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.05,
                                                    pooling_mode=PoolingMode.SUM)
        offs = torch.arange(0, batch * pooling + 1, pooling, dtype=torch.int64)

        def tbe_step(ids: np.ndarray) -> None:
            (tbe(torch.from_numpy(ids), offs) * w).sum().backward()  # the update is fused into backward

        out["torchrec_fused_tbe"] = tbe_step
    except Exception as exc:
        logging.warning("fbgemm TBE unavailable: %s", exc)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1 << 20, help="ids in the table")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2048, help="bags per batch")
    ap.add_argument("--pooling", type=int, default=8, help="ids per bag")
    ap.add_argument("--batches", type=int, default=40, help="measured batches per system and round")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3, help="measurement rounds, systems alternating; best counts")
    ap.add_argument("--alpha", type=float, default=1.05, help="Zipf exponent")
    ap.add_argument("--ssd-dir", default=None, help="directory for the SSD tier (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads for every system (default 1: small ops on a shared machine "
                         "are dominated by thread-pool hand-offs otherwise)")
    ap.add_argument("--eviction", default="lfu", choices=["lru", "lfu"], help="eviction policy of the 10x run")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    size = args.batch * args.pooling
    batches, oracle = zipf_batches(args.rows, args.alpha, args.warmup + args.batches, size, args.seed)
    offsets = torch.arange(0, size, args.pooling, dtype=torch.int64)
    w = _weights(args.batch, args.dim)
    print(f"table: {args.rows} rows x {args.dim}, batch {args.batch} bags x {args.pooling} ids, Zipf {args.alpha}, "
          f"{args.batches} measured batches, torch threads {torch.get_num_threads()}")

    res: dict[str, float | None] = {}
    steps: dict[str, Callable[[np.ndarray], None]] = {}
    cfg = StoreConfig(dim=args.dim, lr=0.05, cache_rows=args.rows, seed=1)
    steps["tiered_in_ram"] = tiered_step(TieredEmbeddingStore(cfg, "bench"), offsets, w)
    steps["torch_embeddingbag"] = torch_step(args.rows, args.dim, offsets, w)
    rec = torchrec_steps(args.rows, args.dim, args.batch, args.pooling, w)
    if not rec:
        print("torchrec is not installed: its figures are null")
    steps.update(rec)

    ssd_root = Path(args.ssd_dir) if args.ssd_dir else Path(tempfile.mkdtemp(prefix="fbrapids-bench-"))
    try:
        ram = args.rows // 10
        cache = max(ram // 4, 2 * size)
        cfg10 = cfg.with_(cache_rows=cache, host_rows=ram - cache, ssd_dir=str(ssd_root), eviction=args.eviction)
        store = TieredEmbeddingStore(cfg10, "bench10x")
        chunk = cache // 2
        for s in range(0, args.rows, chunk):  # every row admitted and written: SSD holds 10x the RAM tiers
            store.lookup(np.arange(s, min(args.rows, s + chunk), dtype=np.int64).view(np.uint64) * SCRAMBLE,
                         requires_grad=False)
            store.end_step()
        store.flush()
        steps["tiered_10x"] = tiered_step(store, offsets, w)

        for fn in steps.values():  # warm-up, then rounds alternating the systems; best round counts
            for ids in batches[: args.warmup]:
                fn(ids)
        before = store.stats()
        best = {name: 0.0 for name in steps}
        for _ in range(args.rounds):
            for name, fn in steps.items():
                best[name] = max(best[name], bench(fn, batches, args.warmup))
        after = store.stats()
        for name in ("tiered_in_ram", "torch_embeddingbag", "torchrec", "torchrec_fused_tbe", "tiered_10x"):
            res[f"{name}_ops_per_s"] = best.get(name)

        served = {k: after[f"served_{k}"] - before[f"served_{k}"] for k in ("cache", "host", "ssd")}
        looked = sum(served.values())
        res["upper_tier_hit_rate_10x"] = (served["cache"] + served["host"]) / looked
        res["hit_rate_10x_by_tier"] = {k: v / looked for k, v in served.items()}
        uniq = ((after["cache"]["hits"] + after["cache"]["misses"])
                - (before["cache"]["hits"] + before["cache"]["misses"]))
        res["upper_tier_unique_row_hit_rate_10x"] = 1.0 - (after["ssd"]["hits"] - before["ssd"]["hits"]) / uniq
        res["oracle_hit_rate_10x"] = oracle
        res["ssd_file_rows"] = after["rows"]
        res["ram_tier_rows"] = ram
        n_meas = args.rounds * args.batches
        res["ssd_bytes_read_per_batch"] = (after["ssd"]["bytes_out"] - before["ssd"]["bytes_out"]) / n_meas
        res["ssd_bytes_written_per_batch"] = (after["ssd"]["bytes_in"] - before["ssd"]["bytes_in"]) / n_meas
    finally:
        if not args.ssd_dir:
            shutil.rmtree(ssd_root, ignore_errors=True)

    t_in = res["tiered_in_ram_ops_per_s"]
    print(f"tiered store, in RAM      : {t_in:12.0f} lookups+updates/s")
    print(f"torch nn.EmbeddingBag     : {res['torch_embeddingbag_ops_per_s']:12.0f}   tiered/torch = "
          f"{t_in / res['torch_embeddingbag_ops_per_s']:.2f}x")
    if res["torchrec_ops_per_s"]:
        print(f"TorchRec EBC (CPU)        : {res['torchrec_ops_per_s']:12.0f}   tiered/torchrec = "
              f"{t_in / res['torchrec_ops_per_s']:.2f}x")
    if res["torchrec_fused_tbe_ops_per_s"]:
        print(f"fbgemm fused TBE (CPU)    : {res['torchrec_fused_tbe_ops_per_s']:12.0f}   tiered/tbe = "
              f"{t_in / res['torchrec_fused_tbe_ops_per_s']:.2f}x")
    print(f"tiered, SSD = 10x RAM     : {res['tiered_10x_ops_per_s']:12.0f}   10x/in-RAM = "
          f"{res['tiered_10x_ops_per_s'] / t_in:.2f}")
    hr = res["hit_rate_10x_by_tier"]
    print(f"10x lookups served by: cache {hr['cache']:.3f}, host {hr['host']:.3f}, ssd {hr['ssd']:.3f}; "
          f"upper tiers {res['upper_tier_hit_rate_10x']:.3f} (unique rows per batch: "
          f"{res['upper_tier_unique_row_hit_rate_10x']:.3f}); a perfect static cache of the hottest 10% "
          f"would serve {oracle:.3f} at Zipf {args.alpha}")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
