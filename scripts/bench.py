"""Run the benchmarks, keep each one's JSON line in ``benchmarks/results/<name>.json``, and
fill the README's benchmark table, and the docs' figures (``scripts/docs_figures.py``), from those
files (``make bench``).

The figures in the README are only ever these files' contents: each row says what it
measured, on what machine and when.  ``--only extract pipeline`` re-runs some of them;
``--table-only`` just refills the table from the files already there.

    python scripts/bench.py                 # all four, at their documented sizes (long)
    python scripts/bench.py --only extract  # one of them
    python scripts/bench.py --table-only    # README table from benchmarks/results/*.json

The speed figures judged by the noise rule (:data:`NOISE_RULED`: the store against TorchRec
and fbgemm, ``fit`` against TorchRec, the ranks against one process, a trial against one
training) are re-measured on a
quiet machine with the bench venv's python, which loads the TorchRec and fbgemm peers
(``scripts/bench_venv.sh``); a run the rule marks noisy is kept in its JSON but refused here::

    .venv-bench/bin/python scripts/bench.py --only embedding training_loop training_loop_1m distributed
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
README = REPO / "README.md"
START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"

# name -> (command line after `python`, what it compares)
BENCHMARKS: dict[str, tuple[list[str], str]] = {
    "extract": (["benchmarks/extract.py", "--rows", "300000"],
                "the public chain (read_view -> clean -> join -> extract -> join basic), eager and dask, "
                "and op by op, vs pandas and polars written for speed (distinct values hashed once) and the "
                "hash-every-row pandas reference; outputs checked equal"),
    "extract_2m": (["benchmarks/extract.py", "--rows", "2000000", "--repeat", "2", "--out",
                    "benchmarks/results/extract_2m.json"],
                   "the same at 2M rows (the best of 2 timed runs after the warm-up: one run's figure "
                   "moved by up to 20% with the page faults of fresh memory)"),
    "embedding": (["benchmarks/embedding.py", "--threads", "1,2"],
                  "tiered store (its module) vs `nn.EmbeddingBag` with the same row-wise Adagrad vs TorchRec "
                  "FusedEBC and fbgemm TBE (where they load: run under `.venv-bench`, made by "
                  "`scripts/bench_venv.sh`), at 1 and 2 threads, fresh Zipf 1.05 batches each round; RAM-tier "
                  "hit rate with the SSD 10x over RAM, old vs new eviction, against Belady's"),
    "pipeline": (["benchmarks/pipeline.py", "--rows", "200000"],
                 "pipeline vs write-then-train, same model and seed; bytes measured (/proc io) on both sides"),
    "verify": (["benchmarks/pipeline.py", "--rows", "200000", "--verify-overhead", "--repeat", "21"],
               "the pipeline with a checkpoint and its reload, integrity checks (manifests, page checksums, finite "
               "checks, work-dir lock, preflight) on vs off (`FBRAPIDS_VERIFY=0`), alternated in one run"),
    "inference": (["benchmarks/inference.py", "--http-items", "64", "--http-clients", "8", "--http-requests", "600"],
                  "scoring p50/p99 and throughput, request/item dedup on and off; the HTTP service under 1 and 8 "
                  "clients (item cache filled with the catalogue first)"),
    "inference_attack": (["benchmarks/inference.py", "--attack"],
                         "authorised 64-item calls against a real `fbrapids serve`, unloaded vs each attack running "
                         "30 s: a 15 MB unauthenticated flood, a hog of 10,000-item calls, 64 connections of such "
                         "calls, calls of request lists at their bounds, 200 stalled connections, `/score_batch` "
                         "bodies with a bad request (target: p50 within 2x, `/health` within 1 s); 600 idle sockets "
                         "over 10 addresses (target: >= 90% answered, `/health` always), three addresses x 16 "
                         "connections of 1,000-item calls (target: p50 within 3x), five addresses x 4 stalled 4 MiB "
                         "bodies (target: >= 90% answered), three addresses x 16 connections hanging up after each "
                         "call (attackers from 127.0.0.2 up, niced; unloaded re-measured before each attack)"),
    "inference_unseen": (["benchmarks/inference.py", "--unseen-ids"],
                         "embedding table rows and process RSS before and after scoring 500,000 never-seen ad ids "
                         "(serving lookups are read-only); target flat within 5%"),
    "inference_plateau": (["benchmarks/inference.py", "--rss-plateau"],
                          "the served demo DIN's RSS over 10,000 calls of 64 items from 300,000 ad ids (4 clients), "
                          "sampled every 250 calls: its growth once the item cache is full"),
    "models": (["benchmarks/models.py", "--rows", "200000", "1000000", "--seeds", "0", "1", "2"],
               "two independent peers, scikit-learn's logistic regression with C chosen on a validation day (the "
               "last training day) and LightGBM with its regularisation and rounds chosen there, both on the raw "
               "columns plus the demo's derived one, against logreg, DLRM, Wide&Deep, DeepFM, DIN and DCN-v2 on the "
               "default demo data (`fbrapids demo --rows R --model M --seed S`, one process each, the demo's tuned "
               "recipes): held-out AUC / logloss / calibration over data seeds (3 at 200,000 rows, 2 at 1M: "
               "`--add-seeds`); target every model's mean AUC and logloss at least the tuned LR's, every run's "
               "calibration in [0.97, 1.03], the best model at least the GBDT's"),
    "dicm": (["benchmarks/dicm_taobao.py"],
             "DIN vs DICM's four image aggregators on the Taobao tiny sample (100 test rows, synthetic image "
             "vectors: a smoke figure, not a result); image references vs unique images embedded"),
    "distributed": (["benchmarks/distributed_training.py", "--rows", "200000", "--worlds", "1", "2", "4"],
                    "DLRM on W = 1, 2, 4 gloo ranks (DDP + tables sharded by id) vs one process on the same global "
                    "batches: samples/s, share of step time in the sparse exchange with the next step's id exchange "
                    "overlapped and (W > 1) without, bytes per step vs (8 + 8 x dim) x "
                    "distinct ids, table rows per rank, weight / AUC / logloss differences"),
    "fitted": (["benchmarks/fitted.py", "--rows", "200000"],
               "fit (training days, one pass) + extract vs extract alone: the workload + 8 fitted and history "
               "features, public chain on dask; outputs checked equal"),
    "held_out_calibration": (["benchmarks/held_out_calibration.py", "--rows", "200000", "--seeds", "0", "1", "2", "3",
                              "4", "--predictions", "DIR"],
                             "the held-out day's calibration under the earlier progressive fit (the study that replaced "
                             "it by rows held back from training, docs/models.md): the generator's hidden model (the "
                             "oracle) per seed, and the kept runs of `benchmarks/models.py --predictions DIR` with the "
                             "shift fitted on the newest 0 / 16k / 32k / 64k / 128k progressive predictions; target "
                             "[0.95, 1.05]"),
    "training_loop": (["benchmarks/training_loop.py", "--rows", "200000", "--rounds", "3"],
                      "`fit` vs TorchRec FusedEBC vs `nn.EmbeddingBag` on the demo's own batches (200,000 rows): the "
                      "same DLRM from the same start, 1 torch thread, alternated rounds (run under `.venv-bench`); "
                      "samples/s and AUC; noise rule applied; beside them `fbrapids demo` itself on the same rows "
                      "(extraction and training sharing the machine), its samples/s over `fit`'s"),
    "training_loop_1m": (["benchmarks/training_loop.py", "--rows", "1000000", "--rounds", "2", "--out",
                          "benchmarks/results/training_loop_1m.json"],
                         "the same on the demo's batches at 1,000,000 rows"),
    "shuffle_buffer": (["benchmarks/shuffle_buffer.py", "--rows", "200000", "--seeds", "0", "1", "2"],
                       "the stream's shuffle buffer vs the window shuffle it replaced (`fbrapids demo`, seeds paired): "
                       "held-out AUC / calibration and the extraction overlapped with training"),
    "scale": (["benchmarks/scale.py", "--sizes", "1000000", "4000000", "16000000", "64000000", "4000000",
               "--data-root", "/tmp/fbrapids-scale"],
              "`fbrapids demo` at default settings at 1M, 4M, 16M and 64M rows (4M again after 64M: the load moves), "
              "its whole process tree sampled from outside: wall time, time per row against 1M and 4M, peak RSS "
              "and the stage it peaked in, the run's own estimate before any work; target at 64M a peak under "
              "8 GB and a time per row within 1.2x the 4M run's (about an hour, most of it the 64M run)"),
    "trial_calibration": (["benchmarks/trial_calibration.py"],
                          "`fbrapids.trial` (DLRM, its default seeds) on independent planted data sets: pure-noise "
                          "columns (50k rows; false positives, Clopper-Pearson 95%) and columns of known oracle AUC "
                          "gain (100k rows; power); resumable, one trial per data seed"),
    "trial_calibration_family": (["benchmarks/trial_calibration.py", "--candidates", "10", "--noise", "20",
                                  "--planted", "10", "--betas", "0.25", "--planted-rows", "200000"],
                                 "`trial(each=True)` (DLRM, 3 seeds, Holm): runs of 10 pure-noise candidates against "
                                 "one baseline (50k rows; family-wise false alarms: runs with any candidate called "
                                 "\"helps\", Clopper-Pearson 95%), and a planted candidate (oracle gain about +0.005) "
                                 "among 9 noise ones (200k rows; found, ranked first); targets at most 5% of runs with "
                                 "a false \"helps\", the planted one found in 8 of 10"),
    "trial_calibration_family_100k": (["benchmarks/trial_calibration.py", "--candidates", "10", "--noise", "20",
                                       "--planted", "10", "--betas", "0.25", "--planted-rows", "100000", "--state",
                                       "benchmarks/results/trial_calibration_family_100k.state.jsonl", "--out",
                                       "benchmarks/results/trial_calibration_family_100k.json"],
                                      "the same with the planted runs at 100k rows (the noise runs the same)"),
    "trial_calibration_sequential": (["benchmarks/trial_calibration.py", "--min-effect", "0.003", "--noise", "60",
                                      "--planted", "10", "--betas", "0.5", "0.25"],
                                     "sequential trials (`min_effect=0.003`: from 2 seeds, one more while the AUC "
                                     "interval straddles the margin, up to 6): false alarms on noise, power on "
                                     "planted columns, seeds used"),
    "trial_cost": (["benchmarks/trial_cost.py", "--rows", "200000", "--separate", "--repeat", "5"],
                   "a trial's wall time beside one plain training on the same data, alternated in one run: K = 3 "
                   "with the A/A arm (9 models; also beside `fbrapids demo`), 10 candidates each against one "
                   "baseline (33 models; also beside `fbrapids demo` on that data), and the 10 tried one at a time "
                   "(verdicts and deltas compared); targets 1.5x and 4x one training (one "
                   "`fbrapids demo`)"),
}


def _k(x: float) -> str:
    return f"{x / 1e6:.1f}M" if x >= 1e6 else f"{x / 1e3:.0f}k"


def _mb(x: float) -> str:
    return f"{x / 1e6:.1f} MB"


def _extract(r: dict) -> str:
    rate, vs = r["rows_per_s"], r.get("vs_pandas") or {}
    text = (f"{r['rows_in']:,} rows: eager {_k(rate['cpu eager'])} rows/s, dask {_k(rate['cpu dask'])}, "
            f"op-by-op {_k(rate['cpu op-by-op'])}")
    peers = [p for p in ("pandas", "polars eager", "polars lazy", "pandas rows") if p in rate]
    if peers and "vs_best" in r:  # every peer, then the ratios against the best of them
        names = {"pandas": "pandas (distinct values hashed once)", "pandas rows": "pandas hashing every row (reference)"}
        text += "; peers: " + ", ".join(f"{names.get(p, p)} {_k(rate[p])}" for p in peers)
        best = r["best"]
        text += (f"; eager {r['vs_best']['cpu eager / best peer']:.1f}x the best peer ({best['best peer']}), dask "
                 f"{r['vs_best']['cpu dask / best peer']:.1f}x")
        for label in ("best pandas", "best polars"):
            if label in best:
                text += (f"; eager {r['vs_best'][f'cpu eager / {label}']:.1f}x / dask "
                         f"{r['vs_best'][f'cpu dask / {label}']:.1f}x {best[label]}")
    elif "pandas" in rate:
        text += (f", pandas {_k(rate['pandas'])} (eager {vs['cpu eager']:.1f}x pandas, dask "
                 f"{vs['cpu dask']:.1f}x)")
    if "gpu eager" in rate:
        text += f"; GPU eager {_k(rate['gpu eager'])} ({rate['gpu eager'] / rate['cpu eager']:.1f}x all CPU cores)"
    syn = r.get("synthetic") or {}
    if "cpu fused_speedup" in syn:
        text += f"; {syn['ops']}-operator plan fused {syn['cpu fused_speedup']:.2f}x op-by-op on the CPU"
    if "gpu fused_speedup" in syn:
        text += f", {syn['gpu fused_speedup']:.1f}x on the GPU"
    load = r.get("load_average")
    if load:
        text += f"; load average {load['start'][0]:.1f} at the start, {load['end'][0]:.1f} at the end"
    return text + f"; outputs equal: {r['outputs_equal']}"


def _pipeline(r: dict) -> str:
    return (f"{r['pipeline_s']:.2f} s vs {r['write_then_train_s']:.2f} s "
            f"({r['write_then_train_s'] / r['pipeline_s']:.2f}x); written {_mb(r['pipeline_bytes_written'])} vs "
            f"{_mb(r['baseline_bytes_written'])} (feature files {_mb(r['baseline_intermediate_file_bytes'])}); "
            f"AUC {r['pipeline_auc']} vs {r['baseline_auc']}")


def _embedding(r: dict) -> str:
    labels = (("tiered_in_ram_ops_per_s", "store"), ("torch_embeddingbag_ops_per_s", "EmbeddingBag"),
              ("torchrec_fused_ops_per_s", "TorchRec FusedEBC"), ("fbgemm_tbe_ops_per_s", "fbgemm TBE"),
              ("cuda_embeddingbag_ops_per_s", "EmbeddingBag on cuda"), ("tiered_cuda_ops_per_s", "store on cuda"),
              ("tiered_10x_ops_per_s", "SSD 10x over RAM"))
    parts = []
    ratio_labels = (("store_over_torchrec_fused", "store / FusedEBC"), ("store_over_fbgemm_tbe", "store / TBE"),
                    ("ssd_10x_over_in_ram", "SSD 10x / in RAM"))
    for threads, figs in (r.get("by_threads") or {"": r}).items():
        cells = ", ".join(f"{label} {_k(figs[key])}" for key, label in labels if figs.get(key))
        ratios = ", ".join(f"{label} {figs[key]:.2f}" for key, label in ratio_labels if figs.get(key))
        cells += " ids/s" + (f" ({ratios})" if ratios else "")
        parts.append(f"{threads} thread(s): {cells}" if threads else cells)
    env = r.get("environment")
    if env:
        parts.append("measured with torch " + str(env.get("torch")) + ", torchrec " + str(env.get("torchrec"))
                     + ", fbgemm-gpu-cpu " + str(env.get("fbgemm_gpu")))
    if r.get("upper_tier_hit_rate_10x") is not None:
        text = f"{100 * r['upper_tier_hit_rate_10x']:.1f}% of lookups from the RAM tiers"
        if r.get("eviction_10x"):
            text += f" ({r['eviction_10x']}" + (f", told {r['announced_window_10x']} batches ahead"
                                                 if r.get("announced_window_10x") else "") + ")"
        if r.get("best_possible_hit_rate_10x"):
            text += (f", {r['hit_rate_vs_best_10x']:.3f} of the best possible "
                     f"{100 * r['best_possible_hit_rate_10x']:.1f}% (Belady)")
        if r.get("old_upper_tier_hit_rate_10x") is not None:
            text += (f"; {r['old_eviction_10x']}: {100 * r['old_upper_tier_hit_rate_10x']:.1f}%, "
                     f"{r['old_hit_rate_vs_best_10x']:.3f}")
        parts.append(text)
    missing = [w.split(":")[0] for w in r.get("not_measured") or []]
    if missing:
        parts.append("not loadable here: " + ", ".join(missing))
    return ", ".join(parts)


def _inference(r: dict) -> str:
    parts = []
    for n, res in (r.get("sizes") or {}).items():
        on, off = res.get("dedup_on", {}), res.get("dedup_off", {})
        if on and off:
            parts.append(f"{n} items: p50 {on['p50_ms']:.1f} ms with dedup vs {off['p50_ms']:.1f} ms without")
    http = r.get("http") or {}
    for key, res in sorted(((k, v) for k, v in http.items() if k.startswith("clients_")),
                           key=lambda kv: int(kv[0].split("_")[1])):
        parts.append(f"HTTP {http['items_per_request']} items, {key.split('_')[1]} client(s): "
                     f"{res['requests_per_s']:.1f} req/s, p50 {res['p50_ms']:.1f} ms, p99 {res['p99_ms']:.1f} ms")
    return "; ".join(parts) or json.dumps(r)[:200]


def _fitted(r: dict) -> str:
    sec = r["seconds"]
    return (f"{r['rows']:,} rows: extract {sec['extract']:.2f} s, fit+extract {sec['fit+extract']:.2f} s "
            f"= {r['ratio']:.2f}x (target <= 2x), median of {r['repeat']}")


def _held_out_calibration(r: dict) -> str:
    parts = []
    for rows, held in r["held_out"].items():
        oracle = ", ".join(f"{c:.3f}" for c in held["oracle_calibration"])
        slices = r.get("slices", {}).get(rows, {}).get("per_slice", {})
        kept = "; ".join(f"{int(k) // 1024}k: {v['outside']}/{v['runs']} outside, mean {v['mean']:.3f}" if int(k)
                         else f"no shift: {v['outside']}/{v['runs']} outside, mean {v['mean']:.3f}"
                         for k, v in slices.items())
        parts.append(f"{int(rows):,} rows: oracle {oracle}" + (f"; runs, shift fitted on the newest predictions: {kept}"
                                                              if kept else ""))
    return "; ".join(parts)


def _trial_calibration(r: dict) -> str:
    fp = "; ".join(f"{m.upper()} {v['called']}/{v['of']} called (CP95 {v['cp95'][0]:.2f}-{v['cp95'][1]:.2f})"
                   for m, v in r["false_positive"].items())
    power = "; ".join(f"oracle gain {p['oracle_auc_gain']:+.4f}: AUC {p['auc']}/{p['trials']}, GAUC {p['gauc']}/"
                      f"{p['trials']} helps" + (f" (vs its shuffled copy: AUC {p['auc_vs_shuffled']}, GAUC "
                                                f"{p['gauc_vs_shuffled']})" if "auc_vs_shuffled" in p else "")
                      + f", AUC bias {r['bias'][k]['mean']:+.4f}" for k, p in r["power"].items())
    sec = r["seconds_per_trial"]
    done = f"{r['trials']} of {r['planned']} planned trials" if r.get("planned", r["trials"]) > r["trials"] else \
        f"{r['trials']} trials"
    return (f"{done}, {r['seeds']} seeds per arm: noise ({r['noise_rows']:,} rows): {fp}; "
            f"planted ({r['planted_rows']:,} rows): {power}; {_aa(r)}"
            f"{sec['mean']:.0f} s per trial at load {r['load_mean']:.1f}")


def _trial_calibration_family(r: dict) -> str:
    parts = []
    for m in ("auc", "gauc"):
        n, p = r[m]["noise"], r[m].get("planted")
        text = (f"{m.upper()}: {n['any_false_helps']}/{n['runs']} runs with a false \"helps\" (CP95 {n['cp95_helps'][0]:.2f}-"
                f"{n['cp95_helps'][1]:.2f}), {n['any_false_call']} with any call (on the candidates' own p-values: "
                f"{n['own_p_holm_any_helps']} with Holm, {n['own_p_uncorrected_any_helps']} uncorrected)")
        if p:
            text += f"; planted found {p['found']}/{p['runs']}" + (f", ranked first {p['ranked_first']}/{p['runs']}"
                                                                   if p.get("ranked_first") is not None else "")
        parts.append(text)
    done = f"{r['trials']} of {r['planned']} planned runs" if r["planned"] > r["trials"] else f"{r['trials']} runs"
    return (f"{done} of {r['candidates']} candidates, {r['seeds']} seeds, {r['correction']}: " + "; ".join(parts)
            + f"; {r['seconds_per_run']:.0f} s per run ({r['models_per_run']} models)")


def _trial_calibration_sequential(r: dict) -> str:
    fp = "; ".join(f"{m.upper()} {v['called']}/{v['of']} called ({v['helps']} \"helps\", CP95 {v['cp95'][0]:.2f}-"
                   f"{v['cp95'][1]:.2f})" for m, v in r["false_positive"].items())
    power = "; ".join(f"oracle gain {p['oracle_auc_gain']:+.4f}: AUC {p['auc']}/{p['trials']}, GAUC {p['gauc']}/"
                      f"{p['trials']} helps" for p in r["power"].values())
    seeds = "; ".join(f"{k} {v['mean']:.1f} (stopped at the margin {v['stopped_at_the_margin']})"
                      for k, v in r["seeds_used"].items())
    return (f"{r['trials']} trials, margin {r['min_effect']:g}, up to {r['seeds']} seeds: noise "
            f"({r['noise_rows']:,} rows): {fp}; planted ({r['planted_rows']:,} rows): {power}; seeds used: {seeds}")


def _trial_cost(r: dict) -> str:
    k, f = r["k3_aa"], r["family"]
    n = len(k.get("repeats", [k]))  # (a run before --repeat: one, its figures at the top level)
    both = sum(s["step"] == "fbrapids demo" for s in r.get("steps", [])) == 2 * n  # one before each trial, one after
    how = ", mean of one before and one after," if both else ""

    def spread(d: dict, key: str) -> str:  # each ratio's range over the repeats
        lo, hi = d.get(f"{key}_range", (d[key], d[key]))
        return f" (range {lo:.2f}-{hi:.2f})" if n > 1 else ""

    text = (f"{r['rows']:,} rows" + (f", each figure the median of {n} alternated runs" if n > 1 else "") + ": "
            f"K = 3 with A/A {k['seconds']:.0f} s vs one training {k['plain_s']:.0f} s: "
            f"{k['ratio']:.2f}x{spread(k, 'ratio')}" + (f" (`fbrapids demo`{how} {k['demo_s']:.0f} s: "
                                                       f"{k['ratio_to_demo']:.2f}x{spread(k, 'ratio_to_demo')})"
                                                       if "demo_s" in k else "")
            + f", {k['cost']['models']} models in {k['cost']['passes']} pass(es); 10 candidates each, K = 3: "
            f"{f['seconds']:.0f} s vs {f['plain_s']:.0f} s: {f['ratio']:.2f}x{spread(f, 'ratio')}"
            + (f" (`fbrapids demo` on that data{how} {f['demo_s']:.0f} s: {f['ratio_to_demo']:.2f}x"
               f"{spread(f, 'ratio_to_demo')})" if "demo_s" in f else "")
            + f" ({f['cost']['models']} models, {f['cost']['passes']} passes"
            + (f", the rows extracted in {f['cost']['passes_extracted']}" if "passes_extracted" in f["cost"] else "")
            + ")")
    sep = r.get("separate")
    if sep:
        text += (f"; tried one at a time ({sep['seconds']:.0f} s): verdicts equal {sep['verdicts_equal']}/{sep['of']} "
                 f"(the family's corrected for 10; its uncorrected ones {sep['own_verdicts_equal']}/{sep['of']}), deltas "
                 f"inside each other's interval {sep['deltas_inside_each_others_interval']}/{sep['of']}")
    return text


def _aa(r: dict) -> str:
    """The calibration's A/A check (trials with A/A arms), or nothing where none had them:
    per data size the largest |A/A delta| and the A/A deltas' mean over trials (an input
    that tells nothing costs that much), and the noise trials' z-scores' SD (about 1 where
    the interval is calibrated)."""
    aa = r.get("aa", {}).get("auc")
    if not aa:
        return ""
    parts = []
    for n, a in (aa.get("by_rows") or {str(aa["rows"][0]): aa}).items():
        parts.append(f"{a['trials']} trials at {int(n):,} rows: max |AUC delta| {a['max_abs_delta']:.4f} seed-averaged, "
                     f"{a['max_abs_seed_delta']:.4f} per seed (A/A spread), {a['called']} called"
                     + (f", mean {a['mean_delta']:+.4f} ± {a['se_mean']:.4f}" if a.get("se_mean") is not None else ""))
    z = r.get("noise_z", {})
    zs = ", ".join(f"{m.upper()} {v['z_sd']:.2f}" for m, v in z.items() if v.get("z_sd") is not None)
    return (f"A/A (candidate shuffled; {'; '.join(parts)}); noise trials' delta/se SD (1 if calibrated): {zs}; "
            if zs else f"A/A (candidate shuffled; {'; '.join(parts)}); ")


def _verify(r: dict) -> str:
    return (f"{r['rows']:,} rows: {r['verify_on_s']:.2f} s on vs {r['verify_off_s']:.2f} s off (medians of "
            f"{len(r['runs_on'])} rounds); overhead {r['overhead_pct']:+.1f}% (median of the rounds' ratios; "
            f"{r['overhead_of_medians_pct']:+.1f}% between the medians, {r['cpu_overhead_pct']:+.1f}% CPU; "
            f"target < 3%); the checkpoint save + load alone: {r['checkpoint_overhead_pct_of_run']:+.2f}% of a run; "
            f"AUC {r['auc_on']:.5f} both" if r["auc_on"] == r["auc_off"] else
            f"AUC differs: {r['auc_on']} vs {r['auc_off']}")


_MODEL_NAMES = {"lr": "sklearn LR (tuned C)", "gbdt": "LightGBM", "logreg": "logreg", "dlrm": "DLRM",
                "wide_deep": "Wide&Deep", "deepfm": "DeepFM", "din": "DIN", "dcn": "DCN-v2"}


def _models(r: dict) -> str:
    if "seeds" not in r:  # the first, single-seed table
        parts = []
        for rows, res in r["rows"].items():
            cells = ", ".join(f"{_MODEL_NAMES.get(m, m)} {x['auc']:.4f} / {x['ne']:.4f} / {x['logloss']:.4f}"
                              for m, x in res.items())
            parts.append(f"{int(rows):,} rows (AUC / NE / logloss): {cells}")
        return ("; ".join(parts) + " (the first, single-seed run, before the sklearn reference and the "
                "tuned recipe; not re-measured yet)")
    parts = []
    for rows, res in r["rows"].items():
        checks = r["checks"].get(rows, {})
        cells = ", ".join(f"{_MODEL_NAMES.get(m, m)} {x['mean']['auc']:.4f} ± {x['sd']['auc']:.4f} / "
                          f"{x['mean']['logloss']:.4f} / {x['mean']['calibration']:.3f}"
                          + ("" if m not in checks else (" ✓" if checks[m] else " ✗")) for m, x in res.items())
        seeds = r.get("seeds_by_rows", {}).get(rows, r["seeds"])
        g = (r.get("vs_gbdt") or {}).get(rows)
        gap = f"; best model {_MODEL_NAMES.get(g['best'], g['best'])} {g['gap']:+.4f} AUC against LightGBM" if g else ""
        parts.append(f"{int(rows):,} rows, {len(seeds)} seeds (AUC ± SD / logloss / calibration; ✓ = at least "
                     f"the tuned LR's AUC and logloss, every run's calibration in [0.97, 1.03]): {cells}{gap}")
    return "; ".join(parts)


def _distributed(r: dict) -> str:
    one = r["one_process"]
    parts = [f"one process {_k(one['samples_per_s'])} samples/s, AUC {one['auc']:.4f}"]
    for w, x in r["worlds"].items():
        off = x.get("no_overlap")
        share = (f"{100 * x['comm_share']:.0f}% of the step in the exchange" if off is None else
                 f"{100 * x['comm_share']:.0f}% of the step in the exchange with the next step's ids exchanged during "
                 f"this one ({100 * off['comm_share']:.0f}% without: {_k(off['samples_per_s'])} samples/s)")
        speed = f" ({x['vs_one_process']:.2f}x one process)" if "vs_one_process" in x else ""
        parts.append(f"W={w}: {_k(x['samples_per_s'])} samples/s{speed}, {share}, {_mb(x['bytes_per_step'])}/step = "
                     f"{x['bytes_vs_ideal']:.3f}x (8 + 8 dim) x distinct ids, rows per rank max/mean "
                     f"{x['rows_max_over_mean']:.3f}, vs one process: dense "
                     f"{x['dense_rel_diff']:.1e}, tables {x['tables_rel_diff']:.1e}, dAUC {x['abs_delta_auc']:.1e}, "
                     f"dlogloss {x['abs_delta_logloss']:.1e}")
    return "; ".join(parts)


def _inference_attack(r: dict) -> str:
    phases = r.get("phases", ["flood", "hog", "stalled"])
    old = [k for k in phases if k not in HOLDING_ATTACKS]
    ratios = ", ".join(f"{k} {r[k]['ratio_to_unloaded']:.2f} ({r[k]['p50_ms']:.1f} ms vs "
                       f"{r[k]['unloaded_before']['p50_ms']:.1f} ms)" for k in old)
    health = (f"; /health within 1 s during and after each: {'yes' if r['health_within_1s'] else 'no'}"
              if "health_within_1s" in r else "")
    out = f"p50 ratio to unloaded: {ratios}; all within 2x: {'yes' if r['within_2x'] else 'no'}{health}" if old else ""
    new = [k for k in phases if k in HOLDING_ATTACKS]
    if new:
        out += ("; " if out else "") + "; ".join(_holding_attack(k, r[k]) for k in new)
        met = holding_targets_met(r, new)
        out += f"; the holding attacks' targets met: {', '.join(k for k in met if met[k]) or 'none'}"
        if not all(met.values()):
            out += f" (not met: {', '.join(k for k in met if not met[k])})"
    return out


#: the attacks that hold the server's connections, work or bytes, with what each reports
HOLDING_ATTACKS = ("idle", "addresses", "stalled_bodies", "hangup")


def holding_targets_met(r: dict, phases: list[str]) -> dict[str, bool]:
    """Each holding attack's target met or not, judged from its figures by the benchmark's own
    targets (:data:`benchmarks.serving_attack.HOLDING_TARGETS`)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from benchmarks.serving_attack import holding_targets_met as met

    return met(r, phases)


