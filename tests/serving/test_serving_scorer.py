"""Serving: scores equal the training-side model's on the same rows; request features
once per request, item features once per item (cached); fused extraction; bad input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

import fbrapids  # noqa: F401
from fbrapids.features import plan_for
from fbrapids.serving import Scorer, export_model, load_scorer, supports_split
from fbrapids.serving.example import request_records, train_example
from fbrapids.serving.scorer import SCORE_ATOL
from fbrapids.trainers import DIN, DLRM, DeepFM, StoreConfig, fit
from fbrapids.trainers.device import module_device


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    return train_example(rows=1500, seed=0)


def test_scores_equal_training_side(trained, training_side, device: str) -> None:
    model, spec, _, (users, ads, _) = trained
    on, off = Scorer(model, spec, device=device), Scorer(model, spec, dedup=False)
    assert module_device(model).type == device and {s.device.type for s in model.stores().values()} == {device}
    for seed, n in ((1, 5), (2, 300)):
        req, items = request_records(users, ads, n, seed=seed)
        items = items + items[:3]  # repeated candidates
        ref = training_side(model, spec, req, items)
        np.testing.assert_allclose(on.score(req, items), ref, atol=SCORE_ATOL, rtol=0)
        np.testing.assert_allclose(off.score(req, items), ref, atol=SCORE_ATOL, rtol=0)
    assert len(np.unique(ref)) > 10  # the scores are not all the same
    model.to("cpu")  # the module-scoped model goes back for the other tests


def test_request_once_items_once_with_cache(trained, training_side) -> None:
    model, spec, _, (users, ads, _) = trained
    s = Scorer(model, spec)
    req, items = request_records(users, ads, 200, seed=5)
    unique = len({it["ad_id"] for it in items})
    first = s.score(req, items)
    assert s.stats["requests_extracted"] == 1 and s.stats["items_extracted"] == unique
    assert s.stats["item_cache_misses"] == unique and s.stats["item_cache_hits"] == 0
    assert s.stats["pairs_extracted"] == unique  # the cross feature: once per unique pair
    req2, _ = request_records(users, ads, 1, seed=6)
    second = s.score(req2, items)
    assert s.stats["requests_extracted"] == 2 and s.stats["items_extracted"] == unique  # all from the cache
    assert s.stats["item_cache_hits"] == unique
    np.testing.assert_allclose(second, training_side(model, spec, req2, items), atol=SCORE_ATOL, rtol=0)
    assert not np.allclose(first, second)

    # launches: one per plan layer per extraction; independent hash buckets share one layer
    frame = pd.DataFrame(items).astype({"title": "str"})
    item_plan = plan_for(frame, spec.item_features)
    hb_layers = {layer.index for layer in item_plan.layers for nid in layer.nodes
                 if item_plan.nodes[nid].op.name == "hash_bucket"}
    assert len(hb_layers) == 1 and item_plan.num_ops > len(item_plan.layers)
    s2 = Scorer(model, spec, cache_items=0)
    s2.score(req, items)
    rframe = pd.DataFrame([req]).astype({c: "str" for c in ("gender", "query", "history")})
    pframe = pd.DataFrame([{**req, **it} for it in items])
    expected = (len(plan_for(rframe, spec.request_features).layers) + len(item_plan.layers)
                + len(plan_for(pframe, spec.pair_features).layers))
    assert s2.stats["kernel_launches"] == expected


def test_score_batch_dedups_across_requests(trained, training_side) -> None:
    model, spec, _, (users, ads, _) = trained
    s = Scorer(model, spec)
    entries = [dict(zip(("request", "items"), request_records(users, ads, 50, seed=k))) for k in range(3)]
    entries[2]["items"] = entries[0]["items"][:20] + entries[1]["items"][:10]
    got = s.score_batch(entries)
    assert s.stats["requests_extracted"] == 3
    assert s.stats["items_extracted"] == len({it["ad_id"] for e in entries for it in e["items"]})
    for e, g in zip(entries, got):
        np.testing.assert_allclose(g, training_side(model, spec, e["request"], e["items"]), atol=SCORE_ATOL, rtol=0)
    assert s.score_batch([]) == []
    assert s.score(entries[0]["request"], []).shape == (0,)


def test_small_cache_evicts_and_scores_stay_equal(trained) -> None:
    model, spec, _, (users, ads, _) = trained
    small, none = Scorer(model, spec, cache_items=60), Scorer(model, spec, cache_items=0)
    for k in range(6):
        req, items = request_records(users, ads, 40, seed=100 + k)
        np.testing.assert_allclose(small.score(req, items), none.score(req, items), atol=SCORE_ATOL, rtol=0)
    assert small._cache.stats["evictions"] > 0 and len(small._cache) <= 60
    req, items = request_records(users, ads, 100, seed=200)  # more unique items than the cache holds
    np.testing.assert_allclose(small.score(req, items), none.score(req, items), atol=SCORE_ATOL, rtol=0)


def test_export_load_round_trip(trained, tmp_path) -> None:
    model, spec, kwargs, (users, ads, frame) = trained
    export_model(tmp_path / "exp", model, spec, kwargs, sample=frame.head(50))
    assert "kernel launch" in (tmp_path / "exp" / "plan.txt").read_text()
    loaded = load_scorer(tmp_path / "exp")
    req, items = request_records(users, ads, 64, seed=9)
    trained_state = model.state_dict()
    assert all(torch.equal(v, trained_state[k]) for k, v in loaded.model.state_dict().items())  # dense: exact
    # the scores are held to the served-score bound, not to the bit (BLAS
    # results may depend on buffer alignment, which two models' allocations need not share)
    np.testing.assert_allclose(loaded.score(req, items), Scorer(model, spec).score(req, items), atol=SCORE_ATOL, rtol=0)
    with pytest.raises(FileNotFoundError, match="not a serving export"):
        load_scorer(tmp_path)


def _served(model, tables) -> int:
    """Id occurrences the model's tables named ``tables`` (any collection) have looked up."""
    return sum(v for k, st in model.stores().items() if k.split("/")[-1] in tables
               for n, v in st.stats().items() if n.startswith("served_"))


