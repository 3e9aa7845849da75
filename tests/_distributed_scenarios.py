"""Scenarios run inside real gloo ranks by tests/trainers/test_distributed.py: one launch of
W ranks runs a list of them (launching is the slow part), each returning plain data the
test compares with one process.

Collectives are counted by wrapping ``torch.distributed.all_gather`` / ``all_to_all_single``
in the rank processes with counting functions that call the real ones (nothing mocked).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import fbrapids  # noqa: E402,F401
from fbrapids.errors import DistributedError  # noqa: E402
from fbrapids.trainers.batch import Batch  # noqa: E402
from fbrapids.trainers.distributed import (  # noqa: E402
    LeaderFeed,
    RankSlices,
    evaluate_distributed,
    fit_distributed,
    rank_store_config,
    shard_partitions,
)
from fbrapids.trainers.distributed.checkpoint import sharded_digest  # noqa: E402
from fbrapids.trainers.models import DeepFM  # noqa: E402
from fbrapids.trainers.sparse import StoreConfig  # noqa: E402

from _trainer_helpers import FEATURES, ctr_frame, small_model  # noqa: E402

GLOBAL_BATCH = 256
ROWS = 1024


class Counter:
    """Counts calls of torch.distributed collectives (the real functions still run)."""

    names = ("all_gather", "all_to_all_single", "all_gather_object", "all_reduce", "broadcast")

    def __init__(self) -> None:
        self.calls = {n: 0 for n in self.names}
        self.real = {n: getattr(dist, n) for n in self.names}

    def __enter__(self) -> "Counter":
        for n in self.names:
            setattr(dist, n, self._wrap(n))
        return self

    def _wrap(self, n: str) -> Callable:
        real = self.real[n]

        def counted(*a: Any, **k: Any) -> Any:
            self.calls[n] += 1
            return real(*a, **k)

        return counted

    def __exit__(self, *exc: Any) -> None:
        for n in self.names:
            setattr(dist, n, self.real[n])


def global_batches(df: pd.DataFrame, batch: int = GLOBAL_BATCH):
    return df.fbx.stream(label="click", dense=["d0", "d1"], sparse=FEATURES, batch_size=batch, group="user")


def table_states(trainer: Any) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for key, store in trainer.sharded.local_stores().items():
        ids, rows = store.state()
        d = store.directory
        out[key] = {"ids": ids, "rows": rows, "last": d.last[: len(ids)].copy(), "freq": d.freq[: len(ids)].copy()}
    return out


def dense_state(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def store_for(root: Path, tag: str, rank: int) -> StoreConfig:
    return rank_store_config(StoreConfig(cache_rows=384, host_rows=512, ssd_dir=str(root / f"ssd-{tag}")), rank)


def train_match(rank: int, world: int, root: Path) -> dict:
    """An epoch of DLRM on the global batches (each rank its slice), checkpointed at the end;
    then evaluation over the union; collectives counted."""
    df = ctr_frame(ROWS)
    model = small_model(store_for(root, f"a{world}", rank))
    with Counter() as c:
        res, tr = fit_distributed(model, RankSlices(global_batches(df), rank, world),
                                  checkpoint_dir=root / f"ckpt-a-w{world}")
    train_calls = dict(c.calls)
    with Counter() as c:
        metrics = evaluate_distributed(tr, RankSlices(global_batches(df), rank, world))
    return {"steps": res.steps, "train_calls": train_calls, "eval_calls": dict(c.calls), "metrics": metrics,
            "dense": dense_state(model), "tables": table_states(tr), "digest": sharded_digest(res.checkpoints[-1]),
            "stats": dict(tr.exchange.stats), "distinct": tr.sharded.distinct_ids}


def train_again(rank: int, world: int, root: Path) -> dict:
    """The same run again into another checkpoint dir: the digest must not change."""
    df = ctr_frame(ROWS)
    model = small_model(store_for(root, f"b{world}", rank))
    res, _ = fit_distributed(model, RankSlices(global_batches(df), rank, world),
                             checkpoint_dir=root / f"ckpt-b-w{world}")
    return {"digest": sharded_digest(res.checkpoints[-1])}


def train_no_overlap(rank: int, world: int, root: Path) -> dict:
    """train_match with the id exchange not overlapped: the same digest, no overlapped seconds."""
    df = ctr_frame(ROWS)
    model = small_model(store_for(root, f"n{world}", rank))
    res, tr = fit_distributed(model, RankSlices(global_batches(df), rank, world),
                              checkpoint_dir=root / f"ckpt-n-w{world}", overlap=False)
    evaluate_distributed(tr, RankSlices(global_batches(df), rank, world))  # as train_match does
    return {"digest": sharded_digest(res.checkpoints[-1]), "stats": dict(tr.exchange.stats)}


def resume_same_world(rank: int, world: int, root: Path) -> dict:
    """3 steps, checkpoint, a fresh model resumes and finishes the epoch: same digest as train_match."""
    df = ctr_frame(ROWS)
    model = small_model(store_for(root, "c1", rank))
    fit_distributed(model, RankSlices(global_batches(df), rank, world), checkpoint_dir=root / "ckpt-c",
                    checkpoint_every=3, max_steps=3)
    del model
    model = small_model(store_for(root, "c2", rank))
    res, _ = fit_distributed(model, RankSlices(global_batches(df), rank, world), checkpoint_dir=root / "ckpt-c")
    return {"digest": sharded_digest(res.checkpoints[-1]), "resumed": str(res.resumed_from), "steps": res.steps}


def deepfm_counts(rank: int, world: int, root: Path) -> dict:
    """DeepFM: two collections, six tables of two widths; still one all_gather + three all_to_all per step."""
    df = ctr_frame(512)
    model = deepfm_model()
    with Counter() as c:
        res, tr = fit_distributed(model, RankSlices(global_batches(df, 128), rank, world))
    return {"steps": res.steps, "calls": dict(c.calls), "tables": table_states(tr), "dense": dense_state(model)}


def deepfm_model() -> DeepFM:
    torch.manual_seed(0)
    return DeepFM(2, FEATURES, embedding_dim=4, deep_mlp=[8], store=StoreConfig(cache_rows=2048))


UNEVEN_SIZES = [150, 0, 70, 25, 105]


def uneven_frame(sizes: list[int] = UNEVEN_SIZES, seed: int = 3, history: bool = False) -> Any:
    """A dask frame of ``ctr_frame`` rows in partitions of ``sizes`` rows, with a row id
    ``rid`` (and with ``history``, a list column ``hist`` of earlier ads, for DIN)."""
    import dask.dataframe as dd

    df = ctr_frame(sum(sizes), seed=seed)
    df["rid"] = np.arange(len(df), dtype=np.int64)
    if history:
        rng = np.random.default_rng(seed + 1)
        pool = np.unique(df["ad"].to_numpy().view(np.int64))
        df["hist"] = pd.Series([list(rng.choice(pool, rng.integers(1, 5))) for _ in range(len(df))],
                               dtype=pd.ArrowDtype(pa.list_(pa.int64())))
    cuts = np.cumsum([0, *sizes])
    pieces = [df.iloc[a:b].reset_index(drop=True) for a, b in zip(cuts[:-1], cuts[1:])]
    return dd.from_map(lambda p: p, pieces, meta=df.iloc[:0], enforce_metadata=False)


def batch_rows(b: Batch) -> dict:
    return {"dense": b.dense.numpy().copy(), "label": b.label.numpy().copy(), "rid": b.group.numpy().copy(),
            "sparse": {k: (v.numpy().copy(), o.numpy().copy()) for k, (v, o) in b.sparse.items()}}


class Recorded:
    """The batches a rank's trainer consumed, recorded as they pass."""

    def __init__(self, batches: Any) -> None:
        self.batches, self.seen = batches, []

    def __iter__(self):
        for b in self.batches:
            self.seen.append(batch_rows(b))
            yield b


