"""Choosing a training recipe on the data: a validation day, a small grid, then the refit.

``RunConfig(tune=True)`` (``fbrapids demo --tune``) runs this before :func:`fbrapids.app.pipeline.run_pipeline`
trains: the last training day is held out as a **validation day**, the model is trained on
the training days before it with each recipe of a small grid
(:data:`~fbrapids.workloads.recipe.DEFAULT_GRID`: the embedding tables' and the first-order
tables' learning rates, weight decay on the looked-up rows, dropout, the dense learning
rate, epochs) and scored on the validation day; the pipeline then trains on every training
day with the recipe chosen.  The held-out day is never read by the choice: the validation
rows are those before the held-out cutoff (:func:`fbrapids.app.pipeline.validation_frames`).

**The score** is the validation day's logloss after a shift (:func:`shifted_logloss`: the
logloss once the logit shift that fits the validation day best is applied, as the run's
calibration applies one): a proper score of the ranking and of how confident the
predictions are, blind to an offset the calibration removes.

**The search** is one field at a time, in the grid's order: each value of a field with the
other fields at the best found so far, the best score kept (a learning rate whose best is
the grid's edge is tried further out, up to :data:`MAX_BEYOND` steps); the
recipes of a field train side by side from one extraction pass
(:func:`~fbrapids.trainers.side_by_side.fit_side_by_side`), each model initialised under the
run's seed, reading the same batches in the same order, so the comparison is paired.  A
field's values cost one model each: the default grid trains 11 models and up to 10 more past
its learning rates', weight decay's and epochs' edges (fewer for a model without first-order tables or an MLP:
:data:`fbrapids.app.pipeline.UNUSED_RECIPE_FIELDS`).
The models trained here are not calibrated (the criterion fits its own shift).

Example:
    >>> import tempfile
    >>> from fbrapids.datasets.synthetic.generate import generate
    >>> from fbrapids.app.pipeline import run_pipeline
    >>> d = tempfile.mkdtemp(); _ = generate(4000, d)  # doctest: +SKIP
    >>> r = run_pipeline(d, model="logreg", batch_size=256, progress=False, checkpoint=False,  # doctest: +SKIP
    ...                  tune={"first_order_lr": [0.05, 0.2]})
    >>> [t["value"] for t in r.tuning["tried"]], r.recipe["first_order_lr"] in (0.05, 0.2)  # doctest: +SKIP
    ([0.05, 0.2], True)
"""

from __future__ import annotations

import gc
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence, TypedDict

from fbrapids.workloads.recipe import DEFAULT_GRID, Recipe, RecipeValue, check_grid

if TYPE_CHECKING:
    import numpy.typing as npt

    from fbrapids.frames.backend import FrameLike
    from fbrapids.trainers.batch import Batch
    from fbrapids.trainers.models.base import CTRModel
    from fbrapids.trainers.sparse import StoreConfig
    from fbrapids.workloads import RunConfig

log = logging.getLogger(__name__)

#: what the choice minimises on the validation day: the logloss of the predictions shifted by the
#: logit shift that fits them best there (:func:`shifted_logloss`)
CRITERION = "shifted_logloss"
#: the fields whose grid is extended past an edge that wins (:func:`beyond_edge`), at most this many
#: steps: the learning rates and the weight decay both ways, by the ratio of the two values there (not
#: below a grid that starts at 0); epochs upwards, by their step
BEYOND_EDGE = ("dense_lr", "sparse_lr", "first_order_lr", "weight_decay", "epochs")
MAX_BEYOND = 2


class ValidationDay(TypedDict):
    """The validation day of a tuning: its first second and the rows on either side."""

    day_start: int
    validation_rows: int
    train_rows: int


