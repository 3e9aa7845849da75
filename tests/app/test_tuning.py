"""``RunConfig(tune=...)``: the recipe chosen on a validation day, the last training
day, from models trained on the days before it; then the refit on every training day.  The
rows it reads are counted against the demo's rows rebuilt with pandas (benchmarks/models.py's
independent reference frame): the held-out day is never among them."""

from __future__ import annotations

import pytest

from fbrapids.errors import WorkloadError
from fbrapids.workloads import RunConfig, Split


def test_tuning_reads_the_training_days_only_and_keeps_the_best_try(gen_dir) -> None:
    from benchmarks.models import day_masks, reference_frame
    from fbrapids.app.pipeline import run_pipeline
    from fbrapids.workloads.recipe import Recipe

    r = run_pipeline(gen_dir, model="logreg", batch_size=512, checkpoint=False, count_clean=False, progress=False,
                     recipe=Recipe(), tune={"weight_decay": [0.0, 1e-3]})
    t, masks = r.tuning, day_masks(reference_frame(gen_dir))
    v = t["validation"]
    assert v["validation_rows"] == masks["validation"].sum() > 0 and v["train_rows"] == masks["fit"].sum() > 0
    # every training row, no held-out one (the refit's rows count once per epoch)
    assert (v["train_rows"] + v["validation_rows"]) * r.recipe["epochs"] == r.rows["trained"]
    assert [(x["field"], x["value"]) for x in t["tried"]] == [("weight_decay", 0.0), ("weight_decay", 1e-3)]
    best = min(t["tried"], key=lambda x: x["shifted_logloss"])
    assert best["recipe"] == t["choice"] and {k: r.recipe[k] for k in t["choice"]} == t["choice"]
    assert all(x["shifted_logloss"] <= x["logloss"] + 1e-12 for x in t["tried"])  # the best shift: never worse
    assert r.recipe["source"].startswith("tuned on the validation day")
    assert r.held_rows > 0  # the default recipe's calibration holds rows back
    assert "tuned by validation logloss after a shift" in r.render()


def test_tuning_needs_a_split_by_time_and_a_grid_of_recipe_fields(gen_dir) -> None:
    from fbrapids.app.pipeline import run_pipeline
    from fbrapids.datasets.synthetic import as_workload

    w = as_workload(gen_dir).replace(split=Split("fraction", fraction=0.2))
    with pytest.raises(WorkloadError, match="tuning holds out the last training day, which needs a split by time"):
        run_pipeline(w, model="logreg", checkpoint=False, progress=False, tune=True)
    with pytest.raises(WorkloadError, match=r"RunConfig.tune: a tuning grid varies recipe fields .*not \['lr'\]"):
        RunConfig(tune={"lr": [0.1]})
    with pytest.raises(WorkloadError, match="RunConfig.tune must be a bool or a grid"):
        RunConfig(tune="yes")


def test_the_demo_recipes_are_the_tunings_choices() -> None:
    """``fbrapids.app.pipeline.RECIPES`` holds what scripts/tune_recipes.py's runs chose, at each
    size they ran (docs/models.md's recipe table renders the same JSON), in the fields a tuning
    varies; a field a record predates (the per-pass decay) is the recipe's default."""
    import json
    from pathlib import Path

    from fbrapids.app.pipeline import recipe_for
    from fbrapids.workloads.recipe import FIELDS, Recipe

    runs = json.loads((Path(__file__).resolve().parents[2] / "benchmarks/results/figures/tuning.json").read_text())
    for rows, models in runs["runs"].items():
        for model, run in models.items():
            ours, chosen = recipe_for(model, int(rows))[0], Recipe(**run["tuning"]["choice"])
            assert [getattr(ours, f) for f in FIELDS] == [getattr(chosen, f) for f in FIELDS], (rows, model)


def test_the_per_pass_decay_is_a_recipe_field_the_tuning_tries_and_the_run_trains_with(gen_dir, monkeypatch) -> None:
    """``Recipe.sparse_lr_decay``: a tuning's values of it train in groups of their own (a
    decay shared by side-by-side models would score both alike: with the same seed and
    batches, the same bits), and the refit's ``fit`` runs the chosen one.  ``Recipe.calibrate``
    False: the refit holds no row back (the first test's default recipe holds some)."""
    import importlib

    from fbrapids.app.pipeline import run_pipeline
    from fbrapids.errors import ArgumentError
    from fbrapids.workloads.recipe import Recipe

    fit_module = importlib.import_module("fbrapids.trainers.fit")  # the module (the package exports its fit)
    seen: list[float] = []
    real = fit_module.fit

    def spy(model, batches, cfg=None, **kw):  # the refit's decay as the pipeline hands it to fit
        seen.append(kw.get("sparse_lr_decay", 1.0))
        return real(model, batches, cfg, **kw)

    monkeypatch.setattr(fit_module, "fit", spy)
    r = run_pipeline(gen_dir, model="logreg", batch_size=512, checkpoint=False, count_clean=False, progress=False,
                     recipe=Recipe(epochs=2, first_order_lr=0.2, calibrate=False),
                     tune={"sparse_lr_decay": [1.0, 0.25]})
    a, b = r.tuning["tried"]
    assert (a["value"], b["value"]) == (1.0, 0.25) and a["shifted_logloss"] != b["shifted_logloss"]
    chosen = min(r.tuning["tried"], key=lambda x: x["shifted_logloss"])["value"]
    assert r.recipe["sparse_lr_decay"] == chosen and seen[-1] == chosen
    assert r.recipe["calibrate"] is False and r.held_rows == 0 and "no post-hoc calibration" in r.recipe["text"]
    with pytest.raises(ArgumentError, match="sparse_lr_decay"):
        Recipe(sparse_lr_decay=0.0)
