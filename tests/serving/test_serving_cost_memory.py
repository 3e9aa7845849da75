"""A call's peak memory is bounded by the documented multiple of its body
(:mod:`fbrapids.serving.cost`), for every model the demo serves, DIN's history included.

In one subprocess (its peak resident size reset before each call through
``/proc/self/clear_refs``), each model scores (a) a call whose request lists sit at their
length bounds, with as many items as the work bound admits, (b) a call of ``max_items`` items
whose titles are as long as the body limit and the work bound allow (the largest body a
call is admitted with), (b') a call whose ``hist_cat`` is at its bound with as many items as
the work bound admits (DIN attends every (item, history entry) pair), and (c) the finding's DIN body (``hist_cat`` of 40,000, 512 items:
3 GB before), which is now refused before any work.  The scorer slices calls as served,
with a quarter of the served call bounds (items, work, body) to keep the test short."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fbrapids.serving.cost import PEAK_BASE_BYTES, PEAK_BODY_FACTOR

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("dlrm", "wide_deep", "deepfm", "din")

SCRIPT = textwrap.dedent("""
    import json, re, sys
    import torch
    torch.set_num_threads(1)
    from pathlib import Path
    from fbrapids.errors import RequestTooLargeError
    from fbrapids.app.pipeline import model_arguments
    from fbrapids.serving import Scorer
    from fbrapids.serving.cost import MAX_LIST_LEN, MAX_TEXT_CHARS, MAX_WORK
    from fbrapids.app.demo_export import demo_inputs, demo_spec
    from fbrapids.serving.guard import ServeLimits
    from fbrapids.serving.scorer import MAX_ITEMS
    BODY_LIMIT = ServeLimits.max_body_bytes // 4
    from fbrapids.trainers.sparse import StoreConfig

    text = Path("README.md").read_text()
    block = re.search(r"<!-- serve-demo:begin.*?-->\\s*```bash\\n(.*?)```", text, re.S).group(1)
    body = json.loads(re.search(r"-d '(\\{.*?\\})'", block, re.S).group(1))

    def hwm():
        return next(int(l.split()[1]) << 10 for l in open("/proc/self/status") if l.startswith("VmHWM:"))

    def measured(s, request, items):
        raw = len(json.dumps({"request": request, "items": items}))
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak resident size starts again from the current one
        base = hwm()
        try:
            s.score(request, items)
            refused = None
        except RequestTooLargeError as exc:
            refused = str(exc)
        return {"body_bytes": raw, "growth": hwm() - base, "refused": refused, "items": len(items)}

    out = {}
    for model in sys.argv[1:]:
        dense, sparse, seq = demo_inputs(model)
        cls, kw = model_arguments(model, len(dense), sparse, StoreConfig(cache_rows=1 << 12), 16, sequences=seq)
        # the served slices (chunk_items, chunk_work), with a quarter of the call bounds (test time):
        # a call's peak is one slice's, whatever its size
        s = Scorer(cls(**kw).eval(), demo_spec(model=model), max_work=MAX_WORK // 4, max_items=MAX_ITEMS // 4)
        request = dict(body["request"], hist_cat=[3, 5])
        s.score(request, body["items"])  # warm: the plans compiled
        at_bounds = dict(request, query=" ".join(f"w{j % 97}" for j in range(1000))[:1024],
                         interests="|".join(f"i{j}" for j in range(2000))[:MAX_TEXT_CHARS],
                         hist_cat=list(range(MAX_LIST_LEN)))
        per = int(s.cost.item_work(s.cost.request_size(at_bounds, "r"), body["items"][:1], str)[0])
        n = min(s.max_items, s.cost.max_work // per)
        items = [dict(body["items"][j % 2], ad_id=10**6 + j) for j in range(n)]
        out[model] = {"at_bounds": measured(s, at_bounds, items)}
        # DIN's history at its bound, as many items as the work bound admits (several slices):
        # each (item, history entry) pair is attended (93-173 MiB over rest before it was bounded)
        history = dict(request, hist_cat=list(range(MAX_LIST_LEN)))
        per = int(s.cost.item_work(s.cost.request_size(history, "r"), body["items"][:1], str)[0])
        n = min(s.max_items, s.cost.max_work // per)
        out[model]["history"] = measured(s, history, [dict(body["items"][j % 2], ad_id=3 * 10**6 + j)
                                                      for j in range(n)])
        # the body limit: as many items as a call admits, titles as long as the work bound allows
        plain = dict(request, hist_cat=[3, 5], query="")  # no query: no title x query crosses
        item = dict(body["items"][0], title="")
        n, r = s.max_items, s.cost.request_size(plain, "r")
        chars = (BODY_LIMIT // n) - len(json.dumps(item)) - 8
        while int(s.cost.item_work(r, [dict(item, title="x" * chars)], str)[0]) * n > s.cost.max_work:
            chars -= 1
        items = [dict(item, ad_id=2 * 10**6 + j, title=("t%d " % j * chars)[:chars]) for j in range(n)]
        out[model]["body_limit"] = measured(s, plain, items)
        finding = dict(request, hist_cat=list(range(40_000)))
        out[model]["finding"] = measured(s, finding, [dict(body["items"][j % 2], ad_id=j) for j in range(512)])
    print(json.dumps(out))
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's /proc/self/clear_refs")
def test_peak_memory_per_call_is_bounded_for_every_model() -> None:
    res = subprocess.run([sys.executable, "-c", SCRIPT, *MODELS], capture_output=True, text=True, timeout=600,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "FBRAPIDS_BACKEND": "cpu"})
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    for model in MODELS:
        finding = out[model]["finding"]
        for case in ("at_bounds", "history", "body_limit"):
            legal = out[model][case]
            assert legal["refused"] is None and legal["items"] >= 10, (model, case, legal)
            assert legal["growth"] <= PEAK_BASE_BYTES + PEAK_BODY_FACTOR * legal["body_bytes"], (model, case, legal)
        assert out[model]["body_limit"]["body_bytes"] > 256 << 10
        if model == "din" or "hist_cat" in (finding["refused"] or ""):
            assert finding["refused"].startswith("request 0: column 'hist_cat' holds 40000 entries"), (model, finding)
        assert finding["growth"] <= PEAK_BASE_BYTES + PEAK_BODY_FACTOR * finding["body_bytes"], (model, finding)