def uneven(rank: int, world: int, root: Path) -> dict:
    """Partitions r::W of an uneven dask frame (an empty partition; at W=4 a rank with none),
    per-rank batch 64 / W, a short last batch."""
    frame = shard_partitions(uneven_frame(), rank, world)
    stream = frame.fbx.stream(label="click", dense=["d0", "d1"], sparse=FEATURES, batch_size=64 // world,
                              group="rid")
    rec = Recorded(stream)
    model = small_model(StoreConfig(cache_rows=4096))
    res, tr = fit_distributed(model, rec)
    return {"steps": res.steps, "batches": rec.seen, "dense": dense_state(model), "tables": table_states(tr)}


def mismatch(rank: int, world: int, root: Path) -> dict:
    """Rank 1 builds a wider model: every rank refuses at start-up, naming it."""
    torch.manual_seed(0)
    from fbrapids.trainers.models import DLRM

    model = DLRM(2, FEATURES, embedding_dim=8, bottom_mlp=[16 if rank != 1 else 32], top_mlp=[16],
                 store=StoreConfig(cache_rows=512))
    try:
        fit_distributed(model, RankSlices(global_batches(ctr_frame(256)), rank, world))
    except DistributedError as exc:
        return {"error": str(exc)}
    return {"error": None}


def restore_other_world(rank: int, world: int, root: Path) -> dict:
    """Restore the W=2 checkpoint of train_match at this world size (no training)."""
    model = small_model(store_for(root, f"w{world}", rank))
    res, tr = fit_distributed(model, RankSlices([], rank, world), checkpoint_dir=root / "ckpt-a-w2", max_steps=0)
    return {"tables": table_states(tr), "dense": dense_state(model), "resumed": str(res.resumed_from)}


