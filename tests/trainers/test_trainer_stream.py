"""stream(): Arrow list columns, raw 64-bit ids, bad input, seeded shuffle, dask partitions
(one empty) on a real LocalCluster, and the background prefetch thread."""

from __future__ import annotations

import threading
import time

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import torch

from fbrapids.trainers import StoreConfig, TieredEmbeddingStore, stream

from _trainer_helpers import LIST, ctr_frame

SPARSE = ["ad", "toks"]


def _frame(rows: int, start: int = 0) -> pd.DataFrame:
    df = ctr_frame(rows, seed=start)
    df.index = pd.RangeIndex(start, start + rows)
    return df


def test_list_and_scalar_columns_feed_embedding_bag() -> None:
    df = _frame(50)
    batches = list(stream(df, label="click", dense=["d0", "d1"], sparse=SPARSE, batch_size=16))
    assert [len(b) for b in batches] == [16, 16, 16, 2]
    b = batches[1]
    values, offsets = b.sparse["toks"]
    assert values.dtype == torch.int64 and offsets.dtype == torch.int64 and len(offsets) == 16
    rows = df.iloc[16:32]
    expect = [list(x) for x in rows["toks"]]
    ends = torch.cat([offsets[1:], torch.tensor([len(values)])])
    assert [values[s:e].tolist() for s, e in zip(offsets.tolist(), ends.tolist())] == expect
    # as nn.EmbeddingBag takes them: values index a small table after mapping ids to rows
    table = torch.nn.EmbeddingBag(1000, 3, mode="sum")
    idx = torch.remainder(values, 1000)
    pooled = table(idx, offsets)
    manual = torch.stack([table.weight[idx[s:e]].sum(0) for s, e in zip(offsets.tolist(), ends.tolist())])
    assert torch.allclose(pooled, manual, atol=1e-6)
    assert torch.equal(b.dense, torch.tensor(rows[["d0", "d1"]].to_numpy(np.float32)))
    assert b.label.tolist() == rows["click"].astype(float).tolist()


def test_ids_above_2_63_and_negative_ids_end_to_end() -> None:
    df = _frame(64)
    assert (df["ad"] > np.uint64(2**63)).any()
    b = next(iter(stream(df, label="click", sparse=SPARSE, batch_size=64)))
    ad_vals = b.sparse["ad"][0]
    assert np.array_equal(ad_vals.numpy().view(np.uint64), df["ad"].to_numpy())  # same 64 bits
    store = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=256))
    store.lookup(ad_vals, requires_grad=False)
    store.end_step()
    big = df["ad"].to_numpy()[df["ad"].to_numpy() > np.uint64(2**63)]
    assert (np.abs(store.weights(big)).sum(1) > 0).all()  # admitted under their raw uint64 ids
    neg = b.sparse["toks"][0]
    assert (neg < 0).any()
    store.lookup(neg, requires_grad=False)
    assert set(store.state()[0].tolist()) >= set(neg.numpy().view(np.uint64).tolist())


def test_nan_in_dense_is_an_error_naming_the_column_or_zero_with_a_count() -> None:
    df = _frame(40)
    df.loc[[3, 9], "d1"] = np.nan
    df.loc[12, "d1"] = np.inf
    with pytest.raises(ValueError, match=r"dense feature 'd1': 3 NaN/inf/null values.*first at row 3"):
        list(stream(df, label="click", dense=["d0", "d1"], sparse=SPARSE, batch_size=8))
    s = stream(df, label="click", dense=["d0", "d1"], sparse=SPARSE, batch_size=8, nan="zero")
    dense = torch.cat([b.dense for b in s])
    assert s.stats["nan_replaced"] == 3 and torch.isfinite(dense).all() and dense[3, 1] == 0


