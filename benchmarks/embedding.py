"""Embedding lookups + updates per second: the tiered store against what a user would pick
instead, side by side, on the same batches with the same row-wise Adagrad.

One table of ``--rows`` ids of width ``--dim``; each batch is ``--batch`` bags of
``--pooling`` Zipf-distributed ids (``--alpha``), sum-pooled, a fixed weighted-sum loss,
backward, and the sparse update (row-wise Adagrad, lr 0.05, eps 1e-8 everywhere).
Throughput = ids looked up (each with its update) per second.  Every system sees the
same batches: ``--rounds`` rounds, each drawing ``--batches`` FRESH batches, the systems
alternating within a round (same warm-up for all; the two 10x stores swap places every
other round: the one right after ``nn.EmbeddingBag`` runs slower); the best round of each counts.

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
  tier (``--ssd-dir``): the SSD holds 10x the RAM tiers' rows; eviction ``--eviction``
  (default ``lfu_window``: before each batch it is told the ids of the batch ``--window``
  ahead, as :func:`fbrapids.trainers.fit.fit` does from the stream's extracted
  partitions, default the trainer's 32; the announcing is inside the timed steps).
* ``tiered_10x_old``: the same with the older eviction policy ``--old-eviction`` (its hit
  rate on the same stream; ``--old-eviction ''`` leaves it out).

``--threads 1,2`` measures every system at each of those torch intra-op thread counts
(``torch.set_num_threads``, alternating within each round), the same warm-up and rounds
for each, fresh batches for each round and count; the store splits its row loops over
those threads too (:func:`fbrapids.trainers.sparse.hashmap.row_threads`); the top-level
``*_ops_per_s`` figures are the first count's, ``by_threads`` holds them all.  OpenMP
threads wait passively (``OMP_WAIT_POLICY=PASSIVE`` unless set): spinning ones starve each
other on a loaded machine.

TorchRec and fbgemm are optional: where they do not import, their figures are null and
the reason is printed.  They load from the pinned set in ``scripts/bench_venv.sh`` (a
separate venv, ``.venv-bench``: torch 2.13.0, torchrec 1.8.0, fbgemm-gpu-cpu 1.8.0; the
``bench`` extra of pyproject.toml lists it), run as ``.venv-bench/bin/python
benchmarks/embedding.py``.

Hit rate of ``tiered_10x``: the measured share of id lookups (every occurrence) served by
the RAM tiers rather than the SSD file, over the measured rounds, against the best
possible on the stream actually drawn (``best_possible_hit_rate_10x``): Belady's offline
optimum for RAM tiers of that many rows that, like the store's, must hold every row of a
batch while it is trained (evicting, at each batch, the rows used again farthest ahead),
from the start of the warm-up, with the best starting contents (so no store can beat
it, whatever its warm-up left in RAM).  ``static_oracle_hit_rate_10x``
is the share of the lookups that go to the stream's ``ram_tier_rows`` most frequent ids
(counted over the measured batches only, a cache that knows those counts in advance and
never admits another row: no store that must hold a batch's rows can reach it).
``known_distribution_hit_rate_10x``: the share that goes to the ``ram_tier_rows`` ids most
probable under the Zipf law drawn from, the best an online cache does when it knows that
law (and need not hold a batch's rows); a store learns it from the lookups it has seen.
``ssd_rows_read_per_batch`` (``old_...`` for the older policy): rows the 10x store read
from its SSD file per measured batch; no policy reads ahead, so each RAM hit is a read
saved.  ``benchmarks/window_simulation.py`` simulates the hit rate by window length.

Every store step first tells the store the batch that comes next, then looks up its own
(prepared the step before): the store finds, admits and books the next batch's rows in its
background thread while this step looks up and trains (``prepare`` two deep, the pattern
:meth:`~fbrapids.trainers.sparse.TieredEmbeddingStore.prepare` states), as ``fit`` does.
The 10x stores, whose prepare cannot go two deep (``prepares_two_deep``), are told after
their lookup, as ``fit`` tells them.  The peers take no such hint.  The step has no work of its own after
the sparse update, so the update runs on this thread (``apply_gradients()``; ``fit`` runs it in
the background, beside its dense optimizer's step).

Honest figures (:mod:`benchmarks.machine`): the load average and a machine-speed reference
(a fixed loop) at the start and the end, the peers' absolute rates beside the ratios
(``peer_rates``), and ``verdict``: ``"noisy"`` when the load exceeded 1.5 at the start or a
peer or the fixed loop ran more than 25% below its reference rate on this machine; a noisy
run is kept but not written into the README (``scripts/bench.py``, ``scripts/docs_figures.py``).

The last line printed is one JSON object with the figures.

Usage (the acceptance run, one line; ``scripts/bench_venv.sh`` makes ``.venv-bench``):
    .venv-bench/bin/python benchmarks/embedding.py --rows 1000000 --rounds 3 --batches 40 --threads 1,2
"""

