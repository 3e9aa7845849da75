"""A run's memory budget (``RunConfig.memory_limit`` / ``--memory-limit``): a run that cannot
fit is refused in one line before any work; one whose dictionaries do not fit beside the rest
runs on a real local dask cluster whose worker is limited (spilling past it) and finishes,
with the joins shuffled; every run samples its memory by stage against its budget."""

from __future__ import annotations

import pytest

from fbrapids import kernels
from fbrapids.app.pipeline import run_pipeline
from fbrapids.errors import MemoryBudgetError, WorkloadError
from fbrapids.runs import memory_budget
from fbrapids.workloads import RunConfig


def test_a_budget_below_what_the_run_needs_is_refused_in_one_line_before_any_work(gen_dir, tmp_path):
    work = tmp_path / "work"
    launches = kernels.stats()["launches"]
    with pytest.raises(MemoryBudgetError) as exc:
        run_pipeline(gen_dir, progress=False, work_dir=work, memory_limit="200MB")
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith("this run needs at least ") and "embedding tables" in message
    assert "over its memory budget of 190.7 MiB (memory_limit '200MB'); nothing was read" in message
    assert not work.exists() and kernels.stats()["launches"] == launches  # no work dir, no kernel launched


def test_memory_limit_is_checked_where_it_is_given():
    with pytest.raises(WorkloadError, match="RunConfig.memory_limit must be bytes, a size"):
        RunConfig(memory_limit="lots")
    with pytest.raises(WorkloadError, match="memory_limit"):
        RunConfig(memory_limit="0%")
    assert RunConfig(memory_limit="25%").memory_limit == "25%"
    assert memory_budget.parse_memory_limit("25%") == memory_budget.machine_memory() // 4


def test_dictionaries_over_the_budget_spill_on_a_local_cluster_and_the_run_finishes(gen_dir, tmp_path, monkeypatch):
    """The generated dictionaries are small; counted as a million copies each (the estimate's
    constant, not the engine), they leave no room beside the rest on this process's threads,
    so the plan is a local cluster: a real one, its one worker limited to what the budget
    leaves, the joins shuffled (P2P) instead of broadcast.  The run trains and evaluates the
    rows pandas counts."""
    import pandas as pd

    from fbrapids.app.pipeline import SHUFFLE_WINDOW
    from fbrapids.app.run_memory import memory_plan
    from fbrapids.datasets.synthetic import workload
    from fbrapids.datasets.synthetic.generate import DAYS, TS0

    monkeypatch.setattr(memory_budget, "BROADCAST_COPIES", 10 ** 6)
    cfg = RunConfig(progress=False, work_dir=str(tmp_path / "work"), batch_size=512, cache_rows=1 << 14,
                    host_rows=1 << 15, checkpoint=False, count_clean=False)
    est = memory_plan(workload(gen_dir), cfg.with_(memory_limit="1000GB"), SHUFFLE_WINDOW).estimate
    budget = est.total - est.parts["dictionaries"] + (1 << 30)  # room for a worker, not for the dictionaries
    r = run_pipeline(gen_dir, cfg.with_(memory_limit=budget))
    m = r.memory
    assert m["scheduler"] == "local cluster" and 0 < m["worker_memory_bytes"] < budget
    assert m["broadcast_bytes"] < min(est.dictionaries.values())
    assert [j.split("(")[1].split(")")[0] for j in r.joins][:2] == ["left, shuffle", "left, shuffle"], r.joins
    imp = pd.read_parquet(gen_dir / "impressions.parquet", columns=["instance_id", "slot", "ts"])
    kept = imp[(imp["slot"] >= 0) & imp["instance_id"].isin(pd.read_parquet(gen_dir / "basic.parquet")["instance_id"])]
    held = int((kept["ts"] >= TS0 + (DAYS - 1) * 86400).sum())
    assert (r.rows["trained"], r.rows["held out"]) == (len(kept) - held, held) and r.metrics["n"] == held > 0
    assert set(m["peak_by_stage"]) >= {"plan", "extract+train", "extract+evaluate"}
    assert 0 < m["peak_bytes"] <= budget


def test_an_estimate_near_the_budget_is_said_before_any_work(gen_dir, caplog):
    from fbrapids.app.pipeline import SHUFFLE_WINDOW
    from fbrapids.app.run_memory import memory_plan
    from fbrapids.datasets.synthetic import workload

    roomy = memory_plan(workload(gen_dir), RunConfig(memory_limit="1000GB"), SHUFFLE_WINDOW)
    assert not roomy.near and "memory: the estimated peak" not in caplog.text
    tight = memory_plan(workload(gen_dir), RunConfig(memory_limit=int(roomy.estimate.total / 0.95)), SHUFFLE_WINDOW)
    assert tight.near and tight.scheduler == "threads"
    assert "memory: the estimated peak" in caplog.text and "of the budget" in caplog.text


def test_past_its_budget_a_run_stops_between_partitions_in_one_line():
    import dask.dataframe as dd
    import pandas as pd

    from fbrapids.app.pipeline import TimedPartitions
    from fbrapids.runs.memory_watch import MemoryWatch

    frame = dd.from_pandas(pd.DataFrame({"a": range(10)}), npartitions=2)
    with MemoryWatch(1 << 20, every=60, source="memory_limit '1MiB'") as watch:  # any process is past 1 MiB
        parts = iter(TimedPartitions(frame, watch=watch))
        with pytest.raises(MemoryBudgetError) as exc:
            next(parts)
    assert "\n" not in str(exc.value)
    assert str(exc.value).startswith("the run's memory reached ")
    assert "in stage start, past its memory budget of 1.0 MiB (memory_limit '1MiB'); it was stopped there" in str(exc.value)


