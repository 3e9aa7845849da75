"""Wide&Deep inference: latency and throughput per request of N candidate items, with and without dedup.

One run trains the serving example's Wide&Deep (:mod:`fbrapids.serving.example`: requests
are users with a query and a 20-60 word history, items are ads from a catalogue of
``--ads``), then scores ``--requests`` requests at each of N = 64, 256, 1024, 4096 items per
request (items drawn from the catalogue with a Zipf law, so popular ads recur across
requests), through three scorers over the same model, interleaved request by request:

* ``dedup_on``: request features extracted once per request, item features once per item
  (LRU item cache over the catalogue), request side of the model once (split forward);
* ``dedup_on_no_cache``: the same without the item cache (item features extracted for each
  request's unique items);
* ``dedup_off``: every (request, item) row materialised and every feature extracted for it,
  then ``model(batch)`` (what scoring with the training-side code does).

With the ``serve`` extra installed, the same dedup scorer is also measured behind the HTTP
service (the app ``fbrapids serve`` runs, with its body limit, validation and content-keyed
cache: uvicorn on 127.0.0.1, JSON in and out) at ``--http-items`` items per request, with 1
and ``--http-clients`` concurrent clients, ``--http-requests`` requests each (requests are
serialised by the scorer's lock, so concurrency overlaps only JSON and network work).
``--http-only`` runs just that part (the serving-load acceptance figures: 8 clients, 64 items).
Before it, the HTTP scorer's item cache is filled with the whole catalogue (in-process,
unmeasured), so the HTTP figures measure the same steady state with or without
``--http-only`` (the hit rate during the run is reported with them), and the process's heap
is frozen out of the garbage collector's full passes, as ``fbrapids serve`` does after
loading.  Besides wall-clock figures, each HTTP run reports the process's CPU time per
request (server and clients together): on a shared machine, a steadier figure.  The script
runs against the checkout named on ``PYTHONPATH`` when it is set (an older one included:
``cd OLD && PYTHONPATH=$PWD python NEW/benchmarks/inference.py --http-only ...``), so before
and after figures come from one script with the same warm-up.

Latency is per ``Scorer.score`` call (JSON-like records in, probabilities out; feature
extraction through the compiled meta-kernels included); p50 and p99 over the requests;
throughput is items scored per second of scoring.  Warm-up requests (not measured) fill the
item cache and compile the plans first.

The last line printed is one JSON object::

    {"benchmark": "inference", "device": D (cpu or cuda, by the device rule), "torch_threads": T,
     "requests_per_size": R,
     "sizes": {"64": {"dedup_on": {"p50_ms", "p99_ms", "mean_ms", "items_per_s"},
                       "dedup_on_no_cache": {...}, "dedup_off": {...},
                       "p50_speedup": dedup_off p50 / dedup_on p50,
                       "throughput_ratio": dedup_on items/s / dedup_off items/s,
                       "item_cache_hit_rate": hits / lookups of dedup_on at that size,
                       "max_score_difference": the largest |score| difference of a mode from
                       dedup_off on one request}, ...},
     "http": {"items_per_request": n, "clients_1": {"p50_ms", "p99_ms", "items_per_s", "requests_per_s",
              "cpu_ms_per_request", "item_cache_hit_rate"}, "clients_C": {...}} or null without FastAPI / uvicorn}

Usage:
    python benchmarks/inference.py                 # default run (about 1 minute on 2 cores)
    python benchmarks/inference.py --requests 100 --threads 4
    python benchmarks/inference.py --http-only --http-items 64 --http-clients 8 --http-requests 400
    python benchmarks/inference.py --attack        # under attack (benchmarks/serving_attack.py)
    python benchmarks/inference.py --unseen-ids    # 500k never-seen ids, rows and RSS flat
    python benchmarks/inference.py --rss-plateau   # the served DIN's RSS over 10,000 calls
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

if not os.environ.get("PYTHONPATH"):  # a checkout named on PYTHONPATH (an older one, to compare) wins
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fbrapids.serving import Scorer  # noqa: E402
from fbrapids.serving.example import train_example  # noqa: E402

SIZES = (64, 256, 1024, 4096)
MODES = ("dedup_on", "dedup_on_no_cache", "dedup_off")


def _records(users, ads, n: int, rng: np.random.Generator, alpha: float) -> tuple[dict, list[dict]]:
    ranks = (rng.zipf(alpha, n) - 1) % len(ads)
    req = {k: (v.item() if hasattr(v, "item") else v) for k, v in users.iloc[int(rng.integers(len(users)))].items()}
    cols = {c: ads[c].to_numpy() for c in ads.columns}
    items = [{c: (cols[c][r].item() if hasattr(cols[c][r], "item") else cols[c][r]) for c in cols} for r in ranks]
    return req, items


def _summary(lat: list[float], items: int) -> dict[str, float]:
    a = np.asarray(lat)
    return {"p50_ms": round(float(np.percentile(a, 50)) * 1e3, 3),
            "p99_ms": round(float(np.percentile(a, 99)) * 1e3, 3),
            "mean_ms": round(float(a.mean()) * 1e3, 3), "items_per_s": round(items * len(a) / float(a.sum()), 1)}


def _warm_catalogue(scorer: Scorer, users, ads, chunk: int = 4096) -> None:
    """Score every catalogue item once (in-process, unmeasured), so the item cache holds the
    catalogue whatever ran before: the HTTP figures measure the same steady state with or
    without ``--http-only``."""
    req = {k: (v.item() if hasattr(v, "item") else v) for k, v in users.iloc[0].items()}
    cols = {c: ads[c].to_numpy() for c in ads.columns}
    for s in range(0, len(ads), chunk):
        scorer.score(req, [{c: (cols[c][r].item() if hasattr(cols[c][r], "item") else cols[c][r]) for c in cols}
                           for r in range(s, min(s + chunk, len(ads)))])


def _cache_counts(scorer: Scorer) -> tuple[int, int]:
    st = scorer.stats
    return st.get("item_cache_hits", 0), st.get("item_cache_misses", 0)


def _http(scorer: Scorer, users, ads, n: int, requests: int, clients: int, rng: np.random.Generator,
          alpha: float) -> dict | None:
    """Client-side latency / throughput through the HTTP service, 1 and ``clients`` at a time
    (the item cache first filled with the catalogue, :func:`_warm_catalogue`)."""
    try:
        import uvicorn

        from fbrapids.serving.http import create_app
    except ImportError:
        print("HTTP figures skipped: install the 'serve' extra (fastapi, uvicorn)")
        return None
    import socket
    import threading
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    _warm_catalogue(scorer, users, ads)
    # as `fbrapids serve` does once loaded (fbrapids.serving.http.freeze_heap), here for old and new
    # code alike: the start-up heap (model, frames, modules) leaves the collector's full passes,
    # so a 100-250 ms full collection does not land in the measured window by chance
    gc.collect()
    gc.freeze()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(scorer), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    url = f"http://127.0.0.1:{port}/score"
    bodies = [json.dumps(dict(zip(("request", "items"), _records(users, ads, n, rng, alpha)))).encode()
              for _ in range(requests)]

    def post(body: bytes) -> float:
        t = time.perf_counter()
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
        return time.perf_counter() - t

    out = {"items_per_request": n}
    try:
        for c in (1, clients):
            with ThreadPoolExecutor(c) as pool:
                list(pool.map(post, bodies[: 2 * c]))  # warm-up
                (h0, m0), t0, c0 = _cache_counts(scorer), time.perf_counter(), time.process_time()
                lat = list(pool.map(post, bodies))
                wall, cpu, (h1, m1) = time.perf_counter() - t0, time.process_time() - c0, _cache_counts(scorer)
            a = np.asarray(lat)
            out[f"clients_{c}"] = {"p50_ms": round(float(np.percentile(a, 50)) * 1e3, 3),
                                   "p99_ms": round(float(np.percentile(a, 99)) * 1e3, 3),
                                   "items_per_s": round(n * len(a) / wall, 1),
                                   "requests_per_s": round(len(a) / wall, 2),
                                   "cpu_ms_per_request": round(cpu / len(a) * 1e3, 3),
                                   "item_cache_hit_rate": round((h1 - h0) / max(1, h1 - h0 + m1 - m0), 4)}
            r = out[f"clients_{c}"]
            print(f"HTTP {n} items, {c} client(s): p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, "
                  f"{r['requests_per_s']:.1f} requests/s, {r['items_per_s']:.0f} items/s, "
                  f"{r['cpu_ms_per_request']:.2f} CPU ms/request (server and clients), "
                  f"item cache hit rate {r['item_cache_hit_rate']}")
    finally:
        server.should_exit = True
        thread.join(timeout=20)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="items per request, comma-separated")
    ap.add_argument("--requests", type=int, default=40, help="measured requests per size and mode")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured requests per size and mode first")
    ap.add_argument("--ads", type=int, default=20000, help="catalogue size")
    ap.add_argument("--users", type=int, default=2000)
    ap.add_argument("--train-rows", type=int, default=20000)
    ap.add_argument("--alpha", type=float, default=1.2, help="Zipf exponent of item popularity")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--http-items", type=int, default=256, help="items per request in the HTTP run")
    ap.add_argument("--http-clients", type=int, default=4, help="concurrent clients in the HTTP run")
    ap.add_argument("--http-requests", type=int, default=None, help="measured HTTP requests (default --requests)")
    ap.add_argument("--no-http", action="store_true", help="skip the HTTP run")
    ap.add_argument("--http-only", action="store_true", help="only the HTTP run (no in-process sizes)")
    ap.add_argument("--attack", action="store_true",
                    help="serving under attack (benchmarks/serving_attack.py): authorised p50 and calls answered, "
                         "unloaded and under a 15 MB unauthenticated flood, a hog of max-size calls, 64 connections "
                         "of them, amplifying bodies, /score_batch fallbacks, 200 stalled connections, 600 idle "
                         "sockets, three addresses x 16 connections of 1,000-item calls, five addresses of stalled "
                         "4 MiB bodies, clients that hang up")
    ap.add_argument("--unseen-ids", action="store_true",
                    help="table rows and RSS while scoring --unseen never-seen ids (benchmarks/serving_attack.py)")
    ap.add_argument("--unseen", type=int, default=500_000, help="never-seen ad ids scored by --unseen-ids")
    ap.add_argument("--rss-plateau", action="store_true",
                    help="the served DIN's RSS over --plateau-calls calls once its item cache is full "
                         "(benchmarks/serving_attack.py)")
    ap.add_argument("--plateau-calls", type=int, default=10_000)
    ap.add_argument("--plateau-items", type=int, default=64)
    ap.add_argument("--plateau-clients", type=int, default=4)
    ap.add_argument("--attack-requests", type=int, default=60,
                    help="authorised requests of the warm-up (at most 20) before the attacks")
    ap.add_argument("--attack-seconds", type=float, default=30.0,
                    help="seconds each attack runs while the authorised client is measured")
    ap.add_argument("--flood-clients", type=int, default=2)
    ap.add_argument("--hog-clients", type=int, default=1)
    ap.add_argument("--hog-items", type=int, default=10_000, help="items per hog call (the default max_items)")
    ap.add_argument("--address-items", type=int, default=1000,
                    help="items per call of the 'addresses' and 'hangup' attacks")
    ap.add_argument("--idle-sockets", type=int, default=600, help="idle sockets of the 'idle' attack")
    ap.add_argument("--idle-addresses", type=int, default=10, help="source addresses the idle sockets come from")
    ap.add_argument("--batch-requests", type=int, default=1024,
                    help="requests of 9 items in each /score_batch fallback body (the last one bad)")
    ap.add_argument("--attack-settle", type=float, default=3.0, help="seconds an attack runs before measuring")
    ap.add_argument("--attack-phases",
                    default="flood,hog,hog64,amplify,batch_fallback,stalled,idle,addresses,stalled_bodies,hangup",
                    help="the attacks run, in order (comma-separated)")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here (--attack / --unseen-ids: "
                                                            "default benchmarks/results/inference_attack.json / "
                                                            "inference_unseen.json)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    if args.attack or args.unseen_ids or args.rss_plateau:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import serving_attack

        run, name = ((serving_attack.attack, "inference_attack") if args.attack else
                     (serving_attack.unseen, "inference_unseen") if args.unseen_ids else
                     (serving_attack.plateau, "inference_plateau"))
        res = run(args)
        out = args.out or Path(__file__).resolve().parent / "results" / f"{name}.json"
        out.write_text(json.dumps(res, indent=1) + "\n")
        print(json.dumps(res))
        return 0

    t0 = time.perf_counter()
    model, spec, _, (users, ads, _) = train_example(rows=args.train_rows, seed=args.seed, n_users=args.users,
                                                    n_ads=args.ads)
    print(f"trained the example Wide&Deep on {args.train_rows} rows in {time.perf_counter() - t0:.1f}s; "
          f"catalogue {args.ads} ads, {args.users} users")
    scorers = {"dedup_on": Scorer(model, spec, cache_items=max(args.ads, 1)),
               "dedup_on_no_cache": Scorer(model, spec, cache_items=0),
               "dedup_off": Scorer(model, spec, dedup=False)}
    rng = np.random.default_rng(args.seed + 1)
    out: dict[str, dict] = {}
    print(f"{'items':>6} {'mode':>18} {'p50 ms':>9} {'p99 ms':>9} {'items/s':>11}")
    for n in () if args.http_only else [int(x) for x in args.sizes.split(",") if x]:
        lat: dict[str, list[float]] = {m: [] for m in MODES}
        worst = 0.0  # the largest score difference between modes on one request: dedup must change nothing
        st = scorers["dedup_on"]._cache.stats if scorers["dedup_on"]._cache is not None else {}
        hits0, miss0 = st.get("hits", 0), st.get("misses", 0)
        for k in range(args.warmup + args.requests):
            req, items = _records(users, ads, n, rng, args.alpha)
            order = MODES if k % 2 == 0 else MODES[::-1]
            scores = {}
            for m in order:
                t = time.perf_counter()
                scores[m] = scorers[m].score(req, items)
                if k >= args.warmup:
                    lat[m].append(time.perf_counter() - t)
            worst = max(worst, *(float(np.max(np.abs(scores[m] - scores["dedup_off"]))) for m in MODES))
            if k == args.warmup - 1:
                hits0, miss0 = st.get("hits", 0), st.get("misses", 0)
        res = {m: _summary(lat[m], n) for m in MODES}
        res["p50_speedup"] = round(res["dedup_off"]["p50_ms"] / res["dedup_on"]["p50_ms"], 3)
        res["throughput_ratio"] = round(res["dedup_on"]["items_per_s"] / res["dedup_off"]["items_per_s"], 3)
        looked = st.get("hits", 0) - hits0 + st.get("misses", 0) - miss0
        res["item_cache_hit_rate"] = round((st.get("hits", 0) - hits0) / looked, 4) if looked else None
        res["max_score_difference"] = worst
        out[str(n)] = res
        for m in MODES:
            r = res[m]
            print(f"{n:>6} {m:>18} {r['p50_ms']:>9.2f} {r['p99_ms']:>9.2f} {r['items_per_s']:>11.0f}")
        print(f"{n:>6} {'dedup_on vs off':>18}   p50 speedup x{res['p50_speedup']}, "
              f"throughput x{res['throughput_ratio']}, "
              f"item cache hit rate {res['item_cache_hit_rate']}")
    http = None if args.no_http else _http(scorers["dedup_on"], users, ads, args.http_items,
                                           args.http_requests or args.requests, args.http_clients, rng, args.alpha)
    print(json.dumps({"benchmark": "inference", "device": str(getattr(scorers["dedup_on"], "device", "cpu")),
                      "torch_threads": args.threads,
                      "requests_per_size": args.requests, "catalogue": args.ads, "zipf_alpha": args.alpha,
                      "sizes": out, "http": http}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
