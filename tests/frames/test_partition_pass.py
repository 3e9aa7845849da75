import threading

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from fbrapids.errors import ArgumentError
from fbrapids.frames.partition_pass import KeptPartitions, iter_partitions


def test_a_pass_gives_each_partition_as_dask_computes_it():
    frame = pd.DataFrame({"k": [3, 1, 2, 3, 1, 2, 5], "v": range(7)})
    lazy = dd.from_pandas(frame, npartitions=3).shuffle(on="k", npartitions=2)  # partitions sharing upstream tasks
    stats: dict[str, int] = {}
    got = list(iter_partitions(lazy, window=1, stats=stats))
    assert stats["partitions"] == lazy.npartitions == len(got)
    for i, part in enumerate(got):  # (a shuffle's row order inside a partition differs from one compute to another)
        pd.testing.assert_frame_equal(part.sort_index(), lazy.get_partition(i).compute().sort_index())


def test_an_eager_frame_is_refused_naming_its_type():
    with pytest.raises(ArgumentError, match="needs a dask frame, got DataFrame"):
        next(iter_partitions(pd.DataFrame({"a": [1]})))


# ---- a frame computed beside another: the held-out rows of each partition with its training rows ----


class _Calls:
    """How often the upstream step ran for each partition (told by its first row's ``v``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count: dict[int, int] = {}

    def __dask_tokenize__(self) -> object:
        return ("calls", id(self))

    def step(self, part: pd.DataFrame) -> pd.DataFrame:
        if len(part):
            with self.lock:
                self.count[int(part["v"].iloc[0])] = self.count.get(int(part["v"].iloc[0]), 0) + 1
        return part.assign(w=part["v"] * 2)


def _before(part: pd.DataFrame, cutoff: int, before: bool) -> pd.DataFrame:
    return part[(part["t"] < cutoff) == before]


def _split(rows: int, parts: int, cutoff: int, calls: _Calls | None):
    frame = pd.DataFrame({"t": np.arange(rows) % 97, "v": np.arange(rows)})
    merged = dd.from_pandas(frame, npartitions=parts, sort=False)
    meta = frame.iloc[:0].assign(w=frame["v"].iloc[:0] * 2)  # (no call on made-up rows to infer it)
    merged = merged.map_partitions(calls.step, meta=meta) if calls is not None else merged.assign(w=merged["v"] * 2)
    train = merged.map_partitions(_before, cutoff, True)
    test = merged.map_partitions(_before, cutoff, False)
    return frame.assign(w=frame["v"] * 2), train, test


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 300), parts=st.integers(1, 6), cutoff=st.integers(0, 100),
       budget=st.sampled_from([0, 600, 1 << 30]), window=st.integers(1, 3))
def test_partitions_computed_beside_are_pandas_split_and_the_step_before_runs_once(rows, parts, cutoff, budget,
                                                                                    window):
    calls = _Calls()
    frame, train, test = _split(rows, parts, cutoff, calls)
    kept = KeptPartitions(test, budget)
    with dask.config.set(scheduler="sync"):
        got_train = list(iter_partitions(train, window=window, beside=kept))
        assert kept.computed_beside == test.npartitions == len(got_train)
        ran_once = dict(calls.count)
        got_test = list(kept.partitions(window=window))
    # the oracle: pandas' own split of the rows, partition by partition in order
    pd.testing.assert_frame_equal(pd.concat(got_train), frame[frame["t"] < cutoff])
    expected_test = frame[frame["t"] >= cutoff]
    if len(expected_test):
        pd.testing.assert_frame_equal(pd.concat(got_test), expected_test)
    assert all(len(p) for p in got_test)  # an empty partition seen beside is not computed again
    assert set(ran_once.values()) <= {1}  # the step before the split ran once per partition for both frames
    # only the partitions with held rows not kept are computed again, each once more
    assert kept.computed_again == sum(1 for c in calls.count.values() if c == 2)
    if budget >= 1 << 30:
        assert kept.computed_again == 0
    if budget == 0:
        assert kept.computed_again == len(got_test)


def test_a_second_pass_over_kept_partitions_computes_them_all():
    calls = _Calls()
    frame, train, test = _split(200, 4, 50, calls)
    kept = KeptPartitions(test, 1 << 30)
    with dask.config.set(scheduler="sync"):
        list(iter_partitions(train, window=1, beside=kept))
        first = pd.concat(list(kept.partitions(window=1)))
        assert kept.computed_again == 0
        second = pd.concat(list(kept.partitions(window=1)))  # handed over once: computed now
    pd.testing.assert_frame_equal(first, second)
    assert kept.computed_again == 4 and kept.wanted


def test_a_pass_stopped_early_leaves_the_unseen_partitions_to_compute():
    calls = _Calls()
    frame, train, test = _split(200, 4, 50, calls)
    kept = KeptPartitions(test, 1 << 30)
    with dask.config.set(scheduler="sync"):
        parts = iter_partitions(train, window=1, beside=kept)
        next(parts)
        parts.close()  # training stopped after its first partition (max_steps)
        got = pd.concat(list(kept.partitions(window=1)))
    pd.testing.assert_frame_equal(got, frame[frame["t"] >= 50])
    assert kept.computed_beside + kept.computed_again == 4


def test_frames_of_unequal_partitions_are_not_computed_together():
    calls = _Calls()
    frame, train, test = _split(200, 4, 50, calls)
    kept = KeptPartitions(test.repartition(npartitions=2), 1 << 30)
    with dask.config.set(scheduler="sync"):
        list(iter_partitions(train, window=1, beside=kept))
        assert kept.computed_beside == 0
        got = pd.concat(list(kept.partitions(window=1)))
    pd.testing.assert_frame_equal(got, frame[frame["t"] >= 50])


def test_beside_on_a_distributed_client_equals_the_local_pass():
    distributed = pytest.importorskip("distributed")
    frame, train, test = _split(300, 5, 60, None)
    kept = KeptPartitions(test, 1 << 30)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None):
        got_train = pd.concat(list(iter_partitions(train, window=2, beside=kept)))
        got_test = pd.concat(list(kept.partitions(window=2)))
    pd.testing.assert_frame_equal(got_train, frame[frame["t"] < 60])
    pd.testing.assert_frame_equal(got_test, frame[frame["t"] >= 60])
    assert kept.computed_beside == 5 and kept.computed_again == 0


def test_a_partition_handed_in_after_its_pass_began_is_not_taken():
    """A stream's thread still finishing the other pass cannot change what a pass over the
    kept frame yields once it has begun: the rows stay the frame's, in order."""
    calls = _Calls()
    frame, train, test = _split(200, 4, 50, calls)
    kept = KeptPartitions(test, 1 << 30)
    with dask.config.set(scheduler="sync"):
        parts = iter_partitions(train, window=1, beside=kept)
        next(parts), next(parts)  # (a partition beside is taken after its pair is yielded: one so far)
        assert kept.computed_beside == 1
        handing = kept.partitions(window=1)
        got = [next(handing)]
        rest = list(parts)  # the other pass finishes late: its partitions are not taken now
        assert len(rest) == 2 and kept.computed_beside == 1
        got += list(handing)
    pd.testing.assert_frame_equal(pd.concat(got), frame[frame["t"] >= 50])
    assert kept.computed_again == 3


