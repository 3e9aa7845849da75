"""Adding a model touches one file: a toy model, defined and registered in
``tests/project/_toy_model.py`` alone, is in every list of models and goes through fit, a
trial's arms, export and serving by its short name, as the built-in ones do.

References: the held-out AUC against scikit-learn's on the run's own predictions; the served
scores (the export loaded, scored through the model's split forward) against the training
code's (``fbx.extract``, ``fbx.stream``, ``model.predict``) on the same rows; the trial's arms
against the same model fed the candidates' values or not (equal at step 0, apart once trained).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

import fbrapids  # noqa: F401  (registers the .fbx accessor)
from fbrapids import ops
from tests.serving.conftest import training_side_scores

from _toy_model import ToyCTR

ROOT = Path(__file__).resolve().parents[2]
ROWS = 3000


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo trained on the toy (``fbrapids demo --model toy --export DIR``, in this process)."""
    from fbrapids.app.demo import run_demo

    base = tmp_path_factory.mktemp("toy")
    result = run_demo(rows=ROWS, data_dir=base / "data", model="toy", export=base / "export", batch_size=256,
                      progress=False)
    return result, base


def test_the_toy_is_in_every_list_of_models() -> None:
    import argparse

    from fbrapids.app.cli import build_parser
    from fbrapids.app.demo_distributed import DISTRIBUTED_MODELS
    from fbrapids.trainers.models import model_for
    from fbrapids.workloads import RunConfig
    from fbrapids.workloads.run_config import MODELS, ModelNames

    assert model_for("toy") is ToyCTR and RunConfig(model="toy").model == "toy"
    assert "toy" in MODELS and "toy" in ModelNames("exportable") and "toy" in DISTRIBUTED_MODELS
    sub = {a.dest: a for a in build_parser()._actions}["command"].choices
    for command in ("demo", "trial", "export"):
        model = {a.dest: a for a in sub[command]._actions}["model"]
        assert model.type("toy") == "toy"
        with pytest.raises(argparse.ArgumentTypeError, match="'toy'"):  # the refusal lists it
            model.type("nope")


def test_the_toy_fits_on_generated_data(demo) -> None:
    result, _ = demo
    assert result.model == "toy" and result.steps > 0
    p = result.predictions
    assert result.metrics["auc"] == pytest.approx(roc_auc_score(p["label"], p["pred"]), abs=1e-9)
    assert result.metrics["auc"] > 0.55  # it learned (the data's oracle AUC is ~0.8)


def _readme_body() -> dict:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- serve-demo:begin.*?-->\s*```bash\n(.*?)```", text, re.S).group(1)
    return json.loads(re.search(r"-d '(\{.*?\})'", block, re.S).group(1))


def test_the_toy_exports_and_serves_the_training_sides_scores(demo) -> None:
    from fbrapids.serving import load_scorer, supports_split
    from fbrapids.serving.scorer import SCORE_ATOL

    result, base = demo
    assert result.export == str(base / "export")
    scorer = load_scorer(base / "export")
    assert type(scorer.model) is ToyCTR and supports_split(scorer.model)  # served by its own split forward
    body = _readme_body()
    items = [{**body["items"][k % 2], "ad_id": 40 + k, "category": k % 7} for k in range(12)]
    served = scorer.score(body["request"], items)
    np.testing.assert_allclose(served, training_side_scores(scorer.model, scorer.spec, body["request"], items),
                               atol=SCORE_ATOL, rtol=0)
    assert len(np.unique(served)) > 1


def test_the_toys_arms_start_as_one_function() -> None:
    from fbrapids.app.pipeline import build_model
    from fbrapids.trainers.arms import baseline_view, zero_candidate_inputs
    from fbrapids.trainers.batch import Batch
    from fbrapids.trainers.side_by_side import fit_side_by_side
    from fbrapids.trainers.sparse import StoreConfig

    dense, sparse = ["d0", "dnew"], ["a", "b", "new"]
    torch.manual_seed(7)
    net = build_model("toy", 2, sparse, StoreConfig(cache_rows=256, seed=7), 4)
    assert isinstance(net, ToyCTR) and [m.out_features for m in net.mlp if hasattr(m, "out_features")] == [16, 1]
    assert zero_candidate_inputs(net, dense, sparse, ["dnew"], ["new"]) == ["mlp.0.weight[:, [1, 10, 11, 12, 13]]"]
    rng = np.random.default_rng(0)
    sp = {f: (torch.from_numpy(rng.integers(1, 50, 12)), torch.arange(0, 12, 2)) for f in sparse}
    batch = Batch(torch.from_numpy(rng.normal(size=(6, 2)).astype(np.float32)), torch.tensor([0., 1.] * 3), sp)
    base = baseline_view(batch, dense, ["dnew"], ["new"])

    def outputs():
        net.eval()
        with torch.no_grad():
            return net(batch), net(base)

    full, placebo = outputs()
    assert torch.equal(full, placebo)  # step 0: the candidates' inputs are ignored
    fit_side_by_side([net], [batch, batch], progress=False)
    full, placebo = outputs()
    assert not torch.equal(full, placebo)  # trained, the candidate arm reads them


def test_a_trial_trains_the_toys_arms(demo) -> None:
    from fbrapids.app.trials import trial

    _, base = demo
    r = trial(base / "data", {"slot_x_os": ops.cross("slot", "os")}, model="toy", seeds=1, n_boot=20,
              batch_size=256, count_clean=False, progress=False)
    assert r.extraction["models"] == 3  # baseline, candidate and A/A arm
    for m in ("auc", "gauc"):
        assert np.isfinite(r.delta[m]) and r.delta[m] == pytest.approx(r.candidate[m] - r.baseline[m])
        assert 0.5 < r.baseline[m] < 1 and 0.5 < r.candidate[m] < 1