from __future__ import annotations

import argparse
import heapq
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

# OpenMP threads that spin while waiting starve each other on a loaded machine (2 threads on a
# busy 2-core box ran torch's ops 100x slower); waiting passively, for every system alike
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import NoiseCheck  # noqa: E402
from fbrapids.trainers.fit import LOOKAHEAD_BATCHES  # noqa: E402
from fbrapids.trainers.modules.embedding import TieredEmbeddingBagCollection  # noqa: E402
from fbrapids.trainers.sparse import StoreConfig  # noqa: E402
from fbrapids.trainers.strategy import prepare_before_lookup  # noqa: E402

SCRAMBLE = np.uint64(0x9E3779B97F4A7C15)
LR, EPS = 0.05, 1e-8
#: one system's step on a batch of ids, told the batch it will get next (None at the end)
Step = Callable[[np.ndarray, "np.ndarray | None"], None]


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


def belady_hit_rate(warmup: list[np.ndarray], batches: list[np.ndarray], capacity: int) -> float:
    """Belady's (offline optimal) share of the lookups in ``batches`` served by a cache of
    ``capacity`` rows that must hold each batch's distinct ids while it is trained, over
    ``warmup`` then ``batches``, starting with the best contents (the ``capacity`` ids used
    first): at each batch the missing ids come in and, when full, out go the cached ids
    not in the batch that are used again farthest ahead.  Every occurrence of a missing id
    counts as a miss.

    Example:
        >>> belady_hit_rate([np.array([1, 2])], [np.array([3, 1]), np.array([1, 1, 2])], capacity=2)
        0.6
    """
    seq = [np.unique(b, return_counts=True) for b in list(warmup) + list(batches)]
    never = len(seq) + 1
    upcoming: list[list[int]] = [[]] * len(seq)  # per batch, the next batch each of its ids is in
    seen: dict[int, int] = {}
    for t in range(len(seq) - 1, -1, -1):
        ids = seq[t][0].tolist()
        upcoming[t] = [seen.get(x, never) for x in ids]
        seen.update(zip(ids, [t] * len(ids)))
    # cached id -> next batch it is used in; to start, the ids used first (any start is allowed)
    next_use = dict(sorted(seen.items(), key=lambda kv: kv[1])[:capacity])
    heap = [(-n, x) for x, n in next_use.items()]  # (-next use, id), stale entries skipped
    heapq.heapify(heap)
    hit = total = 0
    for t, (u, c) in enumerate(seq):
        ids = u.tolist()
        cached = np.fromiter((x in next_use for x in ids), dtype=bool, count=len(ids))
        if t >= len(warmup):
            hit += int(c[cached].sum())
            total += int(c.sum())
        for x, n in zip(ids, upcoming[t]):
            next_use[x] = n
            heapq.heappush(heap, (-n, x))
        over = len(next_use) - capacity
        if over > 0:
            now, kept = set(ids), []
            while over > 0:
                neg, x = heapq.heappop(heap)
                if next_use.get(x) != -neg:
                    continue
                if x in now:  # in this batch: it stays
                    kept.append((neg, x))
                    continue
                del next_use[x]
                over -= 1
            for e in kept:
                heapq.heappush(heap, e)
    return hit / total if total else 1.0


def _weights(n_bags: int, dim: int, device: str = "cpu") -> torch.Tensor:
    return torch.sin(torch.arange(n_bags * dim, dtype=torch.float32, device=device)).reshape(n_bags, dim)


