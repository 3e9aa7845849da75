"""stream() checks labels: 0/1 by default, soft labels in label_range, strings named."""
from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import fbrapids  # noqa: F401
from fbrapids.errors import LabelError


def _frame(labels) -> pd.DataFrame:
    n = len(labels)
    return pd.DataFrame({"click": labels, "d": np.arange(n, dtype=float), "ad": np.arange(n)})


def test_binary_labels_stream():
    batches = list(_frame([0, 1, 1, 0]).fbx.stream(label="click", dense=["d"], sparse=["ad"], batch_size=4))
    assert batches[0].label.tolist() == [0.0, 1.0, 1.0, 0.0]


def test_non_binary_label_names_column_partition_and_value():
    ddf = dd.from_pandas(_frame([0, 1, 0, 1, 1, 2, 0, 1]), npartitions=2)
    with pytest.raises(LabelError, match=r"label column 'click', partition 1: 1 value\(s\) not 0 or 1, first 2 at row 1"):
        list(ddf.fbx.stream(label="click", dense=["d"], sparse=["ad"], batch_size=4))


def test_soft_labels_need_label_range():
    soft = _frame([0.0, 0.25, 1.0, 0.5])
    with pytest.raises(LabelError, match="first 0.25 at row 1; pass label_range"):
        list(soft.fbx.stream(label="click", dense=["d"], sparse=["ad"], batch_size=4))
    got = list(soft.fbx.stream(label="click", dense=["d"], sparse=["ad"], batch_size=4, label_range=(0, 1)))
    assert got[0].label.tolist() == [0.0, 0.25, 1.0, 0.5]
    with pytest.raises(LabelError, match=r"outside label_range \[0, 1\], first 1.5 at row 0"):
        list(_frame([1.5, 0.0]).fbx.stream(label="click", dense=["d"], sparse=["ad"], batch_size=4, label_range=(0, 1)))
    with pytest.raises(LabelError, match="lo <= hi"):
        _frame([0]).fbx.stream(label="click", dense=["d"], sparse=["ad"], label_range=(1, 0))


@pytest.mark.parametrize("dtype", ["str", object])
def test_string_labels_name_the_column(dtype):
    df = _frame([0, 1]).assign(click=pd.Series(["no", "yes"], dtype=dtype))
    with pytest.raises(LabelError, match=r"label column 'click', partition 0 holds strings .*'no'"):
        list(df.fbx.stream(label="click", dense=["d"], sparse=["ad"], batch_size=4))


def test_progress_totals_for_fit_and_predict(capsys):
    """fit / predict bars carry a total (so tqdm shows the time left): exact for an eager
    frame, and for a dask stream from its second epoch on."""
    import torch

    from fbrapids.trainers import StoreConfig, fit
    from fbrapids.trainers.fit import expected_batches
    from fbrapids.trainers.models import DLRM

    df = _frame([0, 1] * 50)
    s = df.fbx.stream(label="click", dense=["d"], sparse=["ad"], batch_size=16)
    assert expected_batches(s) == 7 == len(list(s))
    lazy = dd.from_pandas(df, npartitions=3).fbx.stream(label="click", dense=["d"], sparse=["ad"], batch_size=16,
                                                         drop_last=True)
    assert expected_batches(lazy) is None
    assert len(list(lazy)) == 6 and expected_batches(lazy) == 6
    torch.manual_seed(0)
    model = DLRM(1, ["ad"], embedding_dim=4, bottom_mlp=[4], top_mlp=[4], store=StoreConfig(cache_rows=1024))
    fit(model, s, epochs=2, progress=True)
    err = capsys.readouterr().err
    assert "14/14" in err  # the bar's total: 2 epochs x 7 batches


def test_progress_bar_over_a_large_lazy_extract(capsys):
    from fbrapids import ops

    lazy = dd.from_pandas(_frame([0, 1] * 500), npartitions=4).fbx.extract(h=ops.hash_bucket("ad", 100))
    with fbrapids.progress() as bar:
        out = lazy.compute()
    assert len(out) == 1000 and bar.tasks_done >= 4  # at least one task per partition ran under the bar
    err = capsys.readouterr().err
    assert f"{bar.tasks_done}/{bar.tasks_done}" in err  # the bar's total was known up front and reached
