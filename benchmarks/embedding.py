"""Embedding lookups + updates per second: the tiered store against what a user would pick
instead, side by side, on the same batches with the same row-wise Adagrad.

One table of ``--rows`` ids of width ``--dim``; each batch is ``--batch`` bags of
``--pooling`` Zipf-distributed ids (``--alpha``), sum-pooled, a fixed weighted-sum loss,
backward, and the sparse update (row-wise Adagrad, lr 0.05, eps 1e-8 everywhere).
Throughput = ids looked up (each with its update) per second.  Every system sees the
same batches: ``--rounds`` rounds, each drawing ``--batches`` FRESH batches, the systems
alternating within a round (same warm-up for all); the best round of each counts.

Systems:

* ``tiered_in_ram``: :class:`TieredEmbeddingBagCollection` (the store's public module,
  the one the models use) with every row in the top tier; ids scrambled over the full
  64-bit range (raw keys, no modulo).
* ``torch_embeddingbag``: ``nn.EmbeddingBag(sparse=True)`` over the whole table with the
  same row-wise Adagrad written with torch's sparse ops (coalesce, index_add).
* ``torchrec_fused``: TorchRec's ``FusedEmbeddingBagCollection`` on the CPU with
  ``EmbOptimType.EXACT_ROWWISE_ADAGRAD`` (its fused fast module; the unsharded
  ``EmbeddingBagCollection`` builds dense gradients and is not a fair peer).
* ``fbgemm_tbe``: fbgemm's ``SplitTableBatchedEmbeddingBagsCodegen`` (the TBE under
  FusedEBC), exact row-wise Adagrad fused into backward.
* ``cuda_embeddingbag`` / ``tiered_cuda`` (with a CUDA device): ``nn.EmbeddingBag`` with
  the whole table in device memory, and the store with its cache tier on the device.
* ``tiered_10x``: RAM tiers (cache + host) holding 1/10 of the rows, every row on the SSD
  tier (``--ssd-dir``): the SSD holds 10x the RAM tiers' rows.

TorchRec and fbgemm are optional: where they do not import, their figures are null and
the reason is printed (``pip install torchrec fbgemm-gpu-cpu`` with wheels built for this
torch).

Hit rate of ``tiered_10x``: the measured share of id lookups (every occurrence) served by
the RAM tiers rather than the SSD file, over the measured rounds; next to it the best
possible for a cache of that many rows on the stream actually drawn: the share of those
lookups that go to the stream's ``ram_tier_rows`` most frequent ids.

The last line printed is one JSON object with the figures.

Usage (the acceptance run, one line):
    python benchmarks/embedding.py --rows 1000000 --rounds 3 --batches 40
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fbrapids.trainers.modules.embedding import TieredEmbeddingBagCollection  # noqa: E402
from fbrapids.trainers.sparse import StoreConfig  # noqa: E402

SCRAMBLE = np.uint64(0x9E3779B97F4A7C15)
LR, EPS = 0.05, 1e-8
Step = Callable[[np.ndarray], None]


class ZipfStream:
    """Batches of ``size`` ids in [0, rows): rank r drawn with p ~ r^-alpha, ranks scattered
    over ids by a fixed permutation."""

    def __init__(self, rows: int, alpha: float, size: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        w = np.arange(1, rows + 1, dtype=np.float64) ** -alpha
        self.cdf = np.cumsum(w) / w.sum()
        self.perm = rng.permutation(rows)
        self.rows, self.size, self.seed = rows, size, seed

    def draw(self, n: int, round_: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, round_ + 1])  # round -1: the warm-up
        return [self.perm[np.minimum(np.searchsorted(self.cdf, rng.random(self.size)), self.rows - 1)]
                .astype(np.int64) for _ in range(n)]


def best_hit_rate(batches: list[np.ndarray], rows: int, capacity: int) -> float:
    """Share of the lookups in ``batches`` that go to its ``capacity`` most frequent ids.

    Example:
        >>> best_hit_rate([np.array([1, 1, 1, 2]), np.array([3])], rows=4, capacity=1)
        0.6
    """
    counts = np.bincount(np.concatenate(batches), minlength=rows)
    top = np.partition(counts, len(counts) - capacity)[len(counts) - capacity:] if capacity < rows else counts
    return float(top.sum() / counts.sum())


def _weights(n_bags: int, dim: int, device: str = "cpu") -> torch.Tensor:
    return torch.sin(torch.arange(n_bags * dim, dtype=torch.float32, device=device)).reshape(n_bags, dim)


def tiered_step(cfg: StoreConfig, name: str, offsets: torch.Tensor, w: torch.Tensor,
                device: str = "cpu") -> tuple[Step, TieredEmbeddingBagCollection]:
    ebc = TieredEmbeddingBagCollection(["f"], cfg, prefix=name + "_").to(device)
    offs = offsets.to(device)
    wd = w.to(device)

    def step(ids: np.ndarray) -> None:
        keys = torch.from_numpy((ids.view(np.uint64) * SCRAMBLE).view(np.int64))
        out = ebc.pooled_stack({"f": (keys, offs)})
        (out[:, 0] * wd).sum().backward()
        ebc.apply_gradients()

    return step, ebc


def embeddingbag_step(rows: int, dim: int, offsets: torch.Tensor, w: torch.Tensor, device: str = "cpu") -> Step:
    """``nn.EmbeddingBag(sparse=True)``, the whole table on ``device``, row-wise Adagrad by hand."""
    emb = torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True).to(device)
    acc = torch.zeros(rows, device=device)
    offs, wd = offsets.to(device), w.to(device)

    def step(ids: np.ndarray) -> None:
        emb.weight.grad = None
        (emb(torch.from_numpy(ids).to(device), offs) * wd).sum().backward()
        with torch.no_grad():
            g = emb.weight.grad.coalesce()
            idx, val = g.indices()[0], g.values()
            a = acc.index_select(0, idx) + (val * val).mean(dim=1)
            acc.index_copy_(0, idx, a)
            emb.weight.index_add_(0, idx, val * (-LR) / (a.sqrt() + EPS).unsqueeze(1))

    return step


def torchrec_steps(rows: int, dim: int, batch: int, pooling: int, w: torch.Tensor) -> tuple[dict[str, Step], list[str]]:
    """TorchRec's FusedEmbeddingBagCollection and fbgemm's TBE, where they import."""
    out: dict[str, Step] = {}
    why: list[str] = []
    offs = torch.arange(0, batch * pooling + 1, pooling, dtype=torch.int64)
    lengths = torch.full((batch,), pooling, dtype=torch.int64)
    try:
        from fbgemm_gpu.split_embedding_configs import EmbOptimType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen)

        tbe = SplitTableBatchedEmbeddingBagsCodegen([(rows, dim, EmbeddingLocation.HOST, ComputeDevice.CPU)],
                                                    optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=LR,
                                                    eps=EPS, pooling_mode=PoolingMode.SUM)

        def tbe_step(ids: np.ndarray) -> None:
            (tbe(torch.from_numpy(ids), offs) * w).sum().backward()  # the update is fused into backward

        out["fbgemm_tbe"] = tbe_step
    except Exception as exc:  # absent, or built for another torch
        why.append(f"fbgemm TBE: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    try:
        from fbgemm_gpu.split_embedding_configs import EmbOptimType
        from torchrec import EmbeddingBagConfig, KeyedJaggedTensor
        from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection

        fused = FusedEmbeddingBagCollection(
            tables=[EmbeddingBagConfig(name="t", embedding_dim=dim, num_embeddings=rows, feature_names=["f"])],
            optimizer_type=EmbOptimType.EXACT_ROWWISE_ADAGRAD, optimizer_kwargs={"lr": LR, "eps": EPS},
            device=torch.device("cpu"))

        def fused_step(ids: np.ndarray) -> None:
            kjt = KeyedJaggedTensor.from_lengths_sync(keys=["f"], values=torch.from_numpy(ids), lengths=lengths)
            (fused(kjt).values() * w).sum().backward()  # the update is fused into backward

        out["torchrec_fused"] = fused_step
    except Exception as exc:
        why.append(f"TorchRec FusedEmbeddingBagCollection: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    return out, why


def timed(step: Step, batches: list[np.ndarray], sync: Callable[[], None]) -> float:
    """Ids per second over ``batches``."""
    sync()
    t = time.perf_counter()
    for ids in batches:
        step(ids)
    sync()
    return sum(len(b) for b in batches) / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1 << 20, help="ids in the table")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2048, help="bags per batch")
    ap.add_argument("--pooling", type=int, default=8, help="ids per bag")
    ap.add_argument("--batches", type=int, default=40, help="fresh batches per round")
    ap.add_argument("--warmup", type=int, default=40, help="warm-up batches per system (drawn separately)")
    ap.add_argument("--rounds", type=int, default=3, help="measurement rounds, systems alternating; best counts")
    ap.add_argument("--alpha", type=float, default=1.05, help="Zipf exponent")
    ap.add_argument("--ssd-dir", default=None, help="directory for the SSD tier (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads for every system")
    ap.add_argument("--eviction", default="lfu", help="eviction policy of the 10x run")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    size = args.batch * args.pooling
    stream = ZipfStream(args.rows, args.alpha, size, args.seed)
    offsets = torch.arange(0, size, args.pooling, dtype=torch.int64)
    w = _weights(args.batch, args.dim)
    print(f"table: {args.rows} rows x {args.dim}, batch {args.batch} bags x {args.pooling} ids, Zipf {args.alpha}, "
          f"{args.rounds} rounds x {args.batches} fresh batches, torch {torch.__version__} threads "
          f"{torch.get_num_threads()}, cuda {'yes' if cuda else 'no'}")

    steps: dict[str, Step] = {}
    cfg = StoreConfig(dim=args.dim, lr=LR, eps=EPS, cache_rows=args.rows, seed=1, device="cpu")
    steps["tiered_in_ram"], _ = tiered_step(cfg, "ram", offsets, w)
    steps["torch_embeddingbag"] = embeddingbag_step(args.rows, args.dim, offsets, w)
    rec, why = torchrec_steps(args.rows, args.dim, args.batch, args.pooling, w)
    steps.update(rec)
    for line in why:
        print(f"not measured: {line}")
    if cuda:
        steps["cuda_embeddingbag"] = embeddingbag_step(args.rows, args.dim, offsets, w, "cuda")
        steps["tiered_cuda"], ebc_cuda = tiered_step(cfg.with_(device=None), "cuda", offsets, w, "cuda")

    ssd_root = Path(args.ssd_dir) if args.ssd_dir else Path(tempfile.mkdtemp(prefix="fbrapids-bench-"))
    res: dict[str, object] = {}
    try:
        ram = max(args.rows // 10, 2)
        cache = min(max(ram // 4, 2 * size), max(1, ram // 2))
        cfg10 = cfg.with_(cache_rows=cache, host_rows=ram - cache, ssd_dir=str(ssd_root), eviction=args.eviction)
        steps["tiered_10x"], ebc10 = tiered_step(cfg10, "bench10x", offsets, w)
        store = ebc10.stores["f"]
        chunk = max(1, cache // 2)
        for s in range(0, args.rows, chunk):  # every row admitted and written: SSD holds 10x the RAM tiers
            store.lookup(np.arange(s, min(args.rows, s + chunk), dtype=np.int64).view(np.uint64) * SCRAMBLE,
                         requires_grad=False)
            store.end_step()
        store.flush()

        warm = stream.draw(args.warmup, -1)
        for fn in steps.values():
            for ids in warm:
                fn(ids)
        before = store.stats()
        before_cuda = ebc_cuda.stores["f"].stats() if cuda else None
        best = dict.fromkeys(steps, 0.0)
        drawn: list[np.ndarray] = []
        for r in range(args.rounds):
            batches = stream.draw(args.batches, r)
            drawn += batches
            for name, fn in steps.items():
                best[name] = max(best[name], timed(fn, batches, sync))
        after = store.stats()
        if cuda:  # distinct ids the device map found vs those looked up in the host directory
            after_cuda = ebc_cuda.stores["f"].stats()
            for key in ("device_map_hits", "host_directory_lookups"):
                res[f"tiered_cuda_{key}"] = after_cuda[key] - before_cuda[key]
        for name in ("tiered_in_ram", "torch_embeddingbag", "torchrec_fused", "fbgemm_tbe", "cuda_embeddingbag",
                     "tiered_cuda", "tiered_10x"):
            res[f"{name}_ops_per_s"] = best.get(name)
        served = {k: after[f"served_{k}"] - before[f"served_{k}"] for k in ("cache", "host", "ssd")}
        looked = sum(served.values())
        res["upper_tier_hit_rate_10x"] = (served["cache"] + served["host"]) / looked
        res["hit_rate_10x_by_tier"] = {k: v / looked for k, v in served.items()}
        res["best_possible_hit_rate_10x"] = best_hit_rate(drawn, args.rows, ram)
        res["hit_rate_vs_best_10x"] = res["upper_tier_hit_rate_10x"] / res["best_possible_hit_rate_10x"]
        res["ssd_file_rows"] = after["rows"]
        res["ram_tier_rows"] = ram
        res["cache_rows_10x"], res["host_rows_10x"] = cache, ram - cache
        n_meas = args.rounds * args.batches
        res["ssd_bytes_read_per_batch"] = (after["ssd"]["bytes_out"] - before["ssd"]["bytes_out"]) / n_meas
        res["ssd_bytes_written_per_batch"] = (after["ssd"]["bytes_in"] - before["ssd"]["bytes_in"]) / n_meas
        res["not_measured"] = why
    finally:
        if not args.ssd_dir:
            shutil.rmtree(ssd_root, ignore_errors=True)

    t_in = res["tiered_in_ram_ops_per_s"]
    label = {"tiered_in_ram": "tiered store, in RAM", "torch_embeddingbag": "nn.EmbeddingBag + row-wise Adagrad",
             "torchrec_fused": "TorchRec FusedEBC (CPU)", "fbgemm_tbe": "fbgemm TBE (CPU)",
             "cuda_embeddingbag": "nn.EmbeddingBag on cuda", "tiered_cuda": "tiered store, cache on cuda",
             "tiered_10x": "tiered, SSD = 10x RAM"}
    for name, text in label.items():
        v = res[f"{name}_ops_per_s"]
        if v:
            print(f"{text:36s}: {v:12.0f} lookups+updates/s   tiered in RAM / this = {t_in / v:.2f}x")
    print(f"10x / in-RAM = {res['tiered_10x_ops_per_s'] / t_in:.2f}")
    hr = res["hit_rate_10x_by_tier"]
    print(f"10x lookups served by: cache {hr['cache']:.3f}, host {hr['host']:.3f}, ssd {hr['ssd']:.3f}; "
          f"RAM tiers {res['upper_tier_hit_rate_10x']:.4f} against the best possible "
          f"{res['best_possible_hit_rate_10x']:.4f} "
          f"for {ram} rows on the stream drawn ({res['hit_rate_vs_best_10x']:.3f} of it)")
    if "tiered_cuda_device_map_hits" in res:
        print(f"cache on cuda, distinct ids: {res['tiered_cuda_device_map_hits']} found by the device map, "
              f"{res['tiered_cuda_host_directory_lookups']} looked up in the host directory")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
