"""Device batches: TensorColumns cut batches exactly like the host Columns (checked on the
CPU with torch tensors), and cudf partitions become them through DLPack (gpu)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

from fbrapids.trainers.batch import Columns
from fbrapids.trainers.device_batch import TensorColumns, device_columns

LIST = pd.ArrowDtype(pa.list_(pa.int64()))


def frame(n: int = 50, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    toks = [list(rng.integers(-5, 2**40, rng.integers(0, 4))) for _ in range(n)]
    return pd.DataFrame({"y": rng.integers(0, 2, n), "d0": rng.random(n), "d1": rng.integers(0, 9, n),
                         "ad": pd.Series(rng.integers(0, 2**63, n).astype(np.uint64) * np.uint64(3), dtype="uint64"),
                         "toks": pd.Series(toks, dtype=LIST), "u": rng.integers(0, 7, n)})


def as_tensors(c: Columns) -> TensorColumns:
    def t(a: np.ndarray) -> torch.Tensor:  # a read-only column (an arrow buffer's view) copied, not shared
        return torch.from_numpy(np.require(a, requirements="W"))

    return TensorColumns(t(c.dense), t(c.label), {k: (t(v), t(o)) for k, (v, o) in c.sparse.items()}, t(c.group))


def same(a: Columns, b: TensorColumns) -> None:
    assert np.array_equal(a.dense, b.dense.numpy()) and np.array_equal(a.label, b.label.numpy())
    assert np.array_equal(a.group, b.group.numpy())
    for k, (v, o) in a.sparse.items():
        assert np.array_equal(v, b.sparse[k][0].numpy()) and np.array_equal(o, b.sparse[k][1].numpy()), k


def test_tensor_columns_slice_take_concat_like_the_host_columns() -> None:
    kw = dict(label="y", dense=["d0", "d1"], sparse=["ad", "toks"], group="u")
    a, b = Columns.from_frame(frame(50, 0), **kw), Columns.from_frame(frame(30, 1), **kw)
    ta, tb = as_tensors(a), as_tensors(b)
    same(Columns.concat([a, b]), TensorColumns.concat([ta, tb]))
    same(a.slice(7, 31), ta.slice(7, 31))
    idx = np.random.default_rng(2).permutation(50)
    same(a.take(idx), ta.take(idx))
    both = Columns.concat([a, b]).slice(10, 70).take(idx)
    same(both, TensorColumns.concat([ta, tb]).slice(10, 70).take(idx))
    bt = TensorColumns.concat([ta, tb]).slice(0, 16).to_batch()
    hb = Columns.concat([a, b]).slice(0, 16).to_batch()
    assert torch.equal(bt.sparse["toks"][1], hb.sparse["toks"][1]) and torch.equal(bt.dense, hb.dense)


def test_tensor_columns_gather_like_the_host_columns() -> None:
    """The shuffle buffer's gather: rows of several runs, in any order, as the host gather's."""
    kw = dict(label="y", dense=["d0", "d1"], sparse=["ad", "toks"], group="u")
    parts = [Columns.from_frame(frame(n, s), **kw).slice(2, n) for n, s in ((50, 0), (9, 1), (30, 2))]
    rng = np.random.default_rng(4)
    pos = rng.permutation(sum(len(p) for p in parts))[:40]
    starts = np.cumsum([0] + [len(p) for p in parts])
    which = np.searchsorted(starts, pos, side="right") - 1
    rows = pos - starts[which]
    host = Columns.gather(parts, which, rows)
    same(Columns.concat(parts).take(pos), TensorColumns.gather([as_tensors(p) for p in parts], which, rows))
    same(host, TensorColumns.gather([as_tensors(p) for p in parts], which, rows))


@pytest.mark.gpu
def test_cudf_partition_to_device_columns_equals_the_host_path() -> None:
    import cudf

    df = frame(200, 3)
    df.loc[20, "d0"] = np.nan  # inside the slice: replaced under nan="zero", an error otherwise
    gdf = cudf.from_pandas(df).iloc[13:170]  # a sliced frame: list offsets not starting at 0
    host = Columns.from_frame(df.iloc[13:170], "y", ["d0", "d1"], ["ad", "toks"], nan="zero")
    dev = device_columns(gdf, "y", ["d0", "d1"], ["ad", "toks"], nan="zero")
    assert dev.dense.is_cuda and dev.sparse["toks"][0].is_cuda
    for k, (v, o) in host.sparse.items():
        assert np.array_equal(v, dev.sparse[k][0].cpu().numpy()) and np.array_equal(o, dev.sparse[k][1].cpu().numpy())
    assert np.array_equal(host.dense, dev.dense.cpu().numpy()) and dev.nan_replaced == host.nan_replaced
    with pytest.raises(ValueError, match="d0"):
        device_columns(cudf.from_pandas(df), "y", ["d0"], [], nan="error")


class _Recorder:
    """The stream calls of TensorColumns.wait, recorded (CPU tensors have no CUDA stream),
    on a machine where torch allocates through RMM: ``rmm.allocators.torch.rmm_torch_allocator``
    is a CUDAPluggableAllocator of ``allocate`` / ``deallocate`` alone (the two symbols its
    ``_torch_allocator.so`` exports in rmm 26.10), so ``record_stream`` does nothing there: a
    reader that relies on it is recorded as having protected nothing."""

    allocator = "rmm.allocators.torch.rmm_torch_allocator"

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.passed: set[int] = set()  # the events the consumer's stream has passed

    def current(self, device):
        return "consumer"

    def wait_event(self, stream, event):
        self.calls.append(("wait", stream, event))

    def copy(self, stream, tensor):
        self.calls.append(("copy", stream, tensor.data_ptr()))
        return tensor.clone()

    def record_event(self, stream):
        event = len(self.calls)
        self.calls.append(("event", stream, event))
        return event

    def done(self, event):
        return event in self.passed

    def record_stream(self, tensor, stream):  # under RMM's allocator: a no-op
        self.calls.append(("record_stream: nothing under " + self.allocator, stream, tensor.data_ptr()))


@pytest.mark.parametrize("read", ["slice", "take", "to_batch", "concat"])
def test_every_reader_takes_the_columns_onto_its_stream_without_record_stream(monkeypatch, read) -> None:
    """P1: every reader waits for the side stream's event first, once.
    ``record_stream`` was the only thing keeping a side-stream batch's memory from being
    handed out again while the training kernels still read it, and under RMM's allocator it
    does nothing.  Now each built buffer is copied onto the consuming stream, and the built
    buffers (and what the build read) are held until an event after the copies has passed."""
    import gc
    import weakref

    from fbrapids.trainers import device_batch as DB

    rec = _Recorder()
    monkeypatch.setattr(DB, "STREAMS", rec)
    monkeypatch.setattr(DB, "KEEP", DB.KeepAlive())
    kw = dict(label="y", dense=["d0", "d1"], sparse=["ad", "toks"], group="u")
    cols = as_tensors(Columns.from_frame(frame(40, 4), **kw))
    cols.ready, cols.sources = "built-on-side", [torch.arange(3)]
    built = {t.data_ptr() for t in cols.tensors()}
    alive = [weakref.ref(t) for t in cols.tensors() + cols.sources]
    out = {"slice": lambda c: c.slice(0, 16), "take": lambda c: c.take(np.array([9, 3, 0, 5])),
           "to_batch": lambda c: c.to_batch(), "concat": lambda c: TensorColumns.concat([c, c])}[read](cols)
    assert rec.calls[0] == ("wait", "consumer", "built-on-side")
    assert not [c for c in rec.calls if c[0].startswith("record_stream")]
    copies = [c for c in rec.calls if c[0] == "copy"]
    assert {p for _, s, p in copies if s == "consumer"} == built and len(copies) == len(built)
    assert not built & {t.data_ptr() for t in cols.tensors()}  # every reader now reads the copies
    event = next(i for kind, s, i in rec.calls if kind == "event" and s == "consumer")
    assert rec.calls.index(("event", "consumer", event)) > rec.calls.index(copies[-1])  # after the copies
    if read in ("slice", "take"):  # made on the consumer's stream: nothing more to wait for
        n = len(rec.calls)
        out.slice(0, 2).to_batch()
        assert [c[0] for c in rec.calls[n:]] == []
    cols.slice(0, 3)  # waited once only
    assert sum(c[0] == "wait" for c in rec.calls) == 1
    del cols, out
    gc.collect()
    assert all(r() is not None for r in alive)  # held while the consumer's stream has not passed the copies
    rec.passed.add(event)
    assert DB.KEEP.release() == 0
    gc.collect()
    assert all(r() is None for r in alive)  # then let go


def test_sparse_kind_takes_both_list_dtypes() -> None:
    """D3: cudf keeps pandas' Arrow list dtype on columns made from pandas; only
    cudf.ListDtype was taken as a list (cudf's own class: checked in the conformance stage)."""
    from fbrapids.errors import ColumnTypeError
    from fbrapids.trainers.device_batch import sparse_kind

    assert sparse_kind(LIST) == "list" and sparse_kind(pd.ArrowDtype(pa.large_list(pa.int32()))) == "list"
    assert sparse_kind(np.dtype("int8")) == "ids"
    with pytest.raises(ColumnTypeError, match="'x'.*float64"):
        sparse_kind(np.dtype("float64"), "x")