@pytest.mark.parametrize("kind", ["dlrm", "deepfm", "din"])
def test_request_side_once_per_call_for_every_model(trained, training_side, kind) -> None:
    """DLRM, DeepFM and DIN: scores equal the training side's, and the request's
    bags (query, history tokens) are looked up once per call, however many items it has:
    the request-only tables read the same ids for 10 items as for 200 (N x as many before)."""
    _, spec, _, (users, ads, frame) = trained
    torch.manual_seed(0)
    common = dict(embedding_dim=4, store=StoreConfig(cache_rows=1 << 14))
    if kind == "dlrm":
        m = DLRM(len(spec.dense), spec.sparse, bottom_mlp=[8], top_mlp=[8], bias_vector=True, **common)
    elif kind == "deepfm":
        m = DeepFM(len(spec.dense), spec.sparse, deep_mlp=[8], **common)
    else:  # the browsing history attended against the candidate's title tokens (one token table), with
        # the first-order part the pipeline's DIN has (once served without it)
        m = DIN(len(spec.dense), [f for f in spec.sparse if f != "history_tok_h"], {"history_tok_h": "title_tok_h"},
                attention_mlp=[8], mlp=[8], first_order=True, **common)
    fit(m, frame.head(600).fbx.stream(label="click", dense=spec.dense, sparse=spec.sparse, batch_size=256),
        progress=False)
    assert supports_split(m)
    s = Scorer(m, spec, cache_items=0)
    req, items = request_records(users, ads, 200, seed=4)
    request_only = {"user_h", "gender_h", "query_tok_h"} | ({"history_tok_h"} if kind != "din" else set())
    reads = []
    for n in (10, 200):
        before = _served(m, request_only)
        got = s.score(req, items[:n])
        reads.append(_served(m, request_only) - before)
        np.testing.assert_allclose(got, training_side(m, spec, req, items[:n]), atol=SCORE_ATOL, rtol=0)
    assert len(np.unique(got)) > 10
    tokens = len(req["history"].split()) + len((req["query"] or "").split()) * (kind != "din")
    assert reads[0] == reads[1] > 0 and reads[1] < 200 * tokens


@pytest.mark.parametrize("mutate, message", [
    (lambda r, it: it[3].pop("price"), "item 3: missing column 'price'"),
    (lambda r, it: it[1].update(price="abc"), "item 1: column 'price' must be a number, got 'abc'"),
    (lambda r, it: it[2].update(ad_id=None), "item 2: column 'ad_id' must be an integer (int64), got null"),
    (lambda r, it: it[0].update(ad_id=1.5), "column 'ad_id' must be an integer (int64), got 1.5"),
    (lambda r, it: r.pop("user_id"), "request 0: missing column 'user_id'"),
    (lambda r, it: r.update(query=7), "request 0: column 'query' must be a string or null, got 7"),
    (lambda r, it: it.__setitem__(4, "x"), "item 4: expected an object of columns"),
])
def test_bad_requests_raise_clear_errors(trained, mutate, message) -> None:
    model, spec, _, (users, ads, _) = trained
    s = Scorer(model, spec)
    req, items = request_records(users, ads, 8, seed=1)
    mutate(req, items)
    with pytest.raises(ValueError) as err:
        s.score(req, items)
    assert message in str(err.value)
    good_req, good_items = request_records(users, ads, 8, seed=1)
    assert s.score(good_req, good_items).shape == (8,)  # still serving