def _holding_attack(kind: str, x: dict) -> str:
    """One holding attack's figures: calls answered, p50 against unloaded, the load."""
    text = (f"{kind}: {x['answered']}/{x['requests']} answered, p50 {x['p50_ms']:.1f} ms vs "
            f"{x['unloaded_before']['p50_ms']:.1f} ms ({x['ratio_to_unloaded']:.2f}x)")
    if kind == "idle":
        text += f", /health {x['health_answered_during']}/{x['health_asked_during']}"
    if kind == "hangup":
        text += (f", right after {x['after']['answered']}/{x['after']['requests']} answered, p50 "
                 f"{x['after']['p50_ms']:.1f} ms")
    return text + f", load {x['load_avg_1m']:.1f}"


def _inference_plateau(r: dict) -> str:
    lo, hi = r["rss_last_half_mib"]
    return (f"{r['calls']:,} calls: RSS {r['rss_at_cache_full_mib']:.0f} MiB once the item cache is full (after "
            f"{r['cache_full_at_calls']:,} calls), {lo:.0f}-{hi:.0f} MiB over the last half of the calls after, whose "
            f"largest is {r['last_half_vs_first_half_pct']:+.1f}% from the first half's; {r['rss_end_mib']:.0f} MiB "
            f"at the end; load {r['load_avg'][0]:.1f} to {r['load_avg'][1]:.1f}")


