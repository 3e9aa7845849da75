"""Kernel outputs of 4 MiB and more live in retained mapped blocks (plain pages, reused
once freed): the values are those of the same plan run over slices small enough for
numpy's own buffers (the oracle), bit for bit, also when every block it reuses was filled
with garbage first; a block is reused only when nothing views it any more, and never kept
past the cap."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from fbrapids import ops
from fbrapids.kernels import host_empty, host_memory
from fbrapids.kernels.host_memory import LARGE_BYTES
from fbrapids.kernels.plan import build_plan
from fbrapids.kernels.runtime_host import HostPlan

ROWS = LARGE_BYTES // 8 + 10_000  # an int64 output past the threshold


def _frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    words = np.array(["a", "bb", "ccc", "dd d", ""], dtype=object)
    text = pd.Series(words[rng.integers(0, len(words), n)] + " " + words[rng.integers(0, len(words), n)], dtype="str")
    ids = pd.Series(rng.integers(-2**62, 2**62, n), dtype="int64")
    return pd.DataFrame({"u": ids, "t": text})


def _plan():
    toks = ops.split("t", " ", buckets=1 << 18)
    return build_plan({"h": ops.hash_bucket("u", 1 << 20), "x": ops.cross("u", toks, buckets=1 << 20), "k": toks},
                      {"u": "i64", "t": "str"})


def _poison_blocks(sizes: list[int]) -> None:
    """Leave kept blocks of these sizes (and their neighbours) full of 0xAB bytes."""
    held = [host_memory.empty(n, np.uint8) for n in sizes for n in (n, n * 9 // 10, n * 11 // 10)]
    for a in held:
        a.fill(0xAB)
    del held, a


@pytest.mark.parametrize("poisoned", [False, True])
def test_large_outputs_match_the_same_plan_over_small_slices(poisoned: bool) -> None:
    frame = _frame(ROWS)
    plan = _plan()
    if poisoned:  # a first run's outputs, each filled with garbage, freed: the second run's blocks
        first = HostPlan(plan).run(frame).columns
        sizes = [a.nbytes for c in first.values() for a in vars(c).values()
                 if isinstance(a, np.ndarray) and a.nbytes >= LARGE_BYTES]
        del first
        _poison_blocks(sizes)
    before = host_memory.stats()
    whole = HostPlan(plan).run(frame).columns
    h = whole["h"].data
    assert h.nbytes >= LARGE_BYTES and not h.flags.owndata and not isinstance(h.base, pa.Buffer)  # a retained block
    if poisoned:
        assert host_memory.stats()["reused"] > before["reused"]
    step = 100_000  # 800 kB outputs: numpy's buffers
    parts = [HostPlan(plan).run(frame.iloc[i:i + step].reset_index(drop=True)).columns for i in range(0, ROWS, step)]
    assert np.array_equal(h, np.concatenate([p["h"].data for p in parts]))
    for name in ("x", "k"):
        got = pa.chunked_array([c for c in [_arrow(whole[name])]]).combine_chunks()
        want = pa.concat_arrays([_arrow(p[name]) for p in parts])
        assert got.equals(want), name


def _arrow(col):
    from fbrapids.kernels.columns import to_arrow

    arr = to_arrow(col)
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def test_host_empty_is_writable_and_sized() -> None:
    small, large = host_empty(10, np.int32), host_empty(ROWS, np.float64)
    assert small.flags.owndata  # numpy's own
    assert not large.flags.owndata and large.shape == (ROWS,) and large.flags.writeable
    large[:] = 1.5
    assert float(large.sum()) == 1.5 * ROWS


def test_a_freed_block_is_reused_and_a_viewed_one_is_not() -> None:
    host_memory.release()
    a = host_memory.empty(ROWS, np.int64)
    a[:] = np.arange(ROWS)
    address = a.ctypes.data
    view, buffer = a[5:], pa.py_buffer(a)  # a view and an Arrow buffer keep the block in use
    del a
    before = host_memory.stats()
    b = host_memory.empty(ROWS, np.int64)
    after = host_memory.stats()
    assert b.ctypes.data != address and after["mapped"] == before["mapped"] + 1 and after["reused"] == before["reused"]
    b[:] = -1
    assert int(view[0]) == 5 and np.frombuffer(buffer, np.int64)[-1] == ROWS - 1  # untouched by b
    del view, buffer  # now the first block is free: kept for the next buffer of its class
    assert host_memory.stats()["kept_bytes"] == host_memory.size_class(ROWS * 8)
    c = host_memory.empty(ROWS - 1000, np.int64)  # a slightly smaller need: the same class
    assert c.ctypes.data == address and host_memory.stats()["reused"] == after["reused"] + 1
    assert host_memory.stats()["kept_bytes"] == 0


def test_nothing_is_kept_past_the_cap(monkeypatch) -> None:
    host_memory.release()
    monkeypatch.setenv(host_memory.ENV_CACHE_BYTES, str(LARGE_BYTES * 3))
    before = host_memory.stats()
    held = [host_memory.empty(LARGE_BYTES, np.uint8) for _ in range(5)]
    addresses = [a.ctypes.data for a in held]
    while held:
        held.pop(0)  # freed in order: the last three freed are kept, the first two unmapped
    after = host_memory.stats()
    assert after["kept_bytes"] == LARGE_BYTES * 3 and after["kept_blocks"] == 3
    assert after["dropped"] == before["dropped"] + 2
    again = [host_memory.empty(LARGE_BYTES, np.uint8) for _ in range(3)]
    assert sorted(a.ctypes.data for a in again) == sorted(addresses[2:])
    del again
    monkeypatch.setenv(host_memory.ENV_CACHE_BYTES, "0")
    host_memory.release()
    before = host_memory.stats()
    host_memory.empty(LARGE_BYTES, np.uint8)  # freed at once: over the cap of 0, dropped
    assert host_memory.stats()["kept_bytes"] == 0 and host_memory.stats()["dropped"] == before["dropped"] + 1


def test_arrow_buffer_is_aligned_and_reuses_blocks() -> None:
    host_memory.release()
    small = host_memory.arrow_buffer(100)
    assert small.size == 100 and small.is_mutable
    big = host_memory.arrow_buffer(LARGE_BYTES + 1)
    address = big.address
    assert big.size == LARGE_BYTES + 1 and big.is_mutable and address % 64 == 0
    del big
    assert host_memory.arrow_buffer(LARGE_BYTES + 100).address == address


def _worker_cap() -> int:
    from fbrapids.kernels import host_memory as hm

    return hm.default_cap()


def test_a_dask_worker_keeps_an_eighth_of_its_memory_limit() -> None:
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, memory_limit="2GiB",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        assert client.submit(_worker_cap, pure=False).result() == min(host_memory.DEFAULT_CACHE_BYTES, (2 << 30) // 8)
    assert host_memory.default_cap() == host_memory.DEFAULT_CACHE_BYTES  # this process is no worker


def test_a_malformed_cap_is_an_error_naming_the_variable(monkeypatch) -> None:
    from fbrapids.errors import FbrapidsError

    for bad in ("2GB", "-1"):
        monkeypatch.setenv(host_memory.ENV_CACHE_BYTES, bad)
        with pytest.raises(FbrapidsError, match=host_memory.ENV_CACHE_BYTES):
            host_memory.empty(LARGE_BYTES, np.uint8)
    assert host_memory.empty(10, np.uint8).nbytes == 10  # small buffers never read it


def test_an_empty_cap_means_the_default(monkeypatch) -> None:
    """An empty ``$FBRAPIDS_HOST_CACHE_BYTES`` is unset (as an empty ``$FBRAPIDS_DICTIONARY``):
    the default cap, not an error at the first large output."""
    for empty in ("", "  "):
        monkeypatch.setenv(host_memory.ENV_CACHE_BYTES, empty)
        assert host_memory._BLOCKS.cap() == host_memory.default_cap() == host_memory.DEFAULT_CACHE_BYTES
        assert host_memory.empty(LARGE_BYTES, np.uint8).nbytes == LARGE_BYTES


def test_a_block_freed_while_the_lock_is_held_is_filed_when_it_is_let_go() -> None:
    """A finalizer can run inside any frame, also one holding the lock (the garbage collector
    runs on an allocation): giving a block back then must neither wait (a deadlock) nor be lost."""
    host_memory.release()
    a = host_memory.empty(LARGE_BYTES, np.uint8)
    blocks = host_memory._BLOCKS
    with blocks.lock:  # as inside take(), when a collection frees an array
        del a  # the finalizer runs here, in this thread: it must return at once
        assert len(blocks.returned) == 1 and blocks.kept_bytes == 0
    blocks.file()
    assert host_memory.stats()["kept_bytes"] == LARGE_BYTES and not blocks.returned