def test_null_ids_and_wrong_types_are_clear_errors() -> None:
    df = _frame(10)
    df["ad2"] = pd.array([1, None] + [3] * 8, dtype="Int64")
    with pytest.raises(ValueError, match=r"sparse feature 'ad2': 1 null ids.*first at row 1"):
        list(stream(df, label="click", sparse=["ad2"], batch_size=4))
    df["s"] = "x"
    with pytest.raises(TypeError, match="sparse feature 's'"):
        list(stream(df, label="click", sparse=["s"], batch_size=4))
    with pytest.raises(KeyError, match="nope"):
        stream(df, label="click", sparse=["nope"], batch_size=4)


def test_null_lists_are_empty_bags() -> None:
    df = pd.DataFrame({"click": [0, 1, 0], "l": pd.Series([[1], None, [2, 3]], dtype=LIST)})
    b = next(iter(stream(df, label="click", sparse=["l"], batch_size=3)))
    assert b.sparse["l"][0].tolist() == [1, 2, 3] and b.sparse["l"][1].tolist() == [0, 1, 1]


def test_buffer_shuffle_is_seeded_keeps_every_row_and_ignores_partitioning() -> None:
    """The shuffle buffer (fbrapids.trainers.shuffle): the same order for the same seed however
    the rows are partitioned, every row once, the first rows drawn from the first unit only
    (training starts before the rest arrives), at most capacity + one unit rows held."""
    df = _frame(100)
    df["rowid"] = np.arange(100)

    def order(seed: int, source=df, buffer: int = 30) -> list[int]:
        s = stream(source, label="click", dense=["rowid"], sparse=SPARSE, batch_size=10, shuffle_buffer=buffer,
                   seed=seed)
        out = [int(x) for b in s for x in b.dense[:, 0].tolist()]
        assert s.shuffle_peak_rows <= 30 + 30  # the capacity and one unit (of 30 rows here)
        return out

    a, b, c = order(1), order(1), order(2)
    assert a == b and a != c and sorted(a) == list(range(100)) and a != list(range(100))
    assert max(a[:10]) < 30  # one unit in (30 rows), half of it out, before the next rows arrive
    assert order(1, [df.iloc[:7], df.iloc[7:61], df.iloc[61:]]) == a  # partitions do not move a row
    assert stream(df, label="click", sparse=SPARSE, shuffle_window=30).config.shuffle_buffer == 30  # the old name
    # the toks lists move with their rows
    s = stream(df, label="click", dense=["rowid"], sparse=SPARSE, batch_size=100, shuffle_buffer=100, seed=3)
    bt = next(iter(s))
    vals, offs = bt.sparse["toks"]
    ends = torch.cat([offs[1:], torch.tensor([len(vals)])])
    for r, s_, e in zip(bt.dense[:, 0].long().tolist(), offs.tolist(), ends.tolist()):
        assert vals[s_:e].tolist() == list(df["toks"].iloc[r])


def _parts(sizes: list[int]) -> list[pd.DataFrame]:
    out, start = [], 0
    for n in sizes:
        out.append(_frame(n, start) if n else _frame(1, start).iloc[:0])
        start += max(n, 1)
    return out


def test_batches_carry_across_partitions_and_empty_ones_are_skipped() -> None:
    parts = _parts([5, 0, 7, 0])
    s = stream(parts, label="click", dense=["d0"], sparse=SPARSE, batch_size=4)
    assert [len(b) for b in s] == [4, 4, 4]
    assert s.stats == {"partitions": 4, "empty_partitions": 2, "rows": 12, "batches": 3, "nan_replaced": 0}
    labels = torch.cat([b.label for b in s]).tolist()
    assert labels == pd.concat(parts)["click"].astype(float).tolist()


def _dask_frame(sizes: list[int]) -> dd.DataFrame:
    parts = _parts(sizes)
    return dd.from_map(lambda i: parts[i], list(range(len(parts))), meta=parts[0].iloc[:0], enforce_metadata=False)