class TuningSummary(TypedDict, total=False):
    """A tuning's JSON-ready record (:func:`tune_recipe`); empty where the run was not tuned."""

    criterion: str
    grid: dict[str, list[object]]  #: each field's values tried
    start: dict[str, RecipeValue]  #: the recipe the search started from
    choice: dict[str, Any]  #: the recipe chosen, as ``Recipe(**choice)`` rebuilds it (its fields' types vary)
    tried: list[dict[str, object]]  #: per model trained: the field, its value, the recipe, the validation metrics
    validation: ValidationDay
    seconds: float


@dataclass
class TuningData:
    """What a tuning trains and scores on, as the run makes it
    (:func:`fbrapids.app.pipeline.validation_frames` and the run's model and stream)."""

    train: FrameLike  #: the training days but the last, lazily
    validation: FrameLike  #: the last training day (the held-out day's rows dropped)
    day_start: int  #: the validation day's first second
    model: Callable[[Recipe, StoreConfig], CTRModel]  #: the run's model, built with a recipe over a store
    batches: Callable[[FrameLike, bool], Iterable[Batch]]  #: the run's stream over a frame (True: shuffled)


def tune_recipe(data: TuningData, cfg: RunConfig, start: Recipe, work: Path, unused: Sequence[str] = ()) -> TuningSummary:
    """The search of the module docstring from ``start`` over ``cfg.tune``'s grid (``True``:
    :data:`~fbrapids.workloads.recipe.DEFAULT_GRID`), less the ``unused`` fields; the models'
    stores under ``work / "tuning"`` (removed after).  Returns a JSON-ready record: ``grid``,
    ``start``, ``choice`` (recipes as dicts), ``tried`` (per model trained: the field, its
    value, the validation metrics), ``validation`` (the day and its rows), ``seconds``."""
    t0 = time.perf_counter()
    grid = {k: v for k, v in (DEFAULT_GRID if cfg.tune is True else check_grid(cfg.tune)).items() if k not in unused}
    if "first_order_lr" in grid and start.first_order_lr is None:  # its value, not "as the sparse one"
        start = start.with_(first_order_lr=start.first_order)
    best = start
    best_score: dict[str, float] | None = None
    tried: list[dict[str, object]] = []
    rows: dict[str, int] = {}
    for name, values in grid.items():
        todo, seen = list(values), set()
        for _ in range(1 + MAX_BEYOND):  # the field's values, then past its edge while the edge is best
            recipes = [best.with_(**{name: v}) for v in todo if v not in seen and
                       (best_score is None or v != getattr(best, name))]
            if best_score is None and start not in recipes:
                recipes.insert(0, start)  # the starting recipe's own score, once
            seen.update(todo)
            scores = _train_and_score(recipes, data, cfg, work / "tuning", rows)
            for r, m in zip(recipes, scores):
                tried.append({"field": name, "value": getattr(r, name), "recipe": r.as_dict(), **m})
            pool = ([(best, best_score)] if best_score is not None else []) + list(zip(recipes, scores))
            best, best_score = min(pool, key=lambda x: x[1][CRITERION])
            further = beyond_edge(name, sorted(v for v in seen if isinstance(v, (int, float))), getattr(best, name))
            if further is None:
                break
            todo = [further]
        log.info("tuning: %s -> %s (validation logloss after a shift %.4f)", name, getattr(best, name),
                 (best_score or {}).get(CRITERION, float("nan")))
    shutil.rmtree(work / "tuning", ignore_errors=True)
    return {"criterion": "validation logloss after a shift", "grid": {k: list(v) for k, v in grid.items()},
            "start": start.as_dict(), "choice": best.as_dict(), "tried": tried,
            "validation": {"day_start": data.day_start, "validation_rows": rows.get("validation", 0),
                           "train_rows": rows.get("train", 0)},
            "seconds": round(time.perf_counter() - t0, 1)}


