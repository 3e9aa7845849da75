"""Shared upstream work runs once per pass, counted (not timed), on the local scheduler and
on a multi-process LocalCluster: the basic view's read tasks, the joins' build tasks, a
shuffle's tasks.  A control shows the counter catches the partition-by-partition compute
that ran them P times."""

import collections
import os
import sys

import cloudpickle
import dask
import pandas as pd
import pytest
from dask.callbacks import Callback
from dask.sizeof import sizeof

import fbrapids.views.read as read_module
from fbrapids.app.pipeline import DENSE, GROUP, LABEL, SPARSE, feature_frame
from fbrapids.datasets.synthetic.generate import generate
from fbrapids.frames.partition_pass import iter_partitions
from fbrapids.joins.strategies import join_decision_mark, join_decisions
from fbrapids.trainers.stream import stream


def _prefix(key):
    name = key[0] if isinstance(key, tuple) else key
    return str(name).rsplit("-", 1)[0]


class TaskCounter(Callback):
    """Counts executions of every task key run by dask's local schedulers."""

    def __init__(self):
        super().__init__()
        self.by_key = collections.Counter()

    def _posttask(self, key, result, dsk, state, id):
        self.by_key[key] += 1

    def by_prefix(self):
        out = collections.Counter()
        for key, n in self.by_key.items():
            out[_prefix(key)] += n
        return out


@pytest.fixture(scope="module")
def sorted_dir(tmp_path_factory):
    """70,000 impressions in 2,048-row groups: the pipeline reads them as 5 partitions."""
    out = tmp_path_factory.mktemp("scale70k")
    generate(70_000, out, seed=2, row_group_rows=2_048)
    return out


@pytest.fixture
def read_log(tmp_path, monkeypatch):
    """Every parquet partition read appends its file's name to a log (worker processes too:
    the wrapper travels by value)."""
    log = tmp_path / "reads.log"
    real = read_module._read_one

    def counting_read(piece, *args, **kwargs):
        with open(log, "a") as fh:
            fh.write(os.path.basename(piece.path) + "\n")
        return real(piece, *args, **kwargs)

    monkeypatch.setattr(read_module, "_read_one", counting_read)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield log
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _reads(log):
    names = log.read_text().split() if log.exists() else []
    log.unlink(missing_ok=True)
    return collections.Counter(names)


def _strategy(on):
    return [d.strategy for d in join_decisions() if d.on == (on,)][-1]


def test_local_pass_runs_every_task_once_and_each_build_once(sorted_dir, read_log):
    with dask.config.set(scheduler="threads"):
        merged, _ = feature_frame(sorted_dir)
        _reads(read_log)  # planning's reads (meta, sizes) are not the pass
        assert _strategy("instance_id") == "partitioned" and _strategy("user_id") == "broadcast"
        p = merged.npartitions
        assert p >= 4
        batches = stream(merged, label=LABEL, dense=DENSE, sparse=SPARSE, group=GROUP, batch_size=4096)
        with TaskCounter() as counter:
            rows = sum(len(b) for b in batches)
        assert rows > 60_000
        assert max(counter.by_key.values()) == 1, [k for k, n in counter.by_key.items() if n > 1][:5]
        assert counter.by_prefix()["build_side"] == 2  # users and ads: one hash table each per pass, not P
        assert _reads(read_log) == {"impressions.parquet": p, "basic.parquet": p}  # each partition read once

        with TaskCounter() as second:  # a second pass (epoch) recomputes everything once more
            assert sum(len(b) for b in batches) == rows
        assert second.by_prefix()["build_side"] == 2 and max(second.by_key.values()) == 1
        assert _reads(read_log) == {"impressions.parquet": p, "basic.parquet": p}

        with TaskCounter() as naive:  # the control: partition by partition, no pass plan
            for piece in merged.to_delayed():
                piece.compute()
        assert naive.by_prefix()["build_side"] == 2 * p