FEED_BATCH = 64
FEED_DATA = {"uneven": UNEVEN_SIZES, "one": [sum(UNEVEN_SIZES)]}  # partitions' rows
KILL_SIZES = [300, 0, 424, 300]  # 1024 rows: 16 global batches of FEED_BATCH
KILL_RUN = {"data": "uneven_frame(KILL_SIZES, seed=5)"}  # what the killed run records as its data


def feed_stream(frame: Any, batch: int = FEED_BATCH) -> Any:
    """The global stream the leader reads (row ids as the group: each trained row is named)."""
    return frame.fbx.stream(label="click", dense=["d0", "d1"], sparse=FEATURES, batch_size=batch, group="rid")


def leader_feed(sizes: list[int], seed: int, rank: int, world: int, group: Any = None, batch: int = FEED_BATCH) -> Any:
    """Rank ``rank``'s LeaderFeed of ``uneven_frame(sizes, seed)``: only rank 0 builds the stream."""
    return LeaderFeed(feed_stream(uneven_frame(sizes, seed), batch) if rank == 0 else None, rank, world, group)


def feed(rank: int, world: int, root: Path) -> dict:
    """Rank 0 streams the global batches of an uneven dask frame (an empty partition, at W=4
    fewer useful partitions than ranks, a short last batch) and of one partition; every rank
    trains its rows of each; then evaluation over the same feed."""
    out = {}
    for name, sizes in FEED_DATA.items():
        feed_ = leader_feed(sizes, 3, rank, world)
        seen: list[np.ndarray] = []
        model = small_model(StoreConfig(cache_rows=4096))
        res, tr = fit_distributed(model, feed_, on_step=lambda step, b: seen.append(b.group.numpy().copy()))
        metrics = evaluate_distributed(tr, leader_feed(sizes, 3, rank, world))
        out[name] = {"steps": res.steps, "rids": seen, "rows": feed_.rows, "dense": dense_state(model),
                     "tables": table_states(tr), "metrics": metrics}
    return out


def din_model() -> Any:
    from fbrapids.trainers.models import DIN

    torch.manual_seed(0)
    return DIN(2, FEATURES, {"hist": "ad"}, embedding_dim=8, attention_mlp=[8], mlp=[16],
               store=StoreConfig(cache_rows=4096))


def din_stream(frame: Any) -> Any:
    return frame.fbx.stream(label="click", dense=["d0", "d1"], sparse=[*FEATURES, "hist"], batch_size=FEED_BATCH,
                            group="rid")


def feed_din(rank: int, world: int, root: Path) -> dict:
    """DIN (attention over a history list sharing the ad table) on rank 0's global batches."""
    def make() -> Any:
        return LeaderFeed(din_stream(uneven_frame(UNEVEN_SIZES, 3, history=True)) if rank == 0 else None, rank, world)

    model = din_model()
    res, tr = fit_distributed(model, make())
    return {"steps": res.steps, "dense": dense_state(model), "tables": table_states(tr),
            "metrics": evaluate_distributed(tr, make())}


