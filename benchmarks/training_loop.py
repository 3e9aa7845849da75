"""``fit`` against TorchRec on the demo's own batches: the same DLRM, the same start, the
same optimizers, one torch thread, the systems alternated round by round in one run.

The batches are the ones ``fbrapids demo --rows R --seed S`` trains on: the same plan,
stream, shuffle and seed (:func:`fbrapids.app.pipeline.demo_passes` over the demo's plan,
made once: the ``extract`` arm times its passes), read once into memory before any system
is timed, so every system trains on the same rows in the same order and extraction is out
of the timing.  Systems:

* ``fit``: :func:`fbrapids.trainers.fit` on the demo's DLRM with the demo's store (its tiers
  as the pipeline chooses them, :func:`fbrapids.app.pipeline.store_config`: one RAM tier
  where every table fits in memory), no calibration hold-back (every batch trained on, as
  the peers train).
* ``torchrec_fused``: the same DLRM (its MLPs and bias vector copied from ``fit``'s freshly
  built model) over TorchRec's ``FusedEmbeddingBagCollection`` (fbgemm's TBE, the update
  ``EXACT_ROWWISE_ADAGRAD`` fused into backward, mean pooling), one table per feature; its
  rows start at the store's initial rows of the same ids (``init_rows(id, seed)``).  TorchRec
  tables are indexed by row, not by raw id: the ids are remapped to rows before timing
  (``torchrec_remap_s``, shown beside its rate, and a rate with it added back).
* ``embeddingbag``: the same DLRM over one ``nn.EmbeddingBag(sparse=True)`` per feature with
  row-wise Adagrad written with torch's sparse ops (the plain-PyTorch peer).
* ``demo``: ``fbrapids demo --rows R --seed S`` itself, one process a round (its summary
  JSON): extraction and training together, as a user runs them, on the same rows.  Its
  samples/s is its summary's (rows streamed per second of "extract+train"), beside its
  overlap and its trainer's waits; ``cpu_cores`` is its whole process's CPU seconds over its
  wall seconds (set-up and evaluation included: how much of the machine it used; on 2 cores,
  extraction and training share them, so the demo's rate is bounded by their CPU seconds
  together, not by either alone).  ``demo_over_fit`` is its best rate over ``fit``'s: the
  share of the bare trainer's speed the whole pipeline keeps.  It trains with the demo's own
  recipe and calibration hold-back, so its AUC is the demo's, not comparable to the others'
  to the bit; it is not a peer and not judged against a reference rate.
* ``extract``: the demo's extraction alone, no trainer: the same planned frames (planned
  once, before any round), one pass of training and held-out partitions cut into the
  same shuffled batches, on dask's threads (:func:`fbrapids.app.pipeline.demo_passes`);
  its seconds and its process CPU seconds.  With ``fit``'s, they bound the demo on this
  machine's cores: extraction and training share them, so the pipeline takes at least
  ``max(fit's seconds, extraction's seconds, (fit's CPU + extraction's CPU) / cores)``, and
  ``demo_bound_over_fit`` (fit's seconds over that) is the most of ``fit``'s rate a demo can
  keep here, with no idle core and no lock contention (an upper bound: the demo's
  calibration hold-back and end-of-run save are left out).

Every system's dense optimizer is :func:`fbrapids.trainers.fit.default_optimizer` (Adam,
lr 1e-3); the sparse one is row-wise Adagrad (lr 0.05, eps 1e-8).  Samples/s is rows trained
per second of the training pass (forward, backward, both updates, the per-batch input
building each system needs); the AUC is on the held-out day's batches.  The best round of
each system counts; every round's figures are in the JSON, with where its seconds went
(:class:`ThreadTimes`): the main thread's CPU seconds, its waits (wall clock less them) and
the other threads' CPU seconds.  Two systems whose main threads do about the same work
differ by their waits.

Honest figures: the load average is printed at the start and end, a machine-speed reference
(a fixed loop, :func:`benchmarks.machine.speed_reference`) is measured at the start and end,
the peers' absolute rates are recorded beside the ratios, and the run is judged by
:func:`benchmarks.machine.noise_verdict`: one marked ``noisy`` is not written into the README
(``scripts/docs_figures.py`` refuses it).

Usage (TorchRec loads from ``.venv-bench``, made by ``scripts/bench_venv.sh``):

    .venv-bench/bin/python benchmarks/training_loop.py --rows 200000 --rounds 3
    .venv-bench/bin/python benchmarks/training_loop.py --rows 1000000 --rounds 2 --out benchmarks/results/training_loop_1m.json

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

_OMP_POLICY_GIVEN = "OMP_WAIT_POLICY" in os.environ  # (the demo arm runs with the user's environment)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as benchmarks/embedding.py: no spinning OpenMP threads

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import NoiseCheck, machine_description, write_result  # noqa: E402
from fbrapids.runs.data_cache import default_data_dir  # noqa: E402
from fbrapids.runs.disk_budget import table_bounds  # noqa: E402
from fbrapids.trainers.batch import Batch  # noqa: E402

LR, EPS = 0.05, 1e-8
DIM = 16


def demo_model(inputs: Any, seed: int, ssd: str, bounds: dict[str, Any] | None = None) -> Any:
    """The demo's DLRM on the demo's store, as ``run_pipeline`` builds it (its tiers chosen
    from the tables' ``bounds``: :func:`fbrapids.app.pipeline.store_config`)."""
    from fbrapids.app.pipeline import build_model, store_config
    from fbrapids.workloads import RunConfig

    torch.manual_seed(seed)
    store, _ = store_config(RunConfig(seed=seed), ssd, bounds or {})
    return build_model("dlrm", len(inputs.dense), inputs.sparse, store, DIM)


class RemappedDLRM(torch.nn.Module):
    """``net``'s dense layers (copied) over row-indexed tables: ``bags(batch)`` pools every
    feature ``[B, n_features, dim]`` from the remapped ids."""

    def __init__(self, net: Any, bags: torch.nn.Module, pool: Callable[[Any], torch.Tensor]) -> None:
        super().__init__()
        self.bot_l, self.top_l = copy.deepcopy(net.bot_l), copy.deepcopy(net.top_l)
        self.bias_vector = copy.deepcopy(net.bias_vector)
        self.interaction = copy.deepcopy(net.interaction)
        self.bags, self.pool = bags, pool

    def forward(self, dense: torch.Tensor, sparse: Any) -> torch.Tensor:
        x = self.bot_l(dense)
        return self.top_l[:-1](self.interaction(x, self.pool(sparse), self.bias_vector)).squeeze(1)  # as DLRM.forward


class Remap:
    """Raw ids -> table rows per feature (``np.unique`` over every batch), and each table's
    initial rows: the store's ``init_rows`` of the row's id, so both systems start equal."""

    def __init__(self, features: list[str], batches: list[Batch], seed: int) -> None:
        from fbrapids.trainers.sparse.init import init_rows

        t = time.perf_counter()
        self.ids = {f: np.unique(np.concatenate([b.sparse[f][0].numpy() for b in batches])) for f in features}
        self.init = {f: init_rows(ids.view(np.uint64), DIM, seed, DIM ** -0.5) for f, ids in self.ids.items()}
        self.features = features
        self.seconds = time.perf_counter() - t  # (the initial rows' share is small: one pass over the ids)

    def rows(self, batch: Batch) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """The batch's bags with ids replaced by rows: feature -> (rows, lengths)."""
        out = {}
        for f in self.features:
            v, o = batch.sparse[f]
            r = np.searchsorted(self.ids[f], v.numpy())
            lengths = torch.diff(o, append=o.new_tensor([len(v)]))
            out[f] = (torch.from_numpy(r), lengths)
        return out


def torchrec_system(net: Any, remap: Remap) -> tuple[torch.nn.Module, Callable[[Any], Any]]:
    """The DLRM over TorchRec's FusedEBC (raises ImportError where TorchRec does not load)."""
    from torchrec import EmbeddingBagConfig, KeyedJaggedTensor, PoolingType
    from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection
    from torchrec.optim import RowWiseAdagrad

    feats = remap.features
    ebc = FusedEmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name=f, embedding_dim=DIM, num_embeddings=len(remap.ids[f]), feature_names=[f],
                                   pooling=PoolingType.MEAN) for f in feats],
        optimizer_type=RowWiseAdagrad, optimizer_kwargs={"lr": LR, "eps": EPS}, device=torch.device("cpu"))
    state = ebc.state_dict()
    with torch.no_grad():
        for f in feats:
            key = next(k for k in state if k.endswith(f".{f}.weight"))
            state[key].copy_(torch.from_numpy(remap.init[f]))

    def pool(kjt: Any) -> torch.Tensor:
        kt = ebc(kjt)
        return kt.values().view(-1, len(feats), DIM)

    def inputs(rows: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> Any:
        return KeyedJaggedTensor.from_lengths_sync(keys=feats, values=torch.cat([rows[f][0] for f in feats]),
                                                   lengths=torch.cat([rows[f][1] for f in feats]))

    return RemappedDLRM(net, ebc, pool), inputs


class _Bags(torch.nn.Module):
    def __init__(self, remap: Remap) -> None:
        super().__init__()
        self.tables = torch.nn.ModuleDict()
        for f in remap.features:
            emb = torch.nn.EmbeddingBag(len(remap.ids[f]), DIM, mode="mean", sparse=True)
            with torch.no_grad():
                emb.weight.copy_(torch.from_numpy(remap.init[f]))
            self.tables[f] = emb
        self.acc = {f: torch.zeros(len(remap.ids[f])) for f in remap.features}

    @torch.no_grad()
    def step(self) -> None:
        """Row-wise Adagrad on each table's touched rows (torch's sparse ops)."""
        for f, emb in self.tables.items():
            g = emb.weight.grad.coalesce()
            idx, val = g.indices()[0], g.values()
            a = self.acc[f].index_select(0, idx) + (val * val).mean(dim=1)
            self.acc[f].index_copy_(0, idx, a)
            emb.weight.index_add_(0, idx, val * (-LR) / (a.sqrt() + EPS).unsqueeze(1))
            emb.weight.grad = None


def embeddingbag_system(net: Any, remap: Remap) -> tuple[torch.nn.Module, Callable[[Any], Any]]:
    """The DLRM over one ``nn.EmbeddingBag(sparse=True)`` per feature, row-wise Adagrad by hand."""
    bags = _Bags(remap)

    def pool(rows: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        return torch.stack([bags.tables[f](rows[f][0], torch.cumsum(rows[f][1], 0) - rows[f][1])
                            for f in remap.features], dim=1)

    return RemappedDLRM(net, bags, pool), lambda rows: rows


class ThreadTimes:
    """A training pass's wall-clock seconds and where they went: the CPU seconds of the
    calling (main) thread, those of every other thread of the process (``fit``'s prefetch
    thread: the next batches' prepares, the sparse updates), and the main thread's waits,
    the wall clock it spent not running (waiting for another thread's work or for Python's
    lock, or off the CPU).  A system whose main thread does the same work as another's but
    waits longer is slower for the waits, not the work.

    Example:
        >>> with ThreadTimes() as t:
        ...     _ = sum(range(10_000))
        >>> sorted(t.figures()), t.figures()["main_thread_wait_s"] >= 0.0
        (['main_thread_cpu_s', 'main_thread_wait_s', 'other_threads_cpu_s', 'seconds'], True)
    """

    def __enter__(self) -> ThreadTimes:
        self._wall, self._main, self._process = time.perf_counter(), time.thread_time(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._wall
        self.main = time.thread_time() - self._main
        self.others = max(0.0, time.process_time() - self._process - self.main)

    def figures(self) -> dict[str, float]:
        return {"seconds": self.seconds, "main_thread_cpu_s": self.main, "other_threads_cpu_s": self.others,
                "main_thread_wait_s": max(0.0, self.seconds - self.main)}


def train_peer(model: torch.nn.Module, inputs: Callable[[Any], Any],
               batches: list[tuple[Batch, Any]]) -> dict[str, float]:
    """One pass of the peer over the (batch, remapped rows) pairs; returns its seconds and
    where they went (:meth:`ThreadTimes.figures`)."""
    from fbrapids.trainers.fit import default_optimizer

    dense_params = [p for n, p in model.named_parameters() if not n.startswith("bags.")]
    opt = default_optimizer(dense_params)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    sparse_step = getattr(model.bags, "step", None)
    model.train()
    with ThreadTimes() as times:
        for b, rows in batches:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(b.dense, inputs(rows)), b.label)
            loss.backward()  # FusedEBC: the sparse update runs here
            opt.step()
            if sparse_step is not None:
                sparse_step()
    return times.figures()


@torch.no_grad()
def peer_auc(model: torch.nn.Module, inputs: Callable[[Any], Any], batches: list[tuple[Batch, Any]]) -> dict[str, float]:
    from fbrapids.trainers.metrics import all_metrics

    model.eval()
    preds = [torch.sigmoid(model(b.dense, inputs(rows))).double().numpy() for b, rows in batches]
    model.train()
    label = np.concatenate([b.label.numpy() for b, _ in batches])
    group = np.concatenate([b.group.numpy() for b, _ in batches]) if batches[0][0].group is not None else None
    return all_metrics(label, np.concatenate(preds), group)


def run_fit(inputs: Any, train: list[Batch], test: list[Batch], seed: int, bounds: dict[str, Any]) -> dict[str, Any]:
    from fbrapids.trainers.fit import evaluate, fit

    with tempfile.TemporaryDirectory(prefix="fbrapids-bench-fit-") as ssd:
        net = demo_model(inputs, seed, ssd, bounds)
        with ThreadTimes() as times:
            fit(net, train, progress=False, calibrate=False)
        metrics = evaluate(net, test, progress=False)
        del net
    return {**times.figures(), "auc": metrics["auc"], "calibration": metrics["calibration"]}


def run_peer(name: str, inputs: Any, remap: Remap, train: list[tuple[Batch, Any]], test: list[tuple[Batch, Any]],
             seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fbrapids-bench-peer-") as ssd:
        net = demo_model(inputs, seed, ssd)  # its dense layers' start, copied
        build = torchrec_system if name == "torchrec_fused" else embeddingbag_system
        model, kjt = build(net, remap)
        del net
    times = train_peer(model, kjt, train)
    metrics = peer_auc(model, kjt, test)
    return {**times, "auc": metrics["auc"], "calibration": metrics["calibration"]}


def run_demo(rows: int, seed: int) -> dict[str, Any]:
    """One ``fbrapids demo --rows rows --seed seed`` in its own process
    (:func:`benchmarks.shuffle_buffer.run_demo`, with the user's OpenMP setting, not this
    benchmark's): its summary's rate, pipelining and held-out figures, and the process's CPU
    over its wall time."""
    from benchmarks.shuffle_buffer import run_demo as demo_summary

    repo = Path(__file__).resolve().parents[1]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    got = demo_summary(repo, rows, seed, unset=() if _OMP_POLICY_GIVEN else ("OMP_WAIT_POLICY",))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {**got, "process_cpu_s": cpu, "cpu_cores": cpu / got["wall_s"]}


class Extraction:
    """The demo's extraction: its data (generated once, cached) and its frames planned once;
    :meth:`batches` one pass of the demo's training and held-out batches, :meth:`run` the
    same pass timed (:class:`ThreadTimes`: the ``extract`` arm)."""

    def __init__(self, rows: int, seed: int, batch_size: int) -> None:
        from fbrapids.app.pipeline import demo_plan

        self.w, self.inputs, self.frames = demo_plan(rows, seed, batch_size)  # (the same plan as training_batches)
        self.batch_size, self.seed = batch_size, seed

    def batches(self) -> tuple[list[Batch], list[Batch]]:
        """The demo's training and held-out batches, in memory."""
        from fbrapids.app.pipeline import demo_passes

        return demo_passes(self.w, self.inputs, self.frames, self.batch_size, self.seed)

    def run(self) -> dict[str, float]:
        with ThreadTimes() as times:
            train, _ = self.batches()
        got = times.figures()
        return {**got, "cpu_s": got["main_thread_cpu_s"] + got["other_threads_cpu_s"],
                "samples_per_s": sum(len(b) for b in train) / got["seconds"]}


def pipeline_bound(fit: dict[str, float], extract: dict[str, float], cores: int) -> dict[str, float]:
    """The fewest seconds a pipeline of ``fit``'s training and ``extract``'s extraction
    can take on ``cores`` cores (each at least its own seconds, both together at least
    their CPU seconds over the cores), and ``fit``'s seconds over it.

    Example:
        >>> b = pipeline_bound({"seconds": 1.0, "main_thread_cpu_s": 1.0, "other_threads_cpu_s": 0.5},
        ...                    {"seconds": 1.0, "cpu_s": 1.5}, cores=2)
        >>> b["bound_s"], b["bound_over_fit"]
        (1.5, 0.6666666666666666)
    """
    fit_cpu = fit["main_thread_cpu_s"] + fit["other_threads_cpu_s"]
    bound = max(fit["seconds"], extract["seconds"], (fit_cpu + extract["cpu_s"]) / cores)
    return {"bound_s": bound, "bound_over_fit": fit["seconds"] / bound, "fit_cpu_s": fit_cpu,
            "extract_cpu_s": extract["cpu_s"], "cores": cores}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000, help="the demo's --rows")
    ap.add_argument("--seed", type=int, default=0, help="the demo's --seed")
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3, help="rounds, systems alternating; the best round counts")
    ap.add_argument("--systems", default="fit,torchrec_fused,embeddingbag,demo,extract")
    ap.add_argument("--out", default=None, help="write the JSON here too (default: benchmarks/results/"
                                                "training_loop.json at 200,000 rows, training_loop_1m.json at 1M)")
    ap.add_argument("--set-reference", action="store_true",
                    help="record this run's peer rates as this machine's reference rates when the run is quiet")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    torch.set_num_threads(1)
    noise = NoiseCheck(f"training_loop rows={args.rows} batch={args.batch_size}")
    print(f"load average {noise.load_start:.2f} at the start; machine speed {noise.speed_start:.1f} loops/s")
    extraction = Extraction(args.rows, args.seed, args.batch_size)  # planned once: the batches and the extract arm
    train, test = extraction.batches()
    inputs = extraction.inputs
    bounds = table_bounds(default_data_dir(args.rows, args.seed), inputs.sparse, inputs.extra_features)
    n_rows = sum(len(b) for b in train)
    print(f"{len(train)} training batches ({n_rows:,} rows), {len(test)} held-out batches")
    systems = [s for s in args.systems.split(",") if s]
    remap = Remap(inputs.sparse, train + test, args.seed)
    train_r = [(b, remap.rows(b)) for b in train]
    test_r = [(b, remap.rows(b)) for b in test]
    why: dict[str, str] = {}
    rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for r in range(args.rounds):
        order = systems if r % 2 == 0 else systems[::-1]
        for name in order:
            if name in why:
                continue
            if name == "demo":
                got = run_demo(args.rows, args.seed)
                rounds[name].append(got)
                print(f"round {r}: {name:15s} {got['samples_per_s']:10,.0f} samples/s  AUC {got['auc']:.4f}  "
                      f"calibration {got['calibration']:.3f}  extract+train {got['extract_train_s']:.2f} s, overlap "
                      f"{got['overlap_s']:.2f} s, trainer waited {got['train_wait_s']:.2f} s; process "
                      f"{got['cpu_cores']:.2f} cores  (load {os.getloadavg()[0]:.2f})")
                continue
            if name == "extract":
                got = extraction.run()
                rounds[name].append(got)
                print(f"round {r}: {name:15s} {got['samples_per_s']:10,.0f} samples/s  {got['seconds']:.2f} s, "
                      f"{got['cpu_s']:.2f} s CPU  (load {os.getloadavg()[0]:.2f})")
                continue
            try:
                got = (run_fit(inputs, train, test, args.seed, bounds) if name == "fit"
                       else run_peer(name, inputs, remap, train_r, test_r, args.seed))
            except ImportError as exc:
                why[name] = f"{type(exc).__name__}: {exc}"
                print(f"not measured: {name}: {why[name]}")
                continue
            got["samples_per_s"] = n_rows / got["seconds"]
            rounds[name].append(got)
            print(f"round {r}: {name:15s} {got['samples_per_s']:10,.0f} samples/s  AUC {got['auc']:.4f}  "
                  f"calibration {got['calibration']:.3f}  main thread {got['main_thread_cpu_s']:.2f} s CPU, "
                  f"{got['main_thread_wait_s']:.2f} s waiting; other threads {got['other_threads_cpu_s']:.2f} s CPU  "
                  f"(load {os.getloadavg()[0]:.2f})")
    best = {s: max(v, key=lambda g: g["samples_per_s"]) for s, v in rounds.items() if v}
    res: dict[str, Any] = {"rows": args.rows, "seed": args.seed, "trained_rows": n_rows, "batches": len(train),
                           "torch_threads": 1, "rounds": rounds, "not_measured": why,
                           "torchrec_remap_s": remap.seconds}
    for s, g in best.items():
        res[f"{s}_samples_per_s"] = g["samples_per_s"]
        if "auc" in g:  # (the extract arm trains nothing)
            res[f"{s}_auc"] = g["auc"]
        if "main_thread_wait_s" in g:
            res[f"{s}_main_thread_wait_s"] = g["main_thread_wait_s"]  # (the best round's; every round's in rounds)
    if "demo" in best and "fit" in best:
        res["demo_over_fit"] = best["demo"]["samples_per_s"] / best["fit"]["samples_per_s"]
        res["demo_overlap_s"], res["demo_cpu_cores"] = best["demo"]["overlap_s"], best["demo"]["cpu_cores"]
    if "fit" in best and "extract" in best:
        bound = pipeline_bound(best["fit"], best["extract"], len(os.sched_getaffinity(0)))
        res["demo_bound_over_fit"], res["pipeline_bound"] = bound["bound_over_fit"], bound
    if "fit" in best:
        for peer in ("torchrec_fused", "embeddingbag"):
            if peer in best:
                res[f"fit_over_{peer}"] = best["fit"]["samples_per_s"] / best[peer]["samples_per_s"]
                res[f"auc_fit_minus_{peer}"] = best["fit"]["auc"] - best[peer]["auc"]
        if "torchrec_fused" in best:  # the peer with its id -> row remap added back
            with_remap = n_rows / (best["torchrec_fused"]["seconds"] + remap.seconds)
            res["fit_over_torchrec_fused_with_remap"] = best["fit"]["samples_per_s"] / with_remap
    peers = {f"{s}@1": g["samples_per_s"] for s, g in best.items() if s not in ("fit", "demo", "extract")}
    res.update(noise.finish(peers, set_reference=args.set_reference))
    res["machine"] = machine_description()
    for peer in ("torchrec_fused", "embeddingbag"):
        if f"fit_over_{peer}" in res:
            print(f"fit / {peer}: {res[f'fit_over_{peer}']:.2f}x samples/s, AUC difference "
                  f"{res[f'auc_fit_minus_{peer}']:+.4f}")
    if "demo_over_fit" in res:
        print(f"demo / fit: {res['demo_over_fit']:.2f}x samples/s (the demo extracting beside its trainer, "
              f"{res['demo_overlap_s']:.2f} s overlapped, its process using {res['demo_cpu_cores']:.2f} cores)")
    if "pipeline_bound" in res:
        b = res["pipeline_bound"]
        print(f"the most {b['cores']} cores allow a demo: {res['demo_bound_over_fit']:.2f}x fit's samples/s (fit "
              f"{b['fit_cpu_s']:.2f} s CPU + extraction {b['extract_cpu_s']:.2f} s CPU over {b['cores']} cores: "
              f"{b['bound_s']:.2f} s at least)")
    print(f"verdict: {res['verdict']}" + (f" ({'; '.join(res['noisy_because'])})" if res["noisy_because"] else ""))
    out = args.out or ("benchmarks/results/training_loop.json" if args.rows == 200_000
                       else f"benchmarks/results/training_loop_{args.rows // 1000}k.json".replace("1000k", "1m"))
    write_result(out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
