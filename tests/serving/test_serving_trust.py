"""Serving that one client cannot bend: the item cache cannot be poisoned, cached items are
validated, duplicate ids with other features are scored per item, numbers that do not fit
float32 are refused naming column and item, the NaN / negative policy is counted, and the
cache is bounded in bytes."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import fbrapids  # noqa: F401
from fbrapids import kernels as kstats, ops
from fbrapids.errors import RequestError, RequestTooLargeError
from fbrapids.serving import Scorer
from fbrapids.serving.example import request_records, train_example
from fbrapids.serving.scorer import SCORE_ATOL
from fbrapids.serving.spec import ServingSpec


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    model, spec, _, (users, ads, _) = train_example(rows=1500, seed=0)
    req, items = request_records(users, ads, 6, seed=11)
    return model, spec, req, items


def fresh(trained, request, items) -> np.ndarray:
    model, spec, _, _ = trained
    return Scorer(model, spec, cache_items=0, max_text_chars=1 << 20).score(request, items)  # the reference: any title


def test_cache_cannot_be_poisoned(trained) -> None:
    model, spec, req, items = trained
    s = Scorer(model, spec)
    real = dict(items[0])
    poison = {**real, "price": 3e38, "title": "w1 w2 w3 w4 w5 w6 w7 w8"}
    got_a = s.score(req, [poison])  # client A: the same ad id, other features
    got_b = s.score(req, [real])  # client B: the real features
    np.testing.assert_allclose(got_b, fresh(trained, req, [real]), atol=SCORE_ATOL, rtol=0)
    np.testing.assert_allclose(got_a, fresh(trained, req, [poison]), atol=SCORE_ATOL, rtol=0)
    assert abs(got_a[0] - got_b[0]) > 10 * SCORE_ATOL
    assert s.stats["item_cache_misses"] == 2 and s.stats["item_cache_hits"] == 0
    s.score(req, [real, poison])  # both now cached, each under its own content
    assert s.stats["item_cache_hits"] == 2


def test_cached_items_are_still_validated(trained) -> None:
    model, spec, req, items = trained
    s = Scorer(model, spec)
    s.score(req, items)
    bad = [dict(it) for it in items]
    bad[3]["price"] = "garbage"
    with pytest.raises(RequestError, match="item 3: column 'price' must be a number, got 'garbage'"):
        s.score(req, bad)
    assert s.stats["rejected_bad_input"] == 1


def test_duplicate_ids_with_different_features_scored_per_item(trained) -> None:
    model, spec, req, items = trained
    a = dict(items[0])
    b = {**a, "price": a["price"] * 50 + 100, "category": (a["category"] + 1) % 50, "title": "w7 w8 w9"}
    for s in (Scorer(model, spec), Scorer(model, spec, cache_items=0), Scorer(model, spec, dedup=False)):
        got = s.score(req, [a, b, a])
        want = [fresh(trained, req, [a])[0], fresh(trained, req, [b])[0]]
        np.testing.assert_allclose(got, [want[0], want[1], want[0]], atol=SCORE_ATOL, rtol=0)
        assert abs(got[0] - got[1]) > 10 * SCORE_ATOL  # b's other features are scored, not a's cached row


@pytest.mark.parametrize("value", [3.5e38, -1e300, 1.7e308, float("inf"), float("-inf")])
def test_value_that_does_not_fit_float32_is_refused(trained, value) -> None:
    model, spec, req, items = trained
    bad = [dict(it) for it in items]
    bad[4]["price"] = value
    for s in (Scorer(model, spec), Scorer(model, spec, dedup=False)):
        with pytest.raises(RequestError, match=r"item 4: column 'price' value .* does not fit float32"):
            s.score(req, bad)
    with pytest.raises(RequestError, match=r"request 0: column 'age' value .* does not fit float32"):
        Scorer(model, spec).score({**req, "age": value}, items)


def test_nan_null_and_negative_policy_counted(trained) -> None:
    model, spec, req, items = trained
    s = Scorer(model, spec)
    odd = [dict(it) for it in items[:3]]
    odd[0]["price"] = None  # missing: fill_null(price, 0) -> log1p(0) = 0, nothing replaced
    odd[1]["price"] = float("nan")  # NaN is missing too: counted once replaced
    odd[2]["price"] = -5.0  # log1p(-5) is NaN: replaced by 0, counted
    got = s.score(req, odd)
    assert np.isfinite(got).all()
    zero = [{**odd[0], "price": 0.0}, {**odd[1], "price": 0.0}, {**odd[2], "price": 0.0}]
    np.testing.assert_allclose(got, fresh(trained, req, zero), atol=SCORE_ATOL, rtol=0)
    # -5 always; NaN unless fill_null already treats a NaN as null
    assert s.stats["nan_replaced"] == (1 if _fill_null_fills_nan() else 2)


def _fill_null_fills_nan() -> bool:
    import pandas as pd

    out = pd.DataFrame({"p": [float("nan")]}).fbx.extract(q=ops.fill_null("p", 0.0))
    return float(out["q"].iloc[0]) == 0.0


def test_cache_bounded_in_bytes(trained) -> None:
    model, spec, req, items = trained
    s = Scorer(model, spec, cache_bytes=64 << 10, max_text_chars=1 << 20)  # titles past the default bound
    long_items = [{**it, "ad_id": it["ad_id"] + k, "title": " ".join(f"w{(j * 7 + k) % 300}" for j in range(2000))}
                  for k, it in enumerate(items * 4)]
    got = s.score(req, long_items)
    np.testing.assert_allclose(got, fresh(trained, req, long_items), atol=SCORE_ATOL, rtol=0)
    assert s.item_cache_usage()["bytes"] <= 64 << 10 and s.stats["item_cache_bypassed"] > 0
    for k in range(0, len(long_items), 2):  # two at a time: LRU entries give way, never over the bound
        s.score(req, long_items[k : k + 2])
        assert 0 < s.item_cache_usage()["bytes"] <= 64 << 10
    assert s.item_cache_usage()["evictions"] > 0


def test_bounds_on_items_and_requests(trained) -> None:
    model, spec, req, items = trained
    s = Scorer(model, spec, max_items=10, max_requests=2)
    with pytest.raises(RequestTooLargeError, match="11 candidate items in one call, more than max_items=10"):
        s.score(req, (items * 2)[:11])
    with pytest.raises(RequestTooLargeError, match="3 requests in one call, more than max_requests=2"):
        s.score_batch([{"request": req, "items": items[:1]}] * 3)
    assert s.stats["rejected_too_large"] == 2
    with pytest.raises(ValueError, match="max_items must be an integer >= 1"):
        Scorer(model, spec, max_items=-1)
    with pytest.raises(ValueError, match="cache_items must be an integer >= 0"):
        Scorer(model, spec, cache_items=-5)


def test_errors_echo_a_bounded_part_of_the_input(trained) -> None:
    model, spec, req, items = trained
    bad = [dict(it) for it in items]
    bad[1]["price"] = "x" * 5_000_000
    with pytest.raises(RequestError) as err:
        Scorer(model, spec).score(req, bad)
    assert len(str(err.value)) < 400 and "item 1: column 'price'" in str(err.value)


def _in_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.update(r=fn()))
    t.start()
    t.join()
    return out["r"]


def test_one_outlier_row_does_not_inflate_later_pools(trained) -> None:
    """An item with a 20,000-word title, then 2,000 ordinary new items: the ordinary call's
    kernel pool stays near what it needs, not the outlier's bytes per row x 2,000 rows.
    (Each call runs on a fresh thread, so on a fresh per-thread pool; the spec's own bucket
    count keeps its plan, and the plan's per-row peak, apart from other tests'.)"""
    model, spec, req, items = trained
    own = ServingSpec(**{**spec.__dict__, "item_features": {
        **spec.item_features, "title_tok_h": ops.split(ops.fill_null("title", ""), " ", buckets=(1 << 18) - 3)}})
    s = Scorer(model, own, cache_items=0, max_text_chars=1 << 20)  # the outlier is past the default bound
    _, catalogue = request_records(*_catalogue(), 4000, seed=3)
    normal_a = [{**it, "ad_id": 10_000_000 + k} for k, it in enumerate(catalogue[:2000])]
    normal_b = [{**it, "ad_id": 20_000_000 + k} for k, it in enumerate(catalogue[2000:])]
    outlier = {**items[0], "ad_id": 1, "title": " ".join(f"w{j % 300}" for j in range(20_000))}

    def capacity(batch):
        kstats.reset_stats()
        scores = s.score(req, batch)
        assert np.isfinite(scores).all()
        return kstats.stats()["pool_capacity"]

    cap_normal = _in_thread(lambda: capacity(normal_a))
    cap_outlier = _in_thread(lambda: capacity([outlier]))
    cap_after = _in_thread(lambda: capacity(normal_b))
    assert cap_after <= 4 * max(cap_normal, cap_outlier), (cap_normal, cap_outlier, cap_after)


def _catalogue():
    from fbrapids.serving.example import example_catalogue

    return example_catalogue(n_users=10, n_ads=4000, seed=5)