def shifted_logloss(label: npt.ArrayLike, pred: npt.ArrayLike) -> float:
    """The logloss of ``pred`` after the shift of its logits that fits ``label`` best (the
    intercept-only logistic regression with the slope held at 1, as ``fit``'s calibration):
    a proper score of the ranking and the spread of the predictions, blind to an offset the
    run's calibration removes anyway.  A recipe that ranks a little better but predicts far
    too confidently (a second epoch on small data) scores worse here, as it does after the
    calibration.

    Example:
        >>> import numpy as np
        >>> y = np.array([0, 0, 1, 1]); p = np.array([0.6, 0.7, 0.8, 0.9])  # ranked right, all too high
        >>> round(shifted_logloss(y, p), 4) < round(float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))), 4)
        True
    """
    import numpy as np

    from fbrapids.trainers.calibration import intercept

    q = np.clip(np.asarray(pred, dtype=np.float64), 1e-12, 1 - 1e-12)
    y = np.asarray(label, dtype=np.float64)
    z = np.log(q) - np.log1p(-q)
    b = intercept(z, y)
    r = np.clip(1.0 / (1.0 + np.exp(-(z + b))), 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(r) + (1 - y) * np.log1p(-r)))


def beyond_edge(name: str, values: Sequence[float], best: float) -> float | None:
    """The next value of a field of :data:`BEYOND_EDGE` past the grid's edge when the best so
    far is that edge, else None: a grid whose edge wins says only that the best lies at or
    past it.  A learning rate goes on by the ratio of the two values at that edge, either way;
    epochs go up by their step.

    Example:
        >>> beyond_edge("sparse_lr", [0.02, 0.05, 0.1], 0.1), beyond_edge("sparse_lr", [0.02, 0.05, 0.1], 0.02)
        (0.2, 0.008)
        >>> beyond_edge("sparse_lr", [0.02, 0.05, 0.1], 0.05), beyond_edge("dropout", [0.0, 0.1], 0.1)
        (None, None)
        >>> beyond_edge("epochs", [1, 2], 2), beyond_edge("epochs", [1, 2], 1)
        (3, None)
        >>> beyond_edge("weight_decay", [0.0, 1e-5, 1e-4], 1e-4), beyond_edge("weight_decay", [0.0, 1e-5, 1e-4], 0.0)
        (0.001, None)
    """
    if name not in BEYOND_EDGE or len(values) < 2 or best not in (values[0], values[-1]):
        return None
    if best == values[0] and values[0] <= 0:  # nothing below a grid that starts at 0
        return None
    if name == "epochs":
        return int(best + values[-1] - values[-2]) if best == values[-1] else None
    ratio = values[-1] / values[-2] if best == values[-1] else values[1] / values[0]
    return float(f"{best * ratio if best == values[-1] else best / ratio:.6g}")


def _train_and_score(recipes: list[Recipe], data: TuningData, cfg: RunConfig, root: Path,
                     rows: dict[str, int]) -> list[dict[str, float]]:
    """Each recipe's model trained side by side on ``data.train`` (one group per value of epochs
    and per-pass decay: the passes a group's models share) and scored on ``data.validation``;
    ``rows``: the rows of each, counted once."""
    out: dict[int, dict[str, float]] = {}
    for passes in sorted({(r.epochs, r.sparse_lr_decay) for r in recipes}):
        group = [k for k, r in enumerate(recipes) if (r.epochs, r.sparse_lr_decay) == passes]
        for k, m in zip(group, _one_group([recipes[k] for k in group], *passes, data, cfg, root, rows)):
            out[k] = m
    return [out[k] for k in range(len(recipes))]