# ---- the local scheduler's threads: no more than the cores, from whichever thread a pass runs ----


class _Threads:
    """The threads its calls ran on; each call sleeps, so that the tasks of a window overlap
    and the scheduler's pool starts as many threads as it may."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: set[int] = set()

    def __dask_tokenize__(self) -> object:
        return ("threads", id(self))

    def __call__(self, part: pd.DataFrame) -> pd.DataFrame:
        with self.lock:
            self.seen.add(threading.get_ident())
        threading.Event().wait(0.02)
        return part


def _threads_running_a_pass(caller_is_main: bool, **config: object) -> set[int]:
    """The threads that ran the tasks of one pass (every partition in one window) started on
    the main thread or on another one, under dask's threaded scheduler."""
    threads = _Threads()
    parts = 2 * dask.system.CPU_COUNT + 8  # more tasks at once than a pool of cores + 4 threads holds, on any machine
    rows = pd.DataFrame({"a": range(4 * parts)})
    frame = dd.from_pandas(rows, npartitions=parts).map_partitions(threads, meta=rows.iloc[:0])  # (no call for the meta)

    def run() -> None:
        with dask.config.set(scheduler="threads", **config):
            assert sum(len(p) for p in iter_partitions(frame, window=parts)) == len(rows)

    if caller_is_main:
        run()
    else:
        worker = threading.Thread(target=run)
        worker.start()
        worker.join()
    return threads.seen


@pytest.mark.parametrize("caller_is_main", [True, False])
def test_a_local_pass_runs_on_at_most_as_many_threads_as_cores(caller_is_main: bool) -> None:
    """dask's threaded scheduler called from a thread other than the main one (the stream's
    producer is one) makes its own pool, of Python's default size (cores + 4) unless told
    one: 6 threads on 2 cores, beside a trainer.  A pass gives it the cores' count, as dask
    does on the main thread."""
    assert 1 <= len(_threads_running_a_pass(caller_is_main)) <= dask.system.CPU_COUNT


def test_a_local_pass_keeps_a_configured_thread_count() -> None:
    assert len(_threads_running_a_pass(False, num_workers=dask.system.CPU_COUNT + 3)) == dask.system.CPU_COUNT + 3