def _inference_unseen(r: dict) -> str:
    return (f"{r['never_seen_ad_ids']:,} never-seen ids: table rows {r['table_rows_before']:,} -> "
            f"{r['table_rows_after']:,}, RSS {r['rss_before_mib']:.1f} -> {r['rss_after_mib']:.1f} MiB "
            f"({r['rss_change_pct']:+.1f}%), {r['unseen_lookups_counted']:,} unseen lookups counted")


def _scale(r: dict) -> str:
    parts = []
    for rows, runs in sorted(r["runs"].items(), key=lambda kv: int(kv[0])):
        for x in runs:
            parts.append(f"{_k(int(rows))} rows: {x['s_per_mrow']:.1f} s/M rows ({x['cpu_s_per_mrow']:.1f} CPU), peak "
                         f"{x['peak_rss_bytes'] / 2**30:.2f} GiB ({x.get('peak_stage')}), load {x['load_start'][0]:.1f}"
                         if x["exit"] == 0 else
                         f"{_k(int(rows))} rows: failed (exit {x['exit']})")
    big = r.get("ratios", {}).get("64000000", {})
    if "cpu_per_row_vs_4m" in big:
        parts.append(f"64M per row {big['per_row_vs_4m']:.2f}x the 4M runs' wall, {big['cpu_per_row_vs_4m']:.2f}x CPU")
    return "; ".join(parts)