def test_stream_over_dask_partitions_on_a_local_cluster_with_processes() -> None:
    distributed = pytest.importorskip("distributed")
    sizes = [30, 0, 25, 41]
    ddf = _dask_frame(sizes)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cl, \
            distributed.Client(cl):
        s = ddf.fbx.stream(label="click", dense=["d0", "d1"], sparse=SPARSE, batch_size=16, group="user")
        got = list(s)
    assert s.stats["partitions"] == 4 and s.stats["empty_partitions"] == 1 and s.stats["rows"] == 96
    assert [len(b) for b in got] == [16] * 6
    want = pd.concat(_parts(sizes))
    assert torch.cat([b.label for b in got]).tolist() == want["click"].astype(float).tolist()
    assert torch.cat([b.group for b in got]).tolist() == want["user"].tolist()
    again = list(stream(ddf, label="click", dense=["d0", "d1"], sparse=SPARSE, batch_size=16, persist=True))
    assert [torch.equal(a.dense, b.dense) for a, b in zip(got, again)] == [True] * 6


def test_background_thread_computes_the_next_partitions_while_a_batch_is_held() -> None:
    computed: list[str] = []

    def part(i: int) -> pd.DataFrame:
        computed.append(threading.current_thread().name)
        return _frame(20, 100 * i)

    ddf = dd.from_map(part, list(range(4)), meta=_frame(1).iloc[:0], enforce_metadata=False)
    computed.clear()
    with dask.config.set(scheduler="synchronous"):  # computed in the thread that calls compute()
        s = stream(ddf, label="click", sparse=SPARSE, batch_size=20, prefetch=2)
        it = iter(s)
        first = next(it)
        deadline = time.monotonic() + 60
        while s.stats["partitions"] < 3 and time.monotonic() < deadline:  # we hold batch 0 and wait
            time.sleep(0.01)
        # partitions 1 and 2 were computed while batch 0 was still being held: in the background
        assert s.stats["partitions"] >= 3 and s.stats["batches"] == 1
        assert set(computed) == {"fbrapids-stream-producer"} and threading.current_thread().name not in computed
        rest = list(it)
    assert len(first) == 20 and len(rest) == 3


def test_a_dask_stream_holds_at_most_prefetch_partitions_ahead() -> None:
    # 6 partitions of one batch each; batch 0 is held: the producer may compute at most
    # ``prefetch`` more (the pass window plus the queue), never the whole pass
    ddf = dd.from_map(lambda i: _frame(20, 100 * i), list(range(6)), meta=_frame(1).iloc[:0], enforce_metadata=False)
    with dask.config.set(scheduler="synchronous"):
        s = stream(ddf, label="click", sparse=SPARSE, batch_size=20, prefetch=2)
        it = iter(s)
        next(it)
        deadline = time.monotonic() + 60
        while s.stats["partitions"] < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # give a producer that ignored the bound time to run ahead
        assert s.stats["partitions"] == 1 + 2 and s.stats["batches"] == 1
        assert len(list(it)) == 5


def test_abandoned_iteration_stops_the_producer() -> None:
    s = stream(_parts([10] * 20), label="click", sparse=SPARSE, batch_size=5, prefetch=1)
    it = iter(s)
    next(it)
    it.close()
    assert s.stats["partitions"] < 20


def test_stream_over_a_filtered_broadcast_join_yields_every_partition():
    import dask
    import dask.dataframe as dd

    left = pd.DataFrame({"k": np.arange(400) % 10, "click": np.arange(400) % 2, "d0": np.linspace(0, 1, 400),
                         "ts": np.arange(400)})
    right = pd.DataFrame({"k": np.arange(10), "w": np.arange(10) * 2})
    frame = dd.merge(dd.from_pandas(left, npartitions=4), dd.from_pandas(right, npartitions=2), on="k",
                     how="inner", broadcast=True)
    frame = frame[frame["ts"] < 300]
    with dask.config.set(scheduler="threads"):
        batches = stream(frame, label="click", dense=["d0"], sparse=["w"], batch_size=64)
        rows = sum(len(b) for b in batches)
    assert rows == 300 and batches.stats["partitions"] == 4