def tiered_step(cfg: StoreConfig, name: str, offsets: torch.Tensor, w: torch.Tensor,
                device: str = "cpu") -> tuple[Step, TieredEmbeddingBagCollection]:
    ebc = TieredEmbeddingBagCollection(["f"], cfg, prefix=name + "_").to(device)
    offs = offsets.to(device)
    wd = w.to(device)

    # the batch the last step was told comes next, and its ids as the store saw them (the same
    # tensor looked up: a batch object goes from the prepare to the lookup, as in fit)
    told: list[tuple[np.ndarray, dict[str, tuple[torch.Tensor, torch.Tensor]]] | None] = [None]

    def keyed(ids: np.ndarray) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        return {"f": (torch.from_numpy((ids.view(np.uint64) * SCRAMBLE).view(np.int64)), offs)}

    def step(ids: np.ndarray, upcoming: np.ndarray | None = None) -> None:
        was = told[0]
        sparse = was[1] if was is not None and was[0] is ids else keyed(ids)
        nxt = None if upcoming is None else keyed(upcoming)
        told[0] = (upcoming, nxt) if upcoming is not None and nxt is not None else None
        # fit's own telling: two deep before the lookup (this batch first when nothing is pending for it)
        done = prepare_before_lookup(ebc, sparse, nxt)
        out = ebc.pooled_stack(sparse)
        if nxt is not None and not done:  # tiers below RAM: found while this one trains, as fit does
            ebc.prepare(nxt)
        (out[:, 0] * wd).sum().backward()
        ebc.apply_gradients()

    return step, ebc


def embeddingbag_step(rows: int, dim: int, offsets: torch.Tensor, w: torch.Tensor, device: str = "cpu") -> Step:
    """``nn.EmbeddingBag(sparse=True)``, the whole table on ``device``, row-wise Adagrad by hand."""
    emb = torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True).to(device)
    acc = torch.zeros(rows, device=device)
    offs, wd = offsets.to(device), w.to(device)

    def step(ids: np.ndarray, upcoming: np.ndarray | None = None) -> None:
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
            ComputeDevice,
            SplitTableBatchedEmbeddingBagsCodegen,
        )

        tbe = SplitTableBatchedEmbeddingBagsCodegen([(rows, dim, EmbeddingLocation.HOST, ComputeDevice.CPU)],
                                                    optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=LR,
                                                    eps=EPS, pooling_mode=PoolingMode.SUM)

        def tbe_step(ids: np.ndarray, upcoming: np.ndarray | None = None) -> None:
            (tbe(torch.from_numpy(ids), offs) * w).sum().backward()  # the update is fused into backward

        out["fbgemm_tbe"] = tbe_step
    except Exception as exc:  # absent, or built for another torch
        why.append(f"fbgemm TBE: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    try:
        from torchrec import EmbeddingBagConfig, KeyedJaggedTensor
        from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection
        from torchrec.optim import RowWiseAdagrad

        # FusedEBC takes a torch optimizer class and its kwargs; RowWiseAdagrad maps to fbgemm's
        # EXACT_ROWWISE_ADAGRAD (torchrec's convert_optimizer_type_and_kwargs, lr -> learning_rate)
        fused = FusedEmbeddingBagCollection(
            tables=[EmbeddingBagConfig(name="t", embedding_dim=dim, num_embeddings=rows, feature_names=["f"])],
            optimizer_type=RowWiseAdagrad, optimizer_kwargs={"lr": LR, "eps": EPS}, device=torch.device("cpu"))

        def fused_step(ids: np.ndarray, upcoming: np.ndarray | None = None) -> None:
            kjt = KeyedJaggedTensor.from_lengths_sync(keys=["f"], values=torch.from_numpy(ids), lengths=lengths)
            (fused(kjt).values() * w).sum().backward()  # the update is fused into backward

        out["torchrec_fused"] = fused_step
    except Exception as exc:
        why.append(f"TorchRec FusedEmbeddingBagCollection: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    return out, why


def fused_matches_store(rows: int = 1000, dim: int = 16, steps: int = 3) -> float:
    """Max abs difference between FusedEBC's rows and the store's after the same ``steps``
    batches from the same rows (rows move by ~0.1): the two run the same optimizer."""
    from torchrec import EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection
    from torchrec.optim import RowWiseAdagrad

    from fbrapids.trainers.sparse import TieredEmbeddingStore

    fused = FusedEmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name="t", embedding_dim=dim, num_embeddings=rows, feature_names=["f"])],
        optimizer_type=RowWiseAdagrad, optimizer_kwargs={"lr": LR, "eps": EPS}, device=torch.device("cpu"))
    store = TieredEmbeddingStore(StoreConfig(dim=dim, lr=LR, eps=EPS, cache_rows=rows, device="cpu"))
    ids = np.arange(rows)
    store.assign(ids, np.random.default_rng(0).standard_normal((rows, dim)).astype(np.float32) * 0.1)
    weight = next(v for k, v in fused.state_dict().items() if k.endswith("weight"))
    with torch.no_grad():
        weight.copy_(torch.from_numpy(store.weights(ids)))
    rng = np.random.default_rng(1)
    bags, pooling = 64, 4
    w = _weights(bags, dim)
    for _ in range(steps):
        batch = rng.integers(0, rows, size=bags * pooling)
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=["f"], values=torch.from_numpy(batch),
                                                  lengths=torch.full((bags,), pooling))
        (fused(kjt).values() * w).sum().backward()
        lk = store.lookup(batch)
        pooled = torch.nn.functional.embedding_bag(lk.inverse, lk.rows, torch.arange(0, bags * pooling, pooling),
                                                   mode="sum")
        (pooled * w).sum().backward()
        store.apply_gradients(lk)
        store.end_step()
    return float(np.abs(weight.numpy() - store.weights(ids)).max())