def kill_mid_commit(rank: int, world: int, root: Path) -> dict:
    """Rank 0 feeds the global batches; checkpoint at step 2, then rank 1 is killed (SIGKILL)
    while writing step 4's shard.  The rows each rank trained are written per step as it goes."""
    model = small_model(store_for(root, "k", rank))

    def die(path: Path) -> None:
        if rank == 1 and "step-0000000004" in str(path):
            os.kill(os.getpid(), signal.SIGKILL)

    def record(step: int, b: Batch | None) -> None:
        np.save(root / f"k-rids-{rank}-{step}.npy", b.group.numpy() if b is not None else np.zeros(0, np.int64))

    fit_distributed(model, leader_feed(KILL_SIZES, 5, rank, world), checkpoint_dir=root / "ckpt-k",
                    checkpoint_every=2, max_steps=4, on_file=die, on_step=record, run=KILL_RUN)
    return {}


def resume_killed_at(rank: int, world: int, root: Path, group: Any = None) -> dict:
    """Resume a copy of kill_mid_commit's checkpoints on ``world`` ranks (of ``group``), to the end."""
    import shutil

    ckpt = root / f"ckpt-k-w{world}"
    if rank == 0:
        shutil.copytree(root / "ckpt-k", ckpt)
    dist.barrier(group=group)
    model = small_model(store_for(root, f"kr{world}", rank))
    seen: list[np.ndarray] = []
    res, tr = fit_distributed(model, leader_feed(KILL_SIZES, 5, rank, world, group), checkpoint_dir=ckpt,
                              run=KILL_RUN, group=group, on_step=lambda step, b: seen.append(b.group.numpy().copy()))
    metrics = evaluate_distributed(tr, leader_feed(KILL_SIZES, 5, rank, world, group))
    return {"steps": res.steps, "resumed": str(res.resumed_from), "rids": seen, "metrics": metrics,
            "dense": dense_state(model), "tables": table_states(tr)}


def resume_killed(rank: int, world: int, root: Path) -> dict:
    """The killed W=2 run resumed on these ranks, and on the group of ranks 0 and 1."""
    out = {"all": resume_killed_at(rank, world, root)}
    pair = dist.new_group([0, 1])
    if rank < 2:
        out["pair"] = resume_killed_at(rank, 2, root, pair)
    dist.barrier()
    return out


def demo_match(rank: int, world: int, root: Path) -> dict:
    """The demo's training (fbrapids.app.demo_distributed.train_rank) on the small default data
    generated in ``root/demo-data`` (one training partition), global batch DEMO_BATCH, with
    checkpoints every DEMO_EVERY[world] steps (at W=2 a divisor of the pass's 10 steps, at
    W=4 not)."""
    from fbrapids.app.demo_distributed import train_rank

    return train_rank(rank, world, {"data_dir": str(root / "demo-data"), "work_dir": str(root / f"demo-w{world}"),
                                    "batch_size": DEMO_BATCH, "checkpoint_every": DEMO_EVERY[world]})


def demo_resumed_done(rank: int, world: int, root: Path) -> dict:
    """W=2's finished demo_match work dir (a copy) resumed on these ranks: a run killed in its
    evaluation, resumed; nothing is left to train, its held-out day is evaluated again."""
    import shutil

    from fbrapids.app.demo_distributed import train_rank

    work = root / f"demo-done-w{world}"
    if rank == 0:
        shutil.copytree(root / "demo-w2", work, ignore=shutil.ignore_patterns(".fbrapids.lock"))
    dist.barrier()
    return train_rank(rank, world, {"data_dir": str(root / "demo-data"), "work_dir": str(work),
                                    "batch_size": DEMO_BATCH, "checkpoint_every": DEMO_EVERY[world], "resume": True})


def demo_match_dcn(rank: int, world: int, root: Path) -> dict:
    """``demo_match`` with DCN-v2 (``--model dcn``)."""
    from fbrapids.app.demo_distributed import train_rank

    return train_rank(rank, world, {"data_dir": str(root / "demo-data"), "work_dir": str(root / f"demo-dcn-w{world}"),
                                    "batch_size": DEMO_BATCH, "model": "dcn"})


def demo_stopped(rank: int, world: int, root: Path) -> dict:
    """The same demo stopped after DEMO_STOP steps, checkpointed every 2 (resumed by the test's CLI call)."""
    from fbrapids.app.demo_distributed import train_rank

    return train_rank(rank, world, {"data_dir": str(root / "demo-data"), "work_dir": str(root / "demo-stopped"),
                                    "batch_size": DEMO_BATCH, "checkpoint_every": 2, "max_steps": DEMO_STOP})


DEMO_ROWS, DEMO_BATCH, DEMO_STOP = 3000, 256, 4
DEMO_EVERY = {2: 5, 4: 6}  # the pass has 10 steps


