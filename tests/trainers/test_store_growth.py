"""A growable CPU cache grows in place over reserved address space: its rows keep their values
and their addresses through every growth (no copy), and past the reservation (or where the
system refuses one) it falls back to a copy that keeps them too.  The reference: the same
puts and growths on a plain numpy array.  A store's directory and its cache's slots grow in
place the same way; their references: a dict and Python lists."""

from __future__ import annotations

import io
import mmap
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from fbrapids.errors import StoreMemoryError
from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore, reserved
from fbrapids.trainers.sparse.hierarchy import GROWTH, TierStack
from fbrapids.trainers.sparse.reserved import ReservedArray, ReservedRows
from fbrapids.trainers.sparse.row_directory import RowDirectory
from fbrapids.trainers.sparse.tier import Slots
from fbrapids.trainers.sparse.tiers import IN_PLACE_START, CacheTier

WIDTH = 3
ROOT = Path(__file__).resolve().parents[2]


def _replay(ops: list[tuple[str, int]], cache: CacheTier) -> np.ndarray:
    """Apply ``ops`` (put ``k`` rows into the next free slots / grow by ``k``) to ``cache`` and
    to a numpy reference; check the cache's rows against it after each op; the reference."""
    ref = np.full((cache.slots.capacity, WIDTH), np.nan, dtype=np.float32)
    written = np.zeros(len(ref), dtype=bool)
    value = 0.0
    for op, k in ops:
        if op == "put":
            m = min(k, cache.slots.n_free)
            slots = cache.slots.pop(m)
            rows = (value + np.arange(m * WIDTH, dtype=np.float32)).reshape(m, WIDTH)
            value += m * WIDTH
            cache.put(slots, rows)
            ref[slots], written[slots] = rows, True
        else:
            new = cache.slots.capacity + k
            cache.grow(new)
            ref = np.concatenate([ref, np.full((new - len(ref), WIDTH), np.nan, dtype=np.float32)])
            written = np.concatenate([written, np.zeros(new - len(written), dtype=bool)])
        assert cache.table is not None and cache.table.shape == ref.shape
        np.testing.assert_array_equal(cache.table[written], ref[written])
    return ref


_OPS = st.lists(st.tuples(st.sampled_from(["put", "grow"]), st.integers(1, 40)), max_size=16)


@settings(max_examples=60, deadline=None)
@given(start=st.integers(1, 20), ops=_OPS)
def test_growth_in_place_keeps_every_row_and_its_address(start: int, ops: list[tuple[str, int]]) -> None:
    cache = CacheTier(start, WIDTH, torch.device("cpu"), growable=True)
    assert cache._reserved is not None  # (this Linux machine grants the reservation)
    first = cache.data.data_ptr()
    _replay(ops, cache)
    assert cache.data.data_ptr() == first  # grown where it lay: nothing copied
    assert cache.data.untyped_storage().nbytes() == cache.slots.capacity * WIDTH * 4  # its rows only


@settings(max_examples=40, deadline=None)
@given(start=st.integers(1, 20), room=st.integers(1, 60), ops=_OPS)
def test_growth_past_the_reservation_copies_and_keeps_every_row(start: int, room: int,
                                                                 ops: list[tuple[str, int]]) -> None:
    with pytest.MonkeyPatch.context() as mp:  # a reservation of start + room rows
        mp.setattr(reserved, "MAX_RESERVE_BYTES", (start + room) * WIDTH * 4)
        cache = CacheTier(start, WIDTH, torch.device("cpu"), growable=True)
    assert cache._reserved is not None and cache._reserved.capacity == start + room
    _replay(ops, cache)
    if cache.slots.capacity > start + room:
        assert cache._reserved is None  # past it: a tensor of its own from then on


def test_a_refused_reservation_leaves_the_copying_growth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ReservedRows, "reserve", classmethod(lambda cls, *a, **k: None))
    cache = CacheTier(2, WIDTH, torch.device("cpu"), growable=True)
    assert cache._reserved is None
    _replay([("put", 2), ("grow", 5), ("put", 4), ("grow", 1), ("put", 9)], cache)