def test_structural_errors_and_limits(trained) -> None:
    model, spec, _, (users, ads, _) = trained
    s = Scorer(model, spec, max_items=10)
    req, items = request_records(users, ads, 11, seed=1)
    with pytest.raises(ValueError, match="11 candidate items in one call, more than max_items=10"):
        s.score(req, items)
    with pytest.raises(ValueError, match="'items' must be a list"):
        s.score_batch([{"request": req, "items": "nope"}])
    with pytest.raises(ValueError, match="request 0: expected an object with 'request' and 'items'"):
        s.score_batch([[1, 2]])
    req["history"] = None  # a null string is a value: fill_null gives an empty history
    assert np.isfinite(s.score(req, items[:3])).all()


def test_errors_name_the_position_in_the_call(trained) -> None:
    model, spec, _, (users, ads, _) = trained
    s = Scorer(model, spec)
    req, items = request_records(users, ads, 30, seed=12)
    s.score(req, items[:10])  # items 0..9 are cached now; the bad one is among the misses
    items = [dict(it) for it in items]
    items[17]["title"] = 5
    with pytest.raises(ValueError, match=r"^item 17: column 'title' must be a string or null, got 5$"):
        s.score(req, items)
    entries = [{"request": req, "items": items[:5]}, {"request": req, "items": items[10:20]}]
    with pytest.raises(ValueError, match=r"^request 1 item 7: column 'title'"):
        s.score_batch(entries)
    with pytest.raises(ValueError, match=r"^request 1 item 7: column 'title'"):
        Scorer(model, spec, dedup=False).score_batch(entries)


def test_request_embeddings_looked_up_once_not_per_item(trained) -> None:
    """Broadcast, not repeated: the request's history ids reach the embedding tables once per
    request with dedup, once per item row without it."""
    model, spec, _, (users, ads, _) = trained
    req, items = request_records(users, ads, 50, seed=21)
    n_rows = len({it["ad_id"] for it in items})
    tokens = len(req["history"].split())
    tables = [model.wide.stores["history_tok_h"], model.deep_emb.stores["history_tok_h"]]

    def lookups() -> int:
        return sum(t.stats()["lookups"] for t in tables)

    before = lookups()
    Scorer(model, spec).score(req, items)
    assert lookups() - before == 2 * tokens  # wide + deep table, one request row each
    before = lookups()
    Scorer(model, spec, dedup=False).score(req, items)
    assert lookups() - before == 2 * tokens * len(items)
    assert n_rows > 1


def test_pair_features_over_list_and_string_request_columns() -> None:
    from fbrapids import ops
    from fbrapids.serving import ServingSpec
    from fbrapids.trainers import WideAndDeep

    spec = ServingSpec(schema={"u": "int64", "h": "list<int64>", "q": "str", "a": "int64", "c": "str"},
                       request_columns=["u", "h", "q"], item_columns=["a", "c"], item_key="a",
                       request_features={"uh": ops.hash_bucket("u", 100)},
                       item_features={"ah": ops.hash_bucket("a", 100)},
                       pair_features={"x": ops.cross("h", "a", buckets=1000),
                                      "y": ops.cross(ops.fill_null("q", ""), "c", buckets=1000)},
                       sparse=["uh", "ah", "x", "y"])
    torch.manual_seed(0)
    m = WideAndDeep(0, spec.sparse, embedding_dim=4, deep_mlp=[4], store=StoreConfig(cache_rows=100))
    for store in m.stores().values():  # rows for every bucket: serving reads unseen ids as zeros
        store.lookup(np.arange(1000), requires_grad=False)
    entries = [{"request": {"u": 1, "h": [1, 2], "q": "hi"}, "items": [{"a": 3, "c": "z"}, {"a": 4, "c": "y"}]},
               {"request": {"u": 2, "h": [], "q": None}, "items": [{"a": 3, "c": "z"}]}]
    on, off = Scorer(m, spec).score_batch(entries), Scorer(m, spec, dedup=False).score_batch(entries)
    for a, b in zip(on, off):
        np.testing.assert_allclose(a, b, atol=SCORE_ATOL, rtol=0)
    assert on[0][0] != on[1][0]  # same item, different request-side crosses