def stop_rank(rank: int, world: int, root: Path) -> dict:
    """Rank 1 stops itself (SIGSTOP) after step 2; the others wait for it in the next step's collectives."""
    def stop(step: int, b: Batch | None) -> None:
        if rank == 1 and step == 2:
            os.kill(os.getpid(), signal.SIGSTOP)

    fit_distributed(small_model(StoreConfig(cache_rows=4096)), RankSlices(global_batches(ctr_frame(512), 64), rank,
                                                                          world), on_step=stop)
    return {}


class StopOnArrival:
    """Passed to a launch: unpickled in each rank process as it starts, before its first
    heartbeat; the first rank to unpickle it writes its pid to ``marker`` and stops itself
    (SIGSTOP)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __getstate__(self) -> dict:
        return {"marker": self.marker}

    def __setstate__(self, state: dict) -> None:
        self.marker = state["marker"]
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGSTOP)


def idle(rank: int, world: int, *_: Any) -> int:
    """A rank that does nothing (its launch is about starting)."""
    return rank


def fill_disk(rank: int, world: int, disk: str) -> None:
    """Rank 1 writes a file larger than the (small) disk ``disk``: a real ENOSPC on a rank."""
    from fbrapids.files.atomic import write_atomic

    if rank == 1:
        write_atomic(Path(disk) / "big.bin", [b"\0" * (1 << 20)] * 4)
    time.sleep(60)  # rank 0 waits, outside any collective, until the launch stops it


def term_launcher_mid_checkpoint(rank: int, world: int, root: str) -> None:
    """A sharded checkpoint of step 1, then step 2's: while writing it, rank 1 sends SIGTERM to
    the launcher.  Each rank's pid in ``root/pid-<rank>``."""
    from fbrapids.trainers.distributed import DistributedTrainer
    from fbrapids.trainers.distributed.checkpoint import save_sharded

    (Path(root) / f"pid-{rank}").write_text(str(os.getpid()))

    def term(path: Path) -> None:
        if rank == 1:
            os.kill(os.getppid(), signal.SIGTERM)
            time.sleep(60)  # still writing when the launcher stops every rank

    trainer = DistributedTrainer(small_model(StoreConfig(cache_rows=64)))
    save_sharded(trainer, None, Path(root) / "ckpt", 1)
    save_sharded(trainer, None, Path(root) / "ckpt", 2, on_file=term)


SCENARIOS = {f.__name__: f for f in (train_match, train_again, train_no_overlap, resume_same_world, deepfm_counts, uneven, mismatch,
                                     restore_other_world, kill_mid_commit, feed, feed_din, resume_killed, demo_match, demo_resumed_done,
                                     demo_match_dcn, demo_stopped, stop_rank)}


def run(rank: int, world: int, names: list[str], root: str) -> dict:
    """Entry point of one launch: the named scenarios in order, each one's result also
    pickled to ``root/result-<rank>-<name>.pkl`` as it completes (a launch whose last
    scenario kills a rank returns nothing, but leaves the others' results)."""
    out = {}
    for n in names:
        out[n] = SCENARIOS[n](rank, world, Path(root))
        with open(Path(root) / f"result-{rank}-{n}.pkl", "wb") as f:
            pickle.dump(out[n], f)
    return out


def results(root: str | Path, world: int, names: list[str]) -> list[dict]:
    """What :func:`run` left in ``root``, per rank."""
    out = []
    for r in range(world):
        got = {}
        for n in names:
            with open(Path(root) / f"result-{r}-{n}.pkl", "rb") as f:
                got[n] = pickle.load(f)
        out.append(got)
    return out


def checkpoint_tables(path: Path) -> list[dict]:
    """Each shard's tables as saved (ids, rows, last, freq), per rank."""
    import json

    meta = json.loads((path / "dist.json").read_text())
    out = []
    for r in range(meta["world"]):
        tables = {}
        for key in meta["tables"]:
            d = path / f"shard-{r:05d}" / "tables" / key.replace("/", "__")
            m = json.loads((d / "meta.json").read_text())
            width = StoreConfig(**m["config"]).width
            with np.load(d / "index.npz") as z:
                tables[key] = {"ids": z["ids"], "last": z["last"], "freq": z["freq"],
                               "rows": np.fromfile(d / "rows.f32", dtype=np.float32).reshape(-1, width)}
        out.append(tables)
    return out
