"""The held-out rows of each partition are computed with its training rows, once: every step
before the train / held-out split (reading, cleaning, joins, the meta-kernels) runs once for
both, and the held-out rows are kept for the evaluation up to a byte budget
(``fbrapids.runs.memory_budget.HELD_KEEP_BYTES``).  Past the budget, the partitions with
held-out rows are computed again in their own pass and the others skipped.  Either way the
evaluation sees the same rows in the same order: the same predictions, bit for bit.  Counted
in partitions and kernel launches; no timing."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fbrapids.app.pipeline import run_pipeline
from fbrapids.datasets.synthetic.generate import DAYS, TS0, generate
from fbrapids.runs import memory_budget
from fbrapids.workloads import RunConfig


def test_held_out_rows_kept_from_the_training_pass_predict_as_those_computed_again(tmp_path, monkeypatch):
    data = tmp_path / "data"
    generate(50_000, data, seed=3, row_group_rows=4_096)  # 4 partitions of 16,384 rows in time order: the first hold no held-out row
    cfg = RunConfig(progress=False, batch_size=512, checkpoint=False, count_clean=False)
    kept = run_pipeline(data, cfg.with_(work_dir=str(tmp_path / "kept")))
    monkeypatch.setattr(memory_budget, "HELD_KEEP_BYTES", 0)  # nothing kept: computed again
    again = run_pipeline(data, cfg.with_(work_dir=str(tmp_path / "again")))

    for key in ("pred", "label", "group"):  # the same rows in the same order, the same scores
        assert np.array_equal(kept.predictions[key], again.predictions[key]), key
    assert kept.metrics == again.metrics and kept.rows == again.rows
    # the oracle for the rows: pandas' count of the held-out day's impressions the pipeline keeps
    imp = pd.read_parquet(data / "impressions.parquet", columns=["instance_id", "slot", "ts"])
    joined = imp[(imp["slot"] >= 0) & imp["instance_id"].isin(pd.read_parquet(data / "basic.parquet")["instance_id"])]
    held = joined[joined["ts"] >= TS0 + (DAYS - 1) * 86400]
    assert len(kept.predictions["label"]) == kept.metrics["n"] == len(held) > 0

    trained, held_pass = kept.passes["training"], kept.passes["held-out"]
    assert held_pass["kept_partitions"] == trained["partitions"] >= 3 and held_pass["partitions"] == 0
    assert kept.kernel["partitions"] == trained["partitions"]  # each partition of the log extracted once
    # nothing kept: only the partitions with held-out rows are computed again, the rest skipped
    recomputed = again.passes["held-out"]["partitions"]
    assert 1 <= recomputed < trained["partitions"]
    assert again.kernel["partitions"] == trained["partitions"] + recomputed
    per_partition = kept.kernel["launches"] / kept.kernel["partitions"]
    assert again.kernel["launches"] == per_partition * again.kernel["partitions"]