def test_export_fits_categorify_once_over_the_training_sample(tmp_path) -> None:
    from fbrapids import ops
    from fbrapids.serving import ServingSpec
    from fbrapids.trainers import WideAndDeep

    spec = ServingSpec(schema={"u": "int64", "city": "str", "a": "int64"}, request_columns=["u", "city"],
                       item_columns=["a"], item_key="a", request_features={"city_c": ops.categorify("city")},
                       sparse=["city_c", "a"])
    train = pd.DataFrame({"u": [1, 2, 3, 4], "city": pd.Series(["x", "y", "y", "z"], dtype="str"), "a": [1, 2, 3, 4]})
    kwargs = dict(dense_dim=0, sparse_features=["city_c", "a"], embedding_dim=4, deep_mlp=[4],
                  store=StoreConfig(cache_rows=64))
    model = WideAndDeep(**kwargs)
    with pytest.raises(ValueError, match=r"\['city_c'\] use categorify; pass sample="):
        export_model(tmp_path / "e1", model, spec, kwargs)
    export_model(tmp_path / "e2", model, spec, kwargs, sample=train)
    served = load_scorer(tmp_path / "e2")
    assert "state=" in str(served.spec.request_features["city_c"])  # the fitted vocabulary travels as data
    # the request's city is looked up in the training vocabulary, not re-fitted on the request
    fitted = train.fbx.extract(city_c=served.spec.request_features["city_c"])["city_c"].tolist()
    got = served.spec.request_features["city_c"]
    one = pd.DataFrame({"city": pd.Series(["z"], dtype="str")}).fbx.extract(c=got)["c"].tolist()
    assert one == [fitted[3]] and fitted[3] != fitted[0]
    assert served.score({"u": 9, "city": "z"}, [{"a": 1}]).shape == (1,)