_TABLE_BYTES = """
import gc, json, re, sys
from pathlib import Path
import numpy as np
from fbrapids.runs.memory_budget import RunShape, _table_bytes
from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore

def rss():
    status = Path("/proc/self/status").read_text()
    return sum(int(re.search(rf"{k}:\\s+(\\d+)", status).group(1)) * 1024 for k in ("RssAnon", "RssFile"))

n, cache, host, ssd = 600_000, 1 << 15, json.loads(sys.argv[1]), sys.argv[2]
tiers = {} if host is None else {"host_rows": host, "ssd_dir": ssd}
config = StoreConfig(dim=16, cache_rows=cache, device="cpu", **tiers)
ids = np.random.default_rng(0).permutation(n).astype(np.uint64)
gc.collect()
before = rss()
store = TieredEmbeddingStore(config)
for i in range(0, n, 20_000):
    lk = store.lookup(ids[i:i + 20_000])
    lk.rows.sum().backward()
    store.apply_gradients(lk)
    store.end_step()
gc.collect()
shape = RunShape([], ["t"], {}, {"t": n}, cache_rows=cache, host_rows=host, row_floats=config.width, batch_rows=0,
                 partition_rows=0)
print(json.dumps([rss() - before, _table_bytes(shape, n), _table_bytes(shape, n, in_place=True)]))
"""


@pytest.mark.parametrize("host_rows", [None, 1 << 16])
def test_the_estimate_of_a_table_holds_what_the_table_holds_in_ram(tmp_path, host_rows):
    """A table of 600,000 ids trained once each (one RAM tier, or the tiers with the rows past
    host RAM on the SSD tier), in a fresh process: the bytes it gained (resident, anonymous and
    mapped file pages) are at most the estimate's (which counts the table once more, as it
    grows), and at least 60% of them as grown in place (its arrays copied nowhere: the copy the
    estimate counts is a margin here).  The estimate once counted 80 B of directory per id
    where the directory holds ~100 B per slot, and missed the SSD tier's share."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _TABLE_BYTES, json.dumps(host_rows), str(tmp_path / "ssd")],
                         capture_output=True, text=True, check=True)
    held, estimate, in_place = json.loads(out.stdout.strip().splitlines()[-1])
    assert 0.6 * in_place <= held <= estimate, (held, in_place, estimate)


def test_a_budget_short_of_every_row_in_ram_sizes_the_host_tier_and_the_run_finishes(tmp_path, monkeypatch):
    """Every table in one RAM tier does not fit the budget beside the rest: the plan keeps
    the run on this process's threads and sizes each table's host-RAM rows so it fits, the
    rows past them on the SSD tier, and the run trains and evaluates with that layout (20,000
    impressions, 256 B rows: tiers of a few thousand rows, the fewest the plan may size lowered)."""
    from fbrapids.app.pipeline import SHUFFLE_WINDOW
    from fbrapids.app.run_memory import memory_plan
    from fbrapids.datasets.synthetic import workload
    from fbrapids.datasets.synthetic.generate import generate

    data = tmp_path / "data"
    generate(20_000, data, seed=1)
    monkeypatch.setattr(memory_budget, "MIN_HOST_ROWS", 1 << 9)
    cfg = RunConfig(progress=False, work_dir=str(tmp_path / "work"), checkpoint=False, count_clean=False,
                    cache_rows=1 << 12, embedding_dim=64, batch_size=64)
    roomy = memory_plan(workload(data), cfg.with_(memory_limit="1000GB"), SHUFFLE_WINDOW)
    assert roomy.layout.one_ram_tier and roomy.summary()["host_rows"] is None
    tables = roomy.estimate.parts["embedding tables"]
    budget = roomy.estimate.total - tables // 3
    sized = memory_plan(workload(data), cfg.with_(memory_limit=budget), SHUFFLE_WINDOW)
    assert sized.scheduler == "threads" and not sized.layout.one_ram_tier
    assert sized.estimate.total <= budget and sized.estimate.parts["embedding tables"] < tables
    assert "host RAM sized to the memory budget" in sized.layout.why
    r = run_pipeline(data, cfg.with_(memory_limit=budget))
    host = r.memory["host_rows"]  # planned again by the run: this process has grown since
    assert r.memory["scheduler"] == "threads" and host >= 1 << 9
    assert r.store_layout.startswith(f"tiers: cache {cfg.cache_rows:,} rows, host RAM {host:,} rows, SSD files")
    assert r.metrics["n"] > 0 and r.memory["peak_bytes"] <= budget


def test_the_estimate_grows_tables_as_the_store_does() -> None:
    """The plan's growth of a one-RAM-tier table (its factor, and where a cache over reserved
    address space starts) is the store's own (the plan mirrors them so as not to import the
    trainers)."""
    from fbrapids.trainers.sparse import hierarchy, tiers

    assert memory_budget.GROWTH == hierarchy.GROWTH
    assert memory_budget.IN_PLACE_START == tiers.IN_PLACE_START