def _dicm(r: dict) -> str:
    runs = ", ".join(f"{name} {x['auc']:.3f}" for name, x in r["runs"].items())
    im = r["images"]
    return (f"test AUC: {runs}; {im['references']} image references, {im['unique_images']} unique embedded "
            f"({im['dedup_ratio']:.2f} per image)")


def _training_loop(r: dict) -> str:
    peers = [("torchrec_fused", "TorchRec FusedEBC"), ("embeddingbag", "nn.EmbeddingBag")]
    text = (f"{r['trained_rows']:,} rows, 1 thread: fit {_k(r['fit_samples_per_s'])} samples/s, AUC {r['fit_auc']:.4f}")
    for key, label in peers:
        if r.get(f"{key}_samples_per_s"):
            text += (f"; {label} {_k(r[f'{key}_samples_per_s'])} samples/s, AUC {r[f'{key}_auc']:.4f} (fit / it "
                     f"{r[f'fit_over_{key}']:.2f}x)")
    if r.get("fit_over_torchrec_fused_with_remap"):
        text += f"; with TorchRec's id remap counted: {r['fit_over_torchrec_fused_with_remap']:.2f}x"
    if r.get("demo_over_fit"):
        text += (f"; `fbrapids demo` on the same rows {_k(r['demo_samples_per_s'])} samples/s (demo / fit "
                 f"{r['demo_over_fit']:.2f}x; {r['demo_overlap_s']:.2f} s of extraction overlapped, the process "
                 f"using {r['demo_cpu_cores']:.2f} cores)")
    if r.get("demo_bound_over_fit"):  # extraction alone (the extract arm) and fit share the cores
        b = r["pipeline_bound"]
        text += (f"; the most {b['cores']} cores allow a demo: {r['demo_bound_over_fit']:.2f}x fit (fit "
                 f"{b['fit_cpu_s']:.2f} s CPU + extraction alone {b['extract_cpu_s']:.2f} s CPU over {b['cores']} "
                 f"cores)")
    load = r["load_average"]
    return text + f"; load average {load['start']:.1f} at the start, {load['end']:.1f} at the end"


