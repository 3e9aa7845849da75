"""The generated data (:mod:`fbrapids.datasets.synthetic.generate`, ``docs/workload.md``) as a declared
:class:`~fbrapids.workloads.Workload`: what ``fbrapids demo``, ``run_pipeline(data_dir)``
and ``trial(data_dir, ...)`` run on a generated folder.

Four parquet views: ``impressions`` (the log, sorted by ``instance_id``), ``users`` and
``ads`` (dictionaries, left-joined on ``user_id`` / ``ad_id``, misses filled with
defaults) and ``basic`` (precomputed features sorted like the log, inner-joined on
``instance_id`` after extraction, partition by partition).  The last of the
:data:`~fbrapids.datasets.synthetic.generate.DAYS` days is held out; GAUC groups by ``user_id``.

Example:
    >>> w = workload("/data/gen")
    >>> w.log.name, w.split.rule, w.label, w.group, len(w.sparse), len(w.dense)
    ('impressions', 'at', 'click', 'user_id', 26, 11)
    >>> w.model_inputs("din")[2]
    {'hist_cat': 'category'}
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fbrapids.workloads.dataset_registry import Dataset, register_dataset

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.kernels import Expr
    from fbrapids.workloads import Workload

LABEL = "click"
GROUP = "user_id"
TIME = "ts"
DENSE = [f"d{j}" for j in range(10)] + ["query_len"]
#: the features the demo's feature trials added (:func:`~fbrapids.datasets.synthetic.views.derived_features`)
DERIVED = ["qt_first_eq"]  # qt_overlap: no detectable effect beside it (docs/models.md)
# not "weekday" (extracted, but not a model input): the held-out last day's weekday is never a
# training day's, so its row is a fresh random one that shifts every held-out prediction and
# that no calibration fitted on the training days can see (docs/models.md)
SPARSE = [
    "user_id", "ad_id", "advertiser_id", "category", "slot", "hour", "gender_h", "city_h", "os_h",
    "geo_city_h", "age_b", "price_b", "query_tok_h", "query_bigram_h", "title_tok_h", "interest_h",
    "qxt_cross_h", "user_ad_h", "cat_city_h", "hour_cat_h", "b0", "b1", "b2", "b3", "b4",
    *DERIVED,
]
#: the behaviour sequence ``--model din`` attends over: the user's last 50 clicked
#: categories strictly before each impression, built from the log by ``history``
DIN_SEQUENCE = "hist_cat"
DIN_TARGET = "category"


def din_history() -> dict[str, Expr]:
    """The history feature DIN trains on (name -> expression).

    Example:
        >>> str(din_history()["hist_cat"])
        'history(user_id, ts, category, click, last_n=50)'
    """
    from fbrapids import ops

    return {DIN_SEQUENCE: ops.history("user_id", DIN_TARGET, "ts", last_n=50, events="click")}


def features() -> dict[str, Expr]:
    """The features the demo extracts: the workload's (docs/workload.md, section 5:
    :func:`fbrapids.datasets.synthetic.views.features`) and those its feature trials added
    (:data:`DERIVED`).

    Example:
        >>> len(features()), "qt_first_eq" in features()
        (21, True)
    """
    from fbrapids.datasets.synthetic import views as canonical

    derived = canonical.derived_features()
    return {**canonical.features(), **{name: derived[name] for name in DERIVED}}


def workload(data_dir: str | os.PathLike) -> Workload:
    """The generated data in ``data_dir`` as a :class:`~fbrapids.workloads.Workload` (module
    docstring)."""
    from fbrapids.datasets.synthetic import views as canonical
    from fbrapids.datasets.synthetic.generate import DAYS, TS0
    from fbrapids.workloads import Join, SequenceFeature, Split, View, Workload

    return Workload(
        name="generated", root=os.fspath(data_dir), label=LABEL, time=TIME, time_form="s", group=GROUP,
        views=(View("impressions", "impressions.parquet", clean=canonical.IMPRESSION_CLEAN, sorted_by="instance_id"),
               View("users", "users.parquet", clean={"fill": canonical.USER_FILL}),
               View("ads", "ads.parquet", clean={"fill": canonical.AD_FILL}),
               View("basic", "basic.parquet", sorted_by="instance_id")),
        joins=(Join("users", on="user_id"),
               Join("ads", on="ad_id", fill=canonical.JOIN_MISS_FILL),
               Join("basic", on="instance_id", how="inner", after_features=True)),
        split=Split("at", at=TS0 + (DAYS - 1) * 86400),
        features={**features()}, sparse=tuple(SPARSE), dense=tuple(DENSE),
        sequences={DIN_SEQUENCE: SequenceFeature(DIN_TARGET, din_history()[DIN_SEQUENCE])})


#: the generated data as a registered data set (its features, and its workload for a folder)
DATASET = register_dataset(Dataset("synthetic", features, workload))


def as_workload(data: Workload | str | os.PathLike) -> Workload:
    """``data`` itself when a :class:`~fbrapids.workloads.Workload`; a workload file (a
    ``.toml`` path) as :func:`~fbrapids.workloads.load_workload` reads it; a folder of
    generated data (a path) as its :func:`workload`.  Another file is a
    :class:`~fbrapids.errors.WorkloadError` saying what a path may be.

    Example:
        >>> as_workload("/data/gen").name
        'generated'
    """
    from pathlib import Path

    from fbrapids.errors import WorkloadError
    from fbrapids.workloads import Workload, load_workload

    if isinstance(data, Workload):
        return data
    if isinstance(data, (str, os.PathLike)):
        p = Path(data)
        if p.suffix.lower() == ".toml":
            return load_workload(p)
        if p.is_file():
            raise WorkloadError(f"{p} is a file: give a workload (load_workload(\"my.toml\"), or the .toml path "
                                "itself) or a folder of generated data")
        return workload(data)
    raise WorkloadError(f"expected a Workload or a folder of generated data, got {type(data).__name__} {data!r}")