def _one_group(recipes: list[Recipe], epochs: int, sparse_lr_decay: float, data: TuningData, cfg: RunConfig,
               root: Path, rows: dict[str, int]) -> list[dict[str, float]]:
    import torch

    from fbrapids.trainers.device import place_model
    from fbrapids.trainers.fit import default_optimizer
    from fbrapids.trainers.metrics import all_metrics
    from fbrapids.trainers.side_by_side import fit_side_by_side, predict_side_by_side
    from fbrapids.trainers.sparse import StoreConfig

    shutil.rmtree(root, ignore_errors=True)
    models = []
    for k, r in enumerate(recipes):
        store = StoreConfig(cache_rows=cfg.cache_rows, host_rows=cfg.host_rows,
                            ssd_dir=str(root / f"model{k}") if cfg.host_rows is not None else None, seed=cfg.seed)
        torch.manual_seed(cfg.seed)  # every recipe's model starts from the same draw: a paired comparison
        models.append(data.model(r, store))
    for m in models:
        place_model(m, None)  # where they train: the dense optimizers are made for the parameters there
    optimizers = [default_optimizer([p for p in m.parameters() if p.requires_grad], r.dense_lr)
                  for m, r in zip(models, recipes)]
    counted = _FirstPassOrder(data.batches(data.train, True))
    fit_side_by_side(models, counted, epochs=epochs, optimizers=optimizers, progress=cfg.progress,
                     sparse_lr_decay=sparse_lr_decay)
    preds = predict_side_by_side(models, data.batches(data.validation, False), progress=cfg.progress)
    rows.setdefault("validation", len(preds[0]["label"]))
    rows.setdefault("train", counted.rows // epochs)
    scores = [{**{k: v for k, v in all_metrics(p["label"], p["pred"], p.get("group")).items() if k != "undefined"},
               CRITERION: shifted_logloss(p["label"], p["pred"])} for p in preds]
    del models, optimizers
    gc.collect()  # the stores' files released before the next group's
    return scores


class _FirstPassOrder:
    """The training stream counted (:class:`~fbrapids.trainers.side_by_side.CountedBatches`),
    every pass in the first pass's order: as ``fit`` reads a calibrated run's passes (the
    same batches held back from each), so a recipe of several epochs is scored as it trains."""

    def __init__(self, batches: Iterable[Batch]) -> None:
        from fbrapids.trainers.side_by_side import CountedBatches

        self.counted = CountedBatches(batches)

    @property
    def rows(self) -> int:
        return self.counted.rows

    def set_epoch(self, epoch: int) -> None:
        self.counted.set_epoch(0)

    def estimated_batches(self) -> int | None:
        return self.counted.estimated_batches()

    def expected_batches(self) -> int | None:
        return self.counted.expected_batches()

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.counted)


def tuning_lines(tuning: TuningSummary) -> list[str]:
    """The summary's lines of a tuning record (:func:`tune_recipe`): the validation day, each
    model tried with its validation logloss after a shift, AUC and logloss (``*``: the field's choice).

    Example:
        >>> r = Recipe()
        >>> rec = {"criterion": "validation logloss after a shift", "choice": r.as_dict(), "seconds": 3.0,
        ...        "validation": {"day_start": 86400, "validation_rows": 10, "train_rows": 0},
        ...        "tried": [{"field": "dropout", "value": 0.0, "auc": 0.7, "logloss": 0.3, "shifted_logloss": 0.29}]}
        >>> print("\\n".join(tuning_lines(rec)))
          tuned by validation logloss after a shift on 1970-01-02 (10 rows), trained on the days before it: 1 model(s) in 3 s
            dropout 0: logloss after a shift 0.2900  AUC 0.7000  logloss 0.3000 *
    """
    import datetime as dt

    v, choice = tuning["validation"], tuning["choice"]
    day = dt.datetime.fromtimestamp(v["day_start"], dt.timezone.utc).strftime("%Y-%m-%d")
    lines = [f"  tuned by {tuning['criterion']} on {day} ({v['validation_rows']:,} rows), trained on the days "
             f"before it: {len(tuning['tried'])} model(s) in {tuning['seconds']:.0f} s"]
    for t in tuning["tried"]:
        mark = " *" if choice.get(str(t["field"])) == t["value"] else ""
        lines.append(f"    {t['field']} {t['value']:g}: logloss after a shift {t[CRITERION]:.4f}  AUC {t['auc']:.4f}  "
                     f"logloss {t['logloss']:.4f}{mark}")
    return lines
