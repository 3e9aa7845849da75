"""Every built-in tier (the cache, host RAM, the SSD file) is a ``Tier``: rows put at its
places are taken back equal to what was put (a numpy copy kept beside it is the reference),
evicted places are free again, ``persist`` makes the SSD file's rows durable, and ``stats``
counts what the hierarchy moves."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fbrapids.trainers.sparse.ssd import SsdTier
from fbrapids.trainers.sparse.tier import SlottedTier, Tier, host_tier_class
from fbrapids.trainers.sparse.tiers import CacheTier, HostTier

WIDTH = 3


def _tiers(tmp_path) -> dict[str, Tier]:
    return {"cache": CacheTier(16, WIDTH, torch.device("cpu")), "host": HostTier(16, WIDTH),
            "ssd": SsdTier(tmp_path, WIDTH)}


@pytest.mark.parametrize("name", ["cache", "host", "ssd"])
def test_rows_put_at_a_tiers_places_are_taken_back(tmp_path, name: str) -> None:
    tier = _tiers(tmp_path)[name]
    assert isinstance(tier, Tier) and tier.width == WIDTH
    slots = getattr(tier, "slots", None)  # a RAM tier's places are slots it hands out; the SSD file's, row numbers
    where = slots.pop(4) if slots is not None else np.array([5, 0, 11, 3])
    rng = np.random.default_rng(1)
    ref = {int(p): rng.normal(size=WIDTH).astype(np.float32) for p in where}
    tier.put(where, np.stack([ref[int(p)] for p in where]))
    tier.put(where[:1], ref[int(where[0])][None] * 2)  # a place written twice holds the last row
    ref[int(where[0])] = ref[int(where[0])] * 2
    back = where[[2, 0, 3]]
    np.testing.assert_array_equal(tier.take(back), np.stack([ref[int(p)] for p in back]))
    tier.persist()
    tier.evict(where[:2])
    if slots is not None:
        assert slots.n_free == slots.capacity - 2 and sorted(slots.pop(2).tolist()) == sorted(where[:2].tolist())
    assert tier.stats.as_dict() == {"hits": 0, "misses": 0, "evictions": 0, "bytes_in": 0, "bytes_out": 0}


def test_a_slotted_tier_frees_the_slots_it_evicts_and_gives_up() -> None:
    host = host_tier_class("ram")(4, WIDTH)
    assert isinstance(host, (HostTier, SlottedTier)) and host.bounded
    rows = np.arange(3 * WIDTH, dtype=np.float32).reshape(3, WIDTH)
    slots = host.hold(np.array([30, 10, 20]), rows, np.array([True, False, True]))
    assert host.slots.used == 3 and host.stats.bytes_in == 3 * WIDTH * 4
    got, dirty = host.give_up(slots[::2])
    np.testing.assert_array_equal(got, rows[::2])
    assert dirty.tolist() == [True, True] and host.slots.used == 1
    assert host.slots.owner[slots].tolist() == [-1, 10, -1]


def test_an_unbounded_host_tier_grows_keeping_its_rows() -> None:
    host = HostTier(None, WIDTH)
    first = host.slots.capacity
    rows = np.ones((first, WIDTH), dtype=np.float32)
    slots = host.hold(np.arange(first), rows, np.zeros(first, dtype=bool))
    host.grow_for(5)
    assert host.slots.capacity >= first + 5 and host.slots.n_free >= 5
    np.testing.assert_array_equal(host.take(slots), rows)


def test_the_ssd_file_keeps_rows_it_is_asked_to_evict(tmp_path) -> None:
    ssd = SsdTier(tmp_path, WIDTH)
    ssd.put(np.array([2]), np.full((1, WIDTH), 7.0, np.float32))
    ssd.evict(np.array([2]))
    assert ssd.take(np.array([2])).tolist() == [[7.0] * WIDTH]
    ssd.close()