def _shuffle_buffer(r: dict) -> str:
    b, w, d = r["buffer"], r["window"], r["buffer_minus_window"]
    return (f"{r['rows']:,} rows, seeds {r['seeds']}: AUC {b['auc']['mean']:.4f} ± {b['auc']['sd']:.4f} (buffer) vs "
            f"{w['auc']['mean']:.4f} ± {w['auc']['sd']:.4f} (window), paired {d['auc']['mean']:+.4f} ± "
            f"{d['auc']['sd']:.4f}; calibration {b['calibration']['mean']:.3f} vs {w['calibration']['mean']:.3f}; "
            f"extraction overlapped {b['overlap_s']['mean']:.2f} s ({100 * b['hidden_share']['mean']:.0f}% of it) vs "
            f"{w['overlap_s']['mean']:.2f} s; load average {r['load_average']['start'][0]:.1f} at the start")


#: results judged by the noise rule (benchmarks/machine.py): one not accepted is not written into the README
NOISE_RULED = ("embedding", "distributed", "training_loop", "training_loop_1m", "trial_cost")


def refused(name: str, r: dict) -> str | None:
    """Why ``name``'s results may not be published (a speed figure the noise rule did not
    accept, or that predates it), or None.

    Example:
        >>> refused("embedding", {"verdict": "noisy", "noisy_because": ["load average 3.00 at the start"]})
        'refused: measured on a busy machine (load average 3.00 at the start); re-measure on a quiet one'
        >>> refused("pipeline", {}) is None
        True
    """
    if name not in NOISE_RULED or r.get("verdict") == "accepted":
        return None
    if "verdict" not in r:
        return "refused: measured before the noise rule (no machine-speed reference recorded); re-measure on a quiet machine"
    return f"refused: measured on a busy machine ({'; '.join(r.get('noisy_because') or [])}); re-measure on a quiet one"