def timed(step: Step, batches: list[np.ndarray], sync: Callable[[], None]) -> float:
    """Ids per second over ``batches`` (each step told the next batch)."""
    sync()
    t = time.perf_counter()
    for k, ids in enumerate(batches):
        step(ids, batches[k + 1] if k + 1 < len(batches) else None)
    sync()
    return sum(len(b) for b in batches) / (time.perf_counter() - t)


def thread_counts(text: str) -> list[int]:
    """``--threads``: a comma-separated list of positive thread counts.

    Example:
        >>> thread_counts("1,2")
        [1, 2]
    """
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--threads wants counts like 1,2, got {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"--threads wants positive counts, got {text!r}")
    return out


def build_10x(cfg: StoreConfig, name: str, rows: int, ram: int, cache: int, ssd_root: Path, eviction: str,
              offsets: torch.Tensor, w: torch.Tensor) -> tuple[Step, object]:
    """The store with RAM tiers of ``ram`` rows (``cache`` of them in the cache) and every
    one of ``rows`` ids admitted and written to its SSD file; its step and its store."""
    cfg10 = cfg.with_(cache_rows=cache, host_rows=ram - cache, ssd_dir=str(ssd_root), eviction=eviction)
    step, ebc = tiered_step(cfg10, name, offsets, w)
    store = ebc.stores["f"]
    chunk = max(1, cache // 2)
    for s in range(0, rows, chunk):  # every row admitted and written: SSD holds 10x the RAM tiers
        store.lookup(np.arange(s, min(rows, s + chunk), dtype=np.int64).view(np.uint64) * SCRAMBLE,
                     requires_grad=False)
        store.end_step()
    store.flush()
    return step, store


def announcing(step: Step, store: object, batches: list[np.ndarray], window: int) -> Step:
    """``step`` over exactly ``batches`` in order, first announcing to ``store`` the batch
    ``window`` ahead (before the first: the first ``window + 1``), as the trainer does."""
    pos = 0

    def run(ids: np.ndarray, upcoming: np.ndarray | None = None) -> None:
        nonlocal pos
        if pos >= len(batches) or batches[pos] is not ids:
            raise RuntimeError("the announcing step got a batch out of its planned order")
        for j in range(0 if pos == 0 else pos + window, min(pos + window, len(batches) - 1) + 1):
            store.announce(batches[j].view(np.uint64) * SCRAMBLE, j - pos)
        step(ids, upcoming)
        pos += 1

    return run


def ram_hit_rate(before: dict, after: dict) -> tuple[float, dict[str, float]]:
    """Share of lookups (occurrences) served by the RAM tiers between two ``stats()``, and
    the shares by tier."""
    served = {k: after[f"served_{k}"] - before[f"served_{k}"] for k in ("cache", "host", "ssd")}
    looked = sum(served.values())
    return (served["cache"] + served["host"]) / looked, {k: v / looked for k, v in served.items()}


def peer_environment(threads: list[int]) -> dict[str, object]:
    """What the figures were measured with: the versions of torch and of the peers (None
    where they do not import), the thread counts measured and the interpreter's venv.

    Example:
        >>> env = peer_environment([1, 2])
        >>> env["threads_measured"], env["torch"] == torch.__version__
        ([1, 2], True)
    """
    from importlib import metadata

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return {"torch": torch.__version__, "torchrec": version("torchrec"), "fbgemm_gpu": version("fbgemm-gpu-cpu")
            or version("fbgemm-gpu"), "threads_measured": list(threads), "cpu_count": os.cpu_count(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "venv": Path(sys.prefix).name}


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
    ap.add_argument("--threads", type=thread_counts, default=[1],
                    help="torch intra-op thread counts, e.g. 1,2: every system is measured at each")
    ap.add_argument("--eviction", default="lfu_window", help="eviction policy of the 10x run")
    ap.add_argument("--window", type=int, default=LOOKAHEAD_BATCHES,
                    help="batches announced ahead to an eviction policy that uses them (lfu_window); default: "
                         "the trainer's (fit(lookahead=...))")
    ap.add_argument("--old-eviction", default="lfu_full",
                    help="the policy it is compared with on the same stream ('' to leave it out)")
    ap.add_argument("--set-reference", action="store_true",
                    help="record this run's peer rates as this machine's reference rates (a quiet run only)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    noise = NoiseCheck(f"embedding rows={args.rows} dim={args.dim} batch={args.batch}x{args.pooling}")
    load_start = os.getloadavg()

    size = args.batch * args.pooling
    stream = ZipfStream(args.rows, args.alpha, size, args.seed)
    offsets = torch.arange(0, size, args.pooling, dtype=torch.int64)
    w = _weights(args.batch, args.dim)
    print(f"table: {args.rows} rows x {args.dim}, batch {args.batch} bags x {args.pooling} ids, Zipf {args.alpha}, "
          f"{args.rounds} rounds x {args.batches} fresh batches at each of threads {args.threads}, torch "
          f"{torch.__version__}, cuda {'yes' if cuda else 'no'}, load average {load_start[0]:.2f}")

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
        steps["tiered_10x"], store = build_10x(cfg, "bench10x", args.rows, ram, cache, ssd_root, args.eviction,
                                               offsets, w)
        old = None
        if args.old_eviction:
            steps["tiered_10x_old"], old = build_10x(cfg, "bench10x_old", args.rows, ram, cache, ssd_root,
                                                     args.old_eviction, offsets, w)

        torch.set_num_threads(args.threads[0])
        warm = stream.draw(args.warmup, -1)
        # every round's batches, drawn up front (the same draws): the 10x stores see them in this order
        planned = [stream.draw(args.batches, r * len(args.threads) + ti)
                   for r in range(args.rounds) for ti in range(len(args.threads))]
        for name, st in (("tiered_10x", store), ("tiered_10x_old", old)):
            if st is not None and st.uses_window:
                steps[name] = announcing(steps[name], st, warm + [b for bs in planned for b in bs], args.window)
        for fn in steps.values():
            for k, ids in enumerate(warm):
                fn(ids, warm[k + 1] if k + 1 < len(warm) else None)
        before = store.stats()
        before_old = old.stats() if old is not None else None
        before_cuda = ebc_cuda.stores["f"].stats() if cuda else None
        best = {n: dict.fromkeys(steps, 0.0) for n in args.threads}
        drawn: list[np.ndarray] = []
        for r in range(args.rounds):  # thread counts alternate within a round too, so all see the same load
            for ti, n_threads in enumerate(args.threads):
                torch.set_num_threads(n_threads)
                batches = planned[r * len(args.threads) + ti]
                drawn += batches
                order = list(steps)
                if r % 2 and "tiered_10x_old" in steps:  # the two 10x stores take turns going first
                    a, b = order.index("tiered_10x"), order.index("tiered_10x_old")
                    order[a], order[b] = order[b], order[a]
                for name in order:
                    best[n_threads][name] = max(best[n_threads][name], timed(steps[name], batches, sync))
        by_threads = {str(n): {f"{k}_ops_per_s": v for k, v in b.items()} for n, b in best.items()}
        after = store.stats()
        if cuda:  # distinct ids the device map found vs those looked up in the host directory
            after_cuda = ebc_cuda.stores["f"].stats()
            for key in ("device_map_hits", "host_directory_lookups"):
                res[f"tiered_cuda_{key}"] = after_cuda[key] - before_cuda[key]
        first = by_threads[str(args.threads[0])]
        for name in ("tiered_in_ram", "torch_embeddingbag", "torchrec_fused", "fbgemm_tbe", "cuda_embeddingbag",
                     "tiered_cuda", "tiered_10x", "tiered_10x_old"):
            res[f"{name}_ops_per_s"] = first.get(f"{name}_ops_per_s")
        res["threads"] = args.threads
        res["by_threads"] = by_threads
        res["upper_tier_hit_rate_10x"], res["hit_rate_10x_by_tier"] = ram_hit_rate(before, after)
        res["eviction_10x"] = args.eviction
        res["announced_window_10x"] = args.window if store.uses_window else 0
        n_meas = len(drawn)
        res["ssd_rows_read_per_batch"] = (after["ssd"]["hits"] - before["ssd"]["hits"]) / n_meas
        if old is not None:
            after_old = old.stats()
            res["old_eviction_10x"] = args.old_eviction
            res["old_upper_tier_hit_rate_10x"], _ = ram_hit_rate(before_old, after_old)
            res["old_ssd_rows_read_per_batch"] = (after_old["ssd"]["hits"] - before_old["ssd"]["hits"]) / n_meas
        res["best_possible_hit_rate_10x"] = belady_hit_rate(warm, drawn, ram)
        res["best_possible_is"] = "Belady (offline optimum, every batch's rows held)"
        res["static_oracle_hit_rate_10x"] = best_hit_rate(drawn, args.rows, ram)
        likeliest = np.zeros(args.rows, dtype=bool)
        likeliest[stream.perm[:ram]] = True  # the ram most probable ids of the distribution drawn from
        res["known_distribution_hit_rate_10x"] = float(np.mean(likeliest[np.concatenate(drawn)]))
        res["hit_rate_vs_best_10x"] = res["upper_tier_hit_rate_10x"] / res["best_possible_hit_rate_10x"]
        if old is not None:
            res["old_hit_rate_vs_best_10x"] = res["old_upper_tier_hit_rate_10x"] / res["best_possible_hit_rate_10x"]
        res["ssd_file_rows"] = after["rows"]
        res["ram_tier_rows"] = ram
        res["cache_rows_10x"], res["host_rows_10x"] = cache, ram - cache
        res["ssd_bytes_read_per_batch"] = (after["ssd"]["bytes_out"] - before["ssd"]["bytes_out"]) / n_meas
        res["ssd_bytes_written_per_batch"] = (after["ssd"]["bytes_in"] - before["ssd"]["bytes_in"]) / n_meas
        res["not_measured"] = why
        if "torchrec_fused" in steps:
            res["fused_vs_store_max_abs_diff"] = fused_matches_store()
        for n_threads, figs in by_threads.items():  # the ratios a user will see, per thread count
            t_in = figs["tiered_in_ram_ops_per_s"]
            for peer in ("torchrec_fused", "fbgemm_tbe"):
                if figs.get(f"{peer}_ops_per_s"):
                    figs[f"store_over_{peer}"] = t_in / figs[f"{peer}_ops_per_s"]
            if figs.get("tiered_10x_ops_per_s"):
                figs["ssd_10x_over_in_ram"] = figs["tiered_10x_ops_per_s"] / t_in
        res["load_average"] = {"start": list(load_start), "end": list(os.getloadavg())}
        # the peers' absolute rates beside the ratios, the fixed loop at both ends, and the verdict
        peers = {f"{peer}@{n}": figs[f"{peer}_ops_per_s"] for n, figs in by_threads.items()
                 for peer in ("torchrec_fused", "fbgemm_tbe", "torch_embeddingbag") if figs.get(f"{peer}_ops_per_s")}
        res.update({k: v for k, v in noise.finish(peers, args.set_reference).items() if k != "load_average"})
        res["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
        res["torch"] = torch.__version__
        res["environment"] = peer_environment(args.threads)
    finally:
        if not args.ssd_dir:
            shutil.rmtree(ssd_root, ignore_errors=True)

    label = {"tiered_in_ram": "tiered store, in RAM", "torch_embeddingbag": "nn.EmbeddingBag + row-wise Adagrad",
             "torchrec_fused": "TorchRec FusedEBC (CPU)", "fbgemm_tbe": "fbgemm TBE (CPU)",
             "cuda_embeddingbag": "nn.EmbeddingBag on cuda", "tiered_cuda": "tiered store, cache on cuda",
             "tiered_10x": f"tiered, SSD = 10x RAM ({args.eviction})",
             "tiered_10x_old": f"tiered, SSD = 10x RAM ({args.old_eviction})"}
    for n_threads, figs in by_threads.items():
        t_in = figs["tiered_in_ram_ops_per_s"]
        print(f"-- {n_threads} thread(s)")
        for name, text in label.items():
            v = figs.get(f"{name}_ops_per_s")
            if v:
                print(f"{text:36s}: {v:12.0f} lookups+updates/s   tiered in RAM / this = {t_in / v:.2f}x")
    hr = res["hit_rate_10x_by_tier"]
    print(f"10x lookups served by: cache {hr['cache']:.3f}, host {hr['host']:.3f}, ssd {hr['ssd']:.3f}")
    opt = res["best_possible_hit_rate_10x"]
    if old is not None:
        print(f"RAM-tier hit rate, {args.old_eviction} (old): {res['old_upper_tier_hit_rate_10x']:.4f} "
              f"({res['old_hit_rate_vs_best_10x']:.3f} of the best possible)")
    told = f", told {args.window} batches ahead" if res["announced_window_10x"] else ""
    print(f"RAM-tier hit rate, {args.eviction}{told}: {res['upper_tier_hit_rate_10x']:.4f} "
          f"({res['hit_rate_vs_best_10x']:.3f} of the best possible)")
    print(f"rows read from the SSD file per batch: {args.eviction} {res['ssd_rows_read_per_batch']:.0f}"
          + (f", {args.old_eviction} {res['old_ssd_rows_read_per_batch']:.0f}" if old is not None else ""))
    print(f"best possible (Belady) for {ram} rows on the stream drawn: {opt:.4f}; the stream's {ram} most frequent "
          f"ids (static oracle) take {res['static_oracle_hit_rate_10x']:.4f} of its lookups, its {ram} most "
          f"probable ids {res['known_distribution_hit_rate_10x']:.4f}")
    if "tiered_cuda_device_map_hits" in res:
        print(f"cache on cuda, distinct ids: {res['tiered_cuda_device_map_hits']} found by the device map, "
              f"{res['tiered_cuda_host_directory_lookups']} looked up in the host directory")
    if "fused_vs_store_max_abs_diff" in res:
        print(f"same optimizer: FusedEBC's rows and the store's after 3 batches from the same rows differ by at most "
              f"{res['fused_vs_store_max_abs_diff']:.2g}")
    for n_threads, figs in by_threads.items():
        ratios = ", ".join(f"{label} {figs[key]:.2f}" for key, label in (
            ("store_over_torchrec_fused", "store / FusedEBC"), ("store_over_fbgemm_tbe", "store / TBE"),
            ("ssd_10x_over_in_ram", "SSD 10x / in RAM")) if figs.get(key))
        print(f"{n_threads} thread(s): {ratios}")
    print("environment: " + ", ".join(f"{k} {v}" for k, v in res["environment"].items()))
    print(f"load average at the end: {res['load_average']['end'][0]:.2f}; machine speed {res['machine_speed']['start']:.0f} "
          f"-> {res['machine_speed']['end']:.0f} loops/s (reference {res['machine_speed']['reference']})")
    print(f"verdict: {res['verdict']}" + (f" ({'; '.join(res['noisy_because'])})" if res["noisy_because"] else ""))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
