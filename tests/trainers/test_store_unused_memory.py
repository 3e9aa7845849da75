"""A store that is built and never used touches no memory for its slots: a trial builds every
arm's model with its own stores and hands their rows to one shared store, so the arms' own
stores are dropped unused (at 65,536 slots a store, a 10-candidate trial filled and dropped
1.4 GB of slot arrays before the arrays were made on first use).  Once used, the slots hand
out the same places as arrays made up front (a reference written here with numpy)."""

from __future__ import annotations

import tracemalloc

import numpy as np
from hypothesis import given, settings, strategies as st

from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
from fbrapids.trainers.sparse.tier import Slots

ROWS = 1 << 22  # 4M slots: 100 MB of slot and pin arrays made up front


def test_a_store_never_used_allocates_no_slot_arrays() -> None:
    tracemalloc.start()  # numpy reports its buffers to tracemalloc
    try:
        store = TieredEmbeddingStore(StoreConfig(dim=16, cache_rows=ROWS, device="cpu"), name="unused")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    cache = store.tiers.cache
    assert peak < 4 << 20, f"{peak} bytes traced while building a store of {ROWS} slots"
    assert not cache.slots.made and cache.slots.n_free == cache.slots.capacity > 0 and cache.slots.used == 0
    assert cache.in_place_rows() >= ROWS  # (it starts at fewer slots: it grows in place to them)


def test_a_used_store_makes_its_slots_and_serves_rows() -> None:
    store = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=8, device="cpu"), name="used")
    ids = np.array([5, 9, 5, 11], dtype=np.int64)
    def rows() -> np.ndarray:
        lk = store.lookup(ids, requires_grad=False)
        out = lk.rows.detach().numpy()[lk.inverse.numpy()].copy()
        store.end_step()
        return out

    first, again = rows(), rows()
    assert store.tiers.cache.slots.made and store.tiers.cache.slots.used == 3
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first[0], first[2])


class _EagerSlots:
    """The reference: every array made up front (numpy only), the stack popped from its end."""

    def __init__(self, capacity: int) -> None:
        self.owner = np.full(capacity, -1, dtype=np.int64)
        self.free = list(range(capacity - 1, -1, -1))

    def pop(self, m: int) -> list[int]:
        out = self.free[len(self.free) - m:][::-1]
        del self.free[len(self.free) - m:]
        return out

    def release(self, slots: list[int]) -> None:
        self.owner[slots] = -1
        self.free += slots

    def grow(self, capacity: int) -> None:
        old = len(self.owner)
        if capacity > old:
            self.owner = np.concatenate([self.owner, np.full(capacity - old, -1, dtype=np.int64)])
            self.free = list(range(capacity - 1, old - 1, -1)) + self.free


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 40),
       ops=st.lists(st.tuples(st.sampled_from(["pop", "release", "grow"]), st.integers(0, 30)), max_size=12))
def test_slots_made_on_first_use_hand_out_the_places_of_eager_ones(capacity: int, ops: list[tuple[str, int]]) -> None:
    lazy, ref = Slots(capacity), _EagerSlots(capacity)
    held: list[int] = []
    for op, k in ops:
        if op == "pop":
            m = min(k, lazy.n_free)
            got = lazy.pop(m).tolist()
            assert got == ref.pop(m)
            held += got
        elif op == "release":
            out, held = held[:k], held[k:]
            if out:
                lazy.release(np.array(out, dtype=np.int64))
                ref.release(out)
        else:
            lazy.grow(lazy.capacity + k)
            ref.grow(len(ref.owner) + k)
        assert lazy.n_free == len(ref.free) and lazy.capacity == len(ref.owner)
    if lazy.made:
        assert lazy.free[:lazy.n_free].tolist() == ref.free