def test_score_tolerance_is_the_documented_one() -> None:
    """The bound every serving test holds scores to is the one docs/ams-and-serving.md promises."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "ams-and-serving.md").read_text()
    promised = float(__import__("re").search(r"within ([0-9.e-]+) \(`SCORE_ATOL`", doc).group(1))
    assert promised == SCORE_ATOL


def test_score_each_answers_bad_requests_without_scoring_the_batch_per_request(trained, monkeypatch) -> None:
    """One bad request in a batch used to have every request scored again alone
    (1,024 requests: 196 s).  Now the request an error names is answered with it and the rest
    scored again together: a few passes (counted), the good scores those of scoring alone."""
    import fbrapids.serving.scorer as scorer_module
    from fbrapids.serving.scorer import MAX_BATCH_RETRIES

    model, spec, _, (users, ads, _) = trained
    s = Scorer(model, spec, chunk_items=10_000)
    entries = [dict(zip(("request", "items"), request_records(users, ads, 3, seed=k))) for k in range(40)]
    entries[39] = {**entries[39], "items": [dict(entries[39]["items"][0], price="abc")]}
    entries[5] = {**entries[5], "request": dict(entries[5]["request"], age=3.4e38)}  # the network overflows
    slices = s.stats["slices"]
    out = s.score_each(entries)
    assert str(out[39]) == "request 39 item 0: column 'price' must be a number, got 'abc'"
    assert str(out[5]).startswith("request 5 item 0: model input 'age'")
    assert s.stats["batch_retries"] == 2 and s.stats["slices"] - slices == 1  # one scoring pass succeeded
    alone = Scorer(model, spec)
    for i in (0, 6, 38):
        np.testing.assert_allclose(out[i], alone.score(**entries[i]), atol=SCORE_ATOL, rtol=0)
    # many bad records (once, 9 bad requests of 1,024 were one 400 naming a good one): after
    # the first failure every other request is checked at once, each bad one answered with its
    # own error and the good ones scored together, in one more pass
    many = [{**e, "items": [dict(e["items"][0], price="abc")]} if k % 2 else e for k, e in enumerate(entries[6:38])]
    before = s.stats["batch_retries"]
    out = s.score_each(many)
    assert s.stats["batch_retries"] - before == 1
    for k, o in enumerate(out):
        if k % 2:
            assert str(o) == f"request {k} item 0: column 'price' must be a number, got 'abc'"
        else:
            np.testing.assert_allclose(o, alone.score(**many[k]), atol=SCORE_ATOL, rtol=0)
    # past MAX_NAMED_ERRORS bad requests the others are answered in a line (the answer is bounded)
    monkeypatch.setattr(scorer_module, "MAX_NAMED_ERRORS", 4)
    out = s.score_each(many)
    full = [o for o in out[1::2] if "must be a number" in str(o)]
    assert len(full) == 4 and all("details are given for the first 4 bad requests" in str(o)
                                  for o in out[1::2] if o not in full)
    # errors only scoring finds (the model overflows) cost a pass each: bounded, every request answered
    overflow = [{**e, "request": dict(e["request"], age=3.4e38)} if k % 2 else e for k, e in enumerate(entries[6:30])]
    before = s.stats["batch_retries"]
    out = s.score_each(overflow)
    assert s.stats["batch_retries"] - before == MAX_BATCH_RETRIES
    assert all(isinstance(o, ValueError) for o in out[1::2])
    unscored = [o for o in out if isinstance(o, ValueError) and "not scored" in str(o)]
    assert unscored and all(isinstance(o, np.ndarray) or isinstance(o, ValueError) for o in out)


@pytest.mark.parametrize("every", [4, 5])  # 16 steps: a divisor of them, and not
def test_the_final_checkpoint_is_the_calibrated_model_served(training_side, tmp_path, every: int) -> None:
    """``fit`` with checkpoints every ``every`` steps: the checkpoint its root's ``latest``
    names (what ``fbrapids export`` and an export of the run read) holds the calibration the
    run fitted after its last step, also when a periodic checkpoint fell on that step; the
    export of it scores as the run's own model predicts offline (the training side; ids it
    never trained on read as zeros, as served), within the served-score bound.  A checkpoint
    of the last step written before the fit (a run killed between its two writes) is
    calibrated on resume, to the same shift."""
    from fbrapids.serving.example import example_catalogue, example_model_kwargs, example_spec, training_frame
    from fbrapids.trainers import WideAndDeep, load_checkpoint
    from fbrapids.trainers.calibration import HeldBack
    from fbrapids.trainers.checkpoint.directory import checkpoints, latest_checkpoint
    from fbrapids.trainers.checkpoint.model_state import save_checkpoint
    from fbrapids.trainers.run_identity import RUN_KEY

    spec, kwargs = example_spec(), example_model_kwargs(embedding_dim=4, deep_mlp=(8,))
    users, ads = example_catalogue(200, 400, seed=1)
    frame = training_frame(users, ads, rows=2048, seed=1).fbx.extract(**spec.features)

    def stream():
        return frame.fbx.stream(label="click", dense=spec.dense, sparse=spec.sparse, batch_size=128)

    def fresh() -> WideAndDeep:
        torch.manual_seed(0)
        return WideAndDeep(**kwargs)

    root = tmp_path / "checkpoints"
    model = fresh()
    res = fit(model, stream(), checkpoint_dir=root, checkpoint_every=every, progress=False)
    assert res.steps == 16 and res.calibration is not None and res.calibration[1] != 0.0
    final = latest_checkpoint(root)
    assert final == res.checkpoints[-1] == checkpoints(root)[0] and final.name == "step-0000000016"
    assert len(res.checkpoints) == len(set(res.checkpoints)) == 16 // every + (16 % every != 0)
    served = fresh()
    load_checkpoint(served, None, root)  # the root: the checkpoint `latest` names, as `fbrapids export` reads it
    assert torch.equal(served.calibration, model.calibration)  # the run's, as fitted after the last step
    export_model(tmp_path / "exp", served.eval(), spec, kwargs)
    scorer = load_scorer(tmp_path / "exp")
    assert torch.equal(scorer.model.calibration, model.calibration)
    for store in model.stores().values():  # ids it never trained on read zeros, as served (docs/models.md)
        store.read_only = True
    req, items = request_records(users, ads, 100, seed=3)
    np.testing.assert_allclose(scorer.score(req, items), training_side(model, spec, req, items), atol=SCORE_ATOL,
                               rtol=0)
    if every != 4:
        return
    # the last step's checkpoint written before the fit (no shift, the held batches kept): a resume fits it
    held, stale = HeldBack(), fresh()
    load_checkpoint(stale, None, final, held)
    stale.set_calibration(1.0, 0.0)
    run = json.loads((final / "meta.json").read_text())[RUN_KEY]
    save_checkpoint(stale, None, root, 16, held=held, run=run)
    again = fresh()
    res2 = fit(again, stream(), checkpoint_dir=root, checkpoint_every=every, progress=False)
    assert res2.resumed_from == final and res2.losses == [] and res2.calibration == res.calibration
    reread = fresh()
    load_checkpoint(reread, None, root)
    assert torch.equal(reread.calibration, model.calibration)
