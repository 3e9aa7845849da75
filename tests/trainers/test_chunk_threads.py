"""map_on_cores against the plain list comprehension it replaces, and a trial's arms trained
with their chunks side by side on two threads against the same chunks one after another on
one: the same bits (each chunk's ops on one thread either way; no chunk reads another's
tensors)."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings, strategies as st

from fbrapids.trainers.arms_batched import CHUNK_ROWS, BatchedArms, arm_chunks
from fbrapids.trainers.chunk_threads import map_on_cores
from fbrapids.trainers.models import DLRM
from fbrapids.trainers.sparse import StoreConfig


@pytest.fixture
def torch_threads():
    """Restores torch's intra-op thread count after a test that sets it."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.integers(-1000, 1000), max_size=12), threads=st.integers(1, 4))
def test_map_on_cores_is_the_list_comprehension_in_order(items, threads):
    """Every item's result in the items' order, whatever thread took it; torch's count is
    what it was afterwards; with two threads or more and two items or more each call saw one."""
    before = torch.get_num_threads()
    seen: list[tuple[int, int]] = []

    def square(x: int) -> int:
        seen.append((x, torch.get_num_threads()))
        return x * x

    assert map_on_cores(square, items, threads) == [x * x for x in items]
    assert torch.get_num_threads() == before
    assert sorted(x for x, _ in seen) == sorted(items)
    if threads > 1 and len(items) > 1:
        assert {n for _, n in seen} == {1}


def test_map_on_cores_spreads_the_calls_over_threads():
    """Two items that each wait for the other to have started: they only both finish if two
    threads run them at once (one thread would wait forever: the barrier times out)."""
    barrier = threading.Barrier(2, timeout=30)

    def meet(k: int) -> str:
        barrier.wait()
        return threading.current_thread().name

    names = map_on_cores(meet, [0, 1], threads=2)
    assert len(set(names)) == 2


def test_map_on_cores_raises_the_first_items_error_after_every_call(torch_threads):
    """A call that raises: every other call still ran, the first failing item's error is the
    one raised, and torch's thread count is put back."""
    torch.set_num_threads(2)
    ran = []

    def fail_odd(x: int) -> int:
        ran.append(x)
        if x % 2:
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 1"):
        map_on_cores(fail_odd, [0, 1, 2, 3, 4], threads=2)
    assert sorted(ran) == [0, 1, 2, 3, 4] and torch.get_num_threads() == 2


def test_map_on_cores_runs_each_call_under_the_callers_grad_mode():
    with torch.no_grad():
        assert map_on_cores(lambda _: torch.is_grad_enabled(), [0, 1, 2], threads=2) == [False] * 3
    assert map_on_cores(lambda _: torch.is_grad_enabled(), [0, 1, 2], threads=2) == [True] * 3


@settings(max_examples=200, deadline=None)
@given(arms=st.integers(0, 80), rows=st.integers(1, 3 * CHUNK_ROWS), workers=st.integers(1, 16))
def test_arm_chunks_for_workers_are_a_multiple_of_the_busy_threads(arms, rows, workers):
    """With workers: the arms in order, in numpy.array_split's even groups, as many as the
    fewest that hold them rounded up to a multiple of min(workers, arms), never more groups
    than arms; one worker gives the groups without workers."""
    chunks = arm_chunks(arms, rows, workers)
    fewest = len(arm_chunks(arms, rows))
    busy = max(1, min(workers, arms))
    assert len(chunks) == min(arms, -(-fewest // busy) * busy)
    expected = [(int(a[0]), int(a[-1]) + 1) for a in np.array_split(np.arange(arms), len(chunks))] if arms else []
    assert [(c.start, c.stop) for c in chunks] == expected
    if workers == 1:
        assert chunks == arm_chunks(arms, rows)


def _models(n: int) -> list[DLRM]:
    out = []
    for seed in range(n):
        torch.manual_seed(seed)
        out.append(DLRM(2, ["ad", "user"], embedding_dim=4, bottom_mlp=[8], top_mlp=[8, 4], bias_vector=True,
                        store=StoreConfig(cache_rows=512, seed=seed)))
    return out


def _batches():
    rng = np.random.default_rng(1)
    n = 256
    df = pd.DataFrame({"y": rng.integers(0, 2, n), "d0": rng.random(n), "d1": rng.normal(size=n),
                       "ad": rng.integers(0, 40, n), "user": rng.integers(0, 25, n)})
    return list(df.fbx.stream(label="y", dense=["d0", "d1"], sparse=["ad", "user"], batch_size=64))


def _trained(threads: int, chunks: int) -> tuple[list[DLRM], BatchedArms, torch.Tensor]:
    """Five DLRM arms trained side by side on ``threads`` torch threads, their dense parts in
    ``chunks`` chunks (forced), and their logits on the first batch after training."""
    from fbrapids.trainers.fit import fit
    from fbrapids.trainers.fit_config import FitConfig

    torch.set_num_threads(threads)
    models = _models(5)
    arms = BatchedArms(models)
    arms.chunks = lambda rows: [slice(*p) for p in _bounds(5, chunks)]  # type: ignore[method-assign]
    batches = _batches()
    fit(arms, batches, FitConfig(progress=False, calibrate=False))
    return models, arms, arms.logits(batches[0], train=False)


def _bounds(n: int, k: int) -> list[tuple[int, int]]:
    return [(int(a[0]), int(a[-1]) + 1) for a in np.array_split(np.arange(n), k)]


def test_chunks_side_by_side_give_the_bits_of_the_chunks_one_after_another(torch_threads):
    """Five arms in three chunks: on two threads (the chunks side by side, map_on_cores) and
    on one (one after another) every dense parameter, every table row and the logits are
    the same bits; and the side-by-side run did run on two threads (the chunks' calls were
    spread: its BatchedArms saw two)."""
    spread = []
    import fbrapids.trainers.arms_batched as arms_batched

    def counting(fn, items, threads=None):
        spread.append(threads)
        return map_on_cores(fn, items, threads)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(arms_batched, "map_on_cores", counting)
        two, arms_two, logits_two = _trained(2, 3)
    one, arms_one, logits_one = _trained(1, 3)
    assert spread and set(spread) == {2}
    for a, b in zip(two, one):
        for (name, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(p, q), name
    assert torch.equal(logits_two, logits_one)
    for g2, g1 in zip(arms_two.tables.groups, arms_one.tables.groups):
        ids = np.arange(60, dtype=np.uint64)
        assert np.array_equal(g2.store.weights(ids), g1.store.weights(ids))
    assert arms_two.stacked is None and arms_one.stacked is None