def test_unsorted_basic_is_shuffled_once_per_pass(sorted_dir, tmp_path, monkeypatch):
    monkeypatch.setattr("fbrapids.joins.strategies.BROADCAST_BYTES", 100_000)  # basic counts as a large view
    for name in ("impressions", "users", "ads"):
        (tmp_path / f"{name}.parquet").write_bytes((sorted_dir / f"{name}.parquet").read_bytes())
    basic = pd.read_parquet(sorted_dir / "basic.parquet").sample(frac=1.0, random_state=0)
    basic.to_parquet(tmp_path / "basic.parquet", row_group_size=2_048, index=False)
    with dask.config.set(scheduler="threads"):
        shuffled, _ = feature_frame(tmp_path)
        assert _strategy("instance_id") == "shuffle"
        with TaskCounter() as counter:
            got = pd.concat(list(iter_partitions(shuffled, window=2)))
        assert max(counter.by_key.values()) == 1  # the shuffle's tasks too: once per pass
        assert sum(n for name, n in counter.by_prefix().items() if "shuffle" in name) >= shuffled.npartitions
        expected = pd.concat(list(iter_partitions(feature_frame(sorted_dir)[0])))
    key = "instance_id"
    pd.testing.assert_frame_equal(got.sort_values(key).reset_index(drop=True)[list(expected.columns)],
                                  expected.sort_values(key).reset_index(drop=True))


def _executions(dask_scheduler):
    counts = collections.Counter()
    for record in dask_scheduler.transition_log:
        key, start, finish = record[0], record[1], record[2]
        if start == "processing" and finish == "memory":
            counts[key] += 1
    return counts


def test_cluster_pass_runs_every_task_once_and_each_build_once(sorted_dir, local_cluster, read_log):
    client = local_cluster
    with dask.config.set(scheduler=client):
        merged, _ = feature_frame(sorted_dir)
        p = merged.npartitions
        _reads(read_log)
        before = client.run_on_scheduler(_executions)
        stats = {}
        rows = sum(len(part) for part in iter_partitions(merged, window=2, stats=stats))
        after = client.run_on_scheduler(_executions)
    ran = collections.Counter({k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)})
    assert rows > 60_000 and stats["partitions"] == p and stats["shared_tasks"] > 0
    assert max(ran.values()) == 1, [k for k, n in ran.items() if n > 1][:5]
    prefixes = collections.Counter()
    for key, n in ran.items():
        prefixes[_prefix(key)] += n
    assert prefixes["build_side"] == 2
    assert _reads(read_log) == {"impressions.parquet": p, "basic.parquet": p}


def test_a_shuffled_pass_holds_what_is_in_flight_whatever_the_rows(tmp_path_factory):
    """Every join shuffled (a broadcast limit of 0 B), partitions of at most 4,096 rows: the
    bytes a pass holds at once (its kept results and the partition it computes: counted with
    dask's sizeof, not timed) are the same at 12k and 24k rows.  A shuffle's barrier needs
    every input partition; a pass that kept each of them until the last output held the
    whole input (a 64M-row run was killed at 22.5 GB); the shuffle's own store is bounded
    apart (partd spills past 1 GB) and counted apart."""
    held, parts = {}, {}
    for rows in (12_000, 24_000):
        d = tmp_path_factory.mktemp(f"held{rows}")
        generate(rows, d, seed=3, row_group_rows=1_024)
        with dask.config.set({"scheduler": "threads", "fbrapids.broadcast-bytes": 0, "fbrapids.partition-rows": 4_096}):
            mark = join_decision_mark()  # not len(join_decisions()): the log keeps the last 256
            merged, _ = feature_frame(d)
            assert {x.strategy for x in join_decisions(since=mark)} == {"shuffle"}
            stats = {}
            sizes = [sizeof(p) for p in iter_partitions(merged, window=1, stats=stats)]
        held[rows], parts[rows] = stats["held_bytes"], max(sizes)
        assert stats["shuffle_ram_bytes"] > 0 and stats["partitions"] >= 3
    assert held[24_000] <= 1.3 * held[12_000], held
    assert held[24_000] <= 3 * parts[24_000], (held, parts)  # the partition in flight and small frontier results