def test_a_reservation_the_system_refuses_leaves_the_copying_growth() -> None:
    """A real refusal: in a process whose address space is capped (``RLIMIT_AS``) below the
    reservation, ``mmap`` fails, nothing is reserved, and a growable cache grows by copying,
    its rows kept (the numpy reference)."""
    script = textwrap.dedent("""
        import resource, numpy as np, torch
        from fbrapids.trainers.sparse.reserved import ReservedRows
        from fbrapids.trainers.sparse.tiers import CacheTier
        vm = next(int(l.split()[1]) << 10 for l in open("/proc/self/status") if l.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), resource.RLIM_INFINITY))
        assert ReservedRows.reserve(3, 4, reserve_bytes=1 << 34) is None  # 16 GiB past the cap
        cache = CacheTier(4, 3, torch.device("cpu"), growable=True)
        assert cache._reserved is None
        rows = np.arange(12, dtype=np.float32).reshape(4, 3)
        cache.put(cache.slots.pop(4), rows)
        cache.grow(64)
        np.testing.assert_array_equal(cache.table[:4], rows)
        print("refused and copied")
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0 and "refused and copied" in res.stdout, res.stderr[-2000:]


def test_strict_overcommit_reserves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``vm.overcommit_memory`` 2 the kernel ignores ``MAP_NORESERVE``: a reservation
    would take committed memory from every other allocation, so none is made (the setting
    itself is the kernel's: the test reads it as that mode would give it)."""
    monkeypatch.setattr(reserved, "strict_overcommit", lambda: True)
    assert ReservedRows.reserve(WIDTH, 4) is None
    cache = CacheTier(2, WIDTH, torch.device("cpu"), growable=True)
    assert cache._reserved is None
    _replay([("put", 2), ("grow", 5), ("put", 4)], cache)


def test_a_view_saves_its_own_rows_only() -> None:
    r = ReservedRows.reserve(WIDTH, 4)
    assert r is not None and r.capacity >= 4
    view = r.view(4)
    assert view is not None
    view.copy_(torch.arange(12, dtype=torch.float32).reshape(4, WIDTH))
    buf = io.BytesIO()
    torch.save(view, buf)
    assert len(buf.getvalue()) < 4096  # 48 bytes of rows and the archive's own, not the reservation
    buf.seek(0)
    assert torch.equal(torch.load(buf), view)


def _vm_flags(address: int) -> list[str] | None:
    """The VmFlags of this process's mapping that holds ``address`` (/proc/self/smaps), or None."""
    try:
        lines = open("/proc/self/smaps").read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split()[0] if line else ""
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    return None


def test_no_huge_pages_are_asked_for_the_rows() -> None:
    """A large reserved table, grown and written: its mapping carries no MADV_HUGEPAGE advice
    ("hg" among the kernel's VmFlags of it; the system's own policy applies)."""
    r = ReservedRows.reserve(WIDTH, 1 << 20)
    assert r is not None
    rows = r.view(1 << 20)
    assert rows is not None
    rows[::4096] = 1.0  # (rows written: pages faulted in)
    flags = _vm_flags(rows.data_ptr())
    if flags is None:
        pytest.skip("no /proc/self/smaps here")
    assert "hg" not in flags, flags
    adviced = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # the check sees the advice where given
    try:
        adviced.madvise(mmap.MADV_HUGEPAGE)
    except OSError:
        pytest.skip("no transparent huge pages in this kernel")
    view = np.frombuffer(adviced, dtype=np.uint8)
    assert "hg" in (_vm_flags(view.ctypes.data) or []), "the smaps check misses the advice"
    del view
    adviced.close()


def test_a_store_grown_in_place_serves_the_rows_of_one_that_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same ids through two stores that start at 4 slots and grow many times over, one in
    its reservation, one copying: the same rows after sparse steps."""
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 5_000, 300) for _ in range(12)]

    def run() -> np.ndarray:
        store = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=4, device="cpu", seed=3), name="grow")
        for ids in batches:
            lk = store.lookup(ids, requires_grad=True)
            lk.rows.grad = torch.ones_like(lk.rows)
            store.apply_gradients(lk)
            store.end_step()
        lk = store.lookup(np.arange(5_000), requires_grad=False)
        out = lk.rows.detach().numpy()[lk.inverse.numpy()].copy()
        store.end_step()
        assert store.tiers.cache.slots.capacity > 1_000  # (grown several times)
        return out

    in_place = run()
    monkeypatch.setattr(ReservedArray, "reserve", classmethod(lambda cls, *a, **k: None))  # rows, directory, slots
    np.testing.assert_array_equal(in_place, run())


_ADMITS = st.lists(st.lists(st.integers(0, 3_000), min_size=1, max_size=400), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(batches=_ADMITS)
def test_a_directory_grows_in_place_as_a_dict_and_lists_would(batches: list[list[int]]) -> None:
    """Ids admitted batch after batch into a directory that starts at 4 rows: every id's row
    is its rank of first admission (a dict's insertion order), ``g2id`` lists the ids by row,
    a row's ``last`` / ``freq`` written early survive every growth, new rows read the empty
    record; the records never move (grown in place), and a directory that copies holds the same."""
    def run() -> tuple[RowDirectory, list[int]]:
        d = RowDirectory(capacity=4)
        for k, ids in enumerate(batches):
            keys = np.array(ids, dtype=np.uint64)
            fresh = d.get(keys) < 0
            d.admit(np.unique(keys[fresh]), gate=False)
            d.last[: len(d)] = np.arange(len(d)) + k  # (written before the next growth)
            d.freq[: len(d)] = np.arange(len(d)) * 3
        return d, [int(d.records.ctypes.data)]

    order: dict[int, int] = {}
    for ids in batches:
        for i in sorted(set(ids) - set(order)):
            order[i] = len(order)
    d, _ = run()
    first = d.records.ctypes.data
    assert d._rows.in_place and len(d) == len(order)
    assert d.get(np.array(list(order), dtype=np.uint64)).tolist() == list(order.values())
    assert d.g2id[: len(d)].tolist() == list(order)
    n, k = len(d), len(batches) - 1
    assert d.last[:n].tolist() == list(range(k, n + k)) and d.freq[:n].tolist() == [3 * g for g in range(n)]
    assert (d.cache_loc[n:] == -1).all() and (d.host_loc[n:] == -1).all() and not d.on_ssd.any()
    d.grow(4 * len(d.g2id))
    assert d.records.ctypes.data == first  # grown where it lay
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ReservedArray, "reserve", classmethod(lambda cls, *a, **k: None))
        c, _ = run()
    assert not c._rows.in_place
    for name in ("g2id", "cache_loc", "host_loc", "last", "freq", "on_ssd"):
        np.testing.assert_array_equal(getattr(c, name)[:n], getattr(d, name)[:n], err_msg=name)


_SLOT_OPS = st.lists(st.tuples(st.sampled_from(["pop", "release", "grow"]), st.integers(1, 30)), max_size=30)


@settings(max_examples=60, deadline=None)
@given(start=st.integers(1, 16), ops=_SLOT_OPS)
def test_slots_grow_in_place_as_a_stack_of_free_slots_would(start: int, ops: list[tuple[str, int]]) -> None:
    """A tier's slots (reserved, growing in place; and copying) against a Python model: a
    stack of free slots whose top is popped first, released slots pushed back, a growth's
    new slots put under the free ones (popped last, lowest first); owners and dirtiness kept."""
    slots = [Slots(start, reserve=1 << 12), Slots(start, reserve=0)]
    free, owner, cap = list(range(start - 1, -1, -1)), {}, start
    for op, k in ops:
        if op == "pop":
            m = min(k, len(free))
            want = [free.pop() for _ in range(m)]
            for s in slots:
                got = s.pop(m)
                assert got.tolist() == want
                s.owner[got], s.dirty[got] = got + 100, True
            owner.update({g: g + 100 for g in want})
        elif op == "release":
            held = sorted(owner)[: k]
            for s in slots:
                s.release(np.array(held, dtype=np.int64))
            for g in held:
                del owner[g]
                free.append(g)
        else:
            free = list(range(cap + k - 1, cap - 1, -1)) + free
            cap += k
            for s in slots:
                s.grow(cap)
        for s in slots:
            assert s.capacity == cap and s.n_free == len(free) and s.free[: s.n_free].tolist() == free
            mine = {int(g): int(o) for g, o in enumerate(s.owner) if o >= 0}
            assert mine == owner and s.dirty[list(owner)].all() and s.dirty.sum() == len(owner)
    assert slots[0]._growing is None or all(g.in_place for g in slots[0]._growing)
    assert slots[1]._growing is None or not any(g.in_place for g in slots[1]._growing)


def test_a_cache_grown_in_place_by_another_thread_stays_within_its_reservation(monkeypatch: pytest.MonkeyPatch) -> None:
    """``reserve(rows, in_place=True)`` (a prepare's job on the prefetch thread) grows a cache
    only over its reservation: the rows and slots already there keep their addresses, its
    slots' arrays are at least as long as its table, and past the reservation it raises a
    StoreMemoryError naming the table rather than copying arrays another thread may read."""
    monkeypatch.setattr(reserved, "MAX_RESERVE_BYTES", 4096)  # 256 rows of 4 floats (dim 3 + Adagrad's state)
    tiers = TierStack(StoreConfig(dim=3, cache_rows=8), "t", RowDirectory(), torch.device("cpu"))
    cache = tiers.cache
    assert cache.growable and cache.in_place_rows() == 256
    slots = cache.slots.pop(5)
    cache.host_table()[slots] = np.arange(20, dtype=np.float32).reshape(5, 4)
    table, owner = cache.host_table(), cache.slots.owner
    tiers.reserve(100, in_place=True)  # 8 -> max(4 x 8, 5 + 100) slots
    assert cache.slots.capacity == 105 and cache.slots.n_free == 100
    assert cache.host_table().ctypes.data == table.ctypes.data and cache.slots.owner.ctypes.data == owner.ctypes.data
    assert np.array_equal(cache.host_table()[slots], np.arange(20, dtype=np.float32).reshape(5, 4))
    assert min(len(cache.slots.owner), len(cache.slots.dirty), len(cache.pin)) >= len(cache.host_table())
    tiers.reserve(200, in_place=True)  # 4 x 105 is past the reservation: as far as it goes
    assert cache.slots.capacity == 256
    with pytest.raises(StoreMemoryError, match="'t'"):
        tiers.reserve(300, in_place=True)
    assert cache.slots.capacity == 256  # nothing grown


def test_a_cache_started_below_cache_rows_grows_as_if_it_had_started_there() -> None:
    """A growable cache over reserved address space starts at IN_PLACE_START slots (a table of
    a few rows writes no 131,072-slot arrays); one that outgrows them goes to ``cache_rows``
    first, then GROWTH times, the sizes a cache started at ``cache_rows`` takes."""
    first = 4 * IN_PLACE_START
    tiers = TierStack(StoreConfig(dim=3, cache_rows=first), "t", RowDirectory(), torch.device("cpu"))
    slots = tiers.cache.slots
    assert slots.capacity == IN_PLACE_START and not slots.made
    sizes = []
    for need in (IN_PLACE_START // 2, IN_PLACE_START, first, GROWTH * first):  # rows placed, room for the next batch
        tiers.reserve(need)
        sizes.append(slots.capacity)
        slots.pop(need)
    assert sizes == [IN_PLACE_START, first, GROWTH * first, GROWTH * GROWTH * first]
    big = TierStack(StoreConfig(dim=3, cache_rows=first), "u", RowDirectory(), torch.device("cpu"))
    big.reserve(first + 1)  # past cache_rows at once: as from cache_rows
    assert big.cache.slots.capacity == GROWTH * first