FORMAT: dict[str, Callable[[dict], str]] = {"training_loop": _training_loop, "training_loop_1m": _training_loop,
                                            "shuffle_buffer": _shuffle_buffer, "dicm": _dicm, "distributed": _distributed, "inference_attack": _inference_attack,
                                            "inference_unseen": _inference_unseen,
                                            "inference_plateau": _inference_plateau, "extract": _extract, "extract_2m": _extract, "pipeline": _pipeline, "embedding": _embedding,
                                            "verify": _verify, "inference": _inference, "fitted": _fitted,
                                            "models": _models, "trial_calibration": _trial_calibration,
                                            "trial_calibration_family": _trial_calibration_family,
                                            "trial_calibration_family_100k": _trial_calibration_family,
                                            "trial_calibration_sequential": _trial_calibration_sequential,
                                            "trial_cost": _trial_cost,
                                            "held_out_calibration": _held_out_calibration, "scale": _scale}


def run(name: str, extra: list[str]) -> dict[str, Any]:
    """Run one benchmark; its last stdout line (JSON) with the command, machine and date added."""
    cmd, _ = BENCHMARKS[name]
    sys.path.insert(0, str(REPO))
    from benchmarks.machine import machine_description

    machine = machine_description()
    proc = subprocess.run([sys.executable, *cmd, *extra], cwd=REPO, capture_output=True, text=True)
    sys.stderr.write(proc.stdout[-4000:])
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise SystemExit(f"{name}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res.setdefault("machine", machine)
    res["command"] = "python " + " ".join([*cmd, *extra])
    res["measured_at"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(res, indent=1) + "\n")
    return res


def table() -> str:
    """The README table, one row per results file."""
    rows = ["| script | compares | measured (from `benchmarks/results/<name>.json`) |", "|---|---|---|"]
    for name, (cmd, what) in BENCHMARKS.items():
        path = RESULTS / f"{name}.json"
        if not path.exists():
            rows.append(f"| `{' '.join(cmd)}` | {what} | not measured yet: `python scripts/bench.py --only {name}` |")
            continue
        r = json.loads(path.read_text())
        where = f"{r.get('machine', 'machine not recorded')}, {r.get('measured_at', '')}".strip(", ")
        rows.append(f"| `{r.get('command', ' '.join(cmd)).removeprefix('python ')}` | {what} | "
                    f"{refused(name, r) or FORMAT[name](r)} — *{where}* |")
    return "\n".join(rows)


def fill_readme(text: str) -> str:
    """``text`` with the part between the table markers replaced by :func:`table`."""
    if START not in text or END not in text:
        raise SystemExit(f"README.md has no {START} ... {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(BENCHMARKS), default=list(BENCHMARKS))
    ap.add_argument("--table-only", action="store_true", help="refill the README table from the JSON files")
    ap.add_argument("--args", default="", help="extra arguments for the benchmark(s), e.g. '--repeat 5'")
    args = ap.parse_args(argv)
    if not args.table_only:
        for name in args.only:
            run(name, args.args.split())
    README.write_text(fill_readme(README.read_text()))
    # the docs' figures from the same files (docs/ams-and-serving.md's inference table), in a child
    # process: docs_figures imports this module for the README's table, so importing it back would be a cycle
    subprocess.run([sys.executable, str(REPO / "scripts" / "docs_figures.py")], check=True)
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
