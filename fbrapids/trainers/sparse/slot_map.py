"""The cache tier's id -> cache-slot map, kept where the cache rows are.

An open-addressing hash table (uint64 ids, int32 slots, linear probing, an empty marker
and a tombstone for evicted ids; see ``csrc/slot_map.h``) held in two torch tensors on the
cache's device.  On CUDA its probe / insert / erase kernels are compiled by NVRTC through
``cupy.RawModule`` and launched on torch's current stream; on the CPU the same C text is
compiled by gcc (:func:`fbrapids.kernels.load_source`) -- that build exists to test the
logic without a GPU, and the CPU store never uses a map (its host directory already is one).

A batch's unique ids are probed on the device; only the misses go to the host directory.
The map is an accelerator, never the authority: the directory's ``cache_loc`` is.  An id
the map misses is looked up on the host (and found cached there if it is); the tiers keep
the map exact by erasing evicted rows and inserting rows brought up
(:class:`fbrapids.trainers.sparse.hierarchy.TierStack`).

Tombstones are reclaimed by rebuilding the map in place when live entries plus tombstones
would pass 3/4 of the buckets; the bucket count (a power of two, at least twice the cache
rows) doubles if live entries alone would pass half of it.

Example:
    >>> import numpy as np, torch
    >>> m = SlotMap(rows=8, device=torch.device("cpu"))
    >>> m.insert(np.array([2**64 - 1, 7], dtype=np.uint64), np.array([3, 0]))
    >>> m.probe(torch.tensor([7, -1, 8])).tolist()     # -1 is the id 2**64 - 1
    [0, 3, -1]
    >>> m.erase(np.array([7], dtype=np.uint64)); m.probe(torch.tensor([7])).tolist(), len(m)
    ([-1], 1)
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:  # the gpu extra (no stubs); imported where a CUDA cache tier runs
    import cupy

from fbrapids.errors import StoreError
from fbrapids.kernels import load_source
from fbrapids.kernels.headers import inline_headers, without_includes
from fbrapids.kernels.nvrtc import RUNTIME_OPTIONS

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("csrc") / "slot_map.h"
EMPTY, TOMB = -1, -2
KERNELS = ("fbx_slot_map_probe", "fbx_slot_map_insert", "fbx_slot_map_erase")
_THREADS = 256
_MAX_BLOCKS = 4096


def slot_map_source() -> str:
    """The map's C text as one translation unit (``fbx_target.h`` inlined): the same text
    for NVRTC and for gcc.

    Example:
        >>> "fbx_slot_map_probe" in slot_map_source() and "FBX_TARGET_H" in slot_map_source()
        True
    """
    return inline_headers([]) + "\n" + without_includes(SOURCE.read_text())


@functools.lru_cache(maxsize=1)
def device_maps_available() -> bool:
    """Whether a CUDA cache can keep its map on the device: the kernels need cupy (the
    ``gpu`` extra).  Without it a CUDA cache's id lookups all go to the host directory
    (logged once).

    Example:
        >>> isinstance(device_maps_available(), bool)
        True
    """
    if importlib.util.find_spec("cupy") is not None:
        return True
    log.warning("cupy is not installed: a CUDA cache tier looks every id up in the host directory "
                "(install the gpu extra for its device-side id -> slot map)")
    return False


@functools.lru_cache(maxsize=None)
def _host_lib() -> ctypes.CDLL:
    lib = load_source(slot_map_source())
    p, i64, u64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64
    lib.fbx_slot_map_probe.argtypes = [p, p, u64, p, i64, p]
    lib.fbx_slot_map_insert.argtypes = [p, p, u64, p, p, i64, p]
    lib.fbx_slot_map_erase.argtypes = [p, p, u64, p, i64, p]
    for name in KERNELS:
        getattr(lib, name).restype = None
    return lib


@functools.lru_cache(maxsize=None)
def _cuda_module(device_index: int) -> cupy.RawModule:
    import cupy  # the gpu extra; only a CUDA cache tier gets here

    with cupy.cuda.Device(device_index):
        return cupy.RawModule(code=slot_map_source(), options=RUNTIME_OPTIONS)


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


class SlotMap:
    """Ids (uint64) -> cache slots (int32) in tensors on ``device``; see the module docstring.

    Args:
        rows: the cache's row count (the map holds at most that many live ids).
        device: where the tensors live and the kernels run (cuda, or cpu for tests).
    """

    def __init__(self, rows: int, device: torch.device) -> None:
        self.device = torch.device(device)
        self.live = 0     # ids in the map
        self.tombs = 0    # tombstoned buckets
        self.rebuilds = 0
        self.failed = torch.zeros(1, dtype=torch.int32, device=self.device)  # insert/erase found no bucket/key
        self._allocate(max(64, 1 << (2 * max(int(rows), 1) - 1).bit_length()))

    def _allocate(self, buckets: int) -> None:
        self.buckets = int(buckets)
        self.keys = torch.zeros(self.buckets, dtype=torch.int64, device=self.device)
        self.vals = torch.full((self.buckets,), EMPTY, dtype=torch.int32, device=self.device)
        self.live = self.tombs = 0

    def __len__(self) -> int:
        return self.live

    def _mask(self) -> np.uint64:
        return np.uint64(self.buckets - 1)

    # -- launching ---------------------------------------------------------------------------
    def _launch(self, name: str, n: int, *args: torch.Tensor | int | np.integer) -> None:
        """Run kernel ``name`` over ``n`` items; tensor args by pointer, ints as given."""
        if n == 0:
            return
        if self.device.type == "cpu":
            getattr(_host_lib(), name)(*[_ptr(a) if isinstance(a, torch.Tensor) else a for a in args])
            return
        import cupy

        index = self.device.index or 0
        conv = tuple(cupy.asarray(a) if isinstance(a, torch.Tensor) else a for a in args)  # zero-copy views
        blocks = min((n + _THREADS - 1) // _THREADS, _MAX_BLOCKS)
        with cupy.cuda.Device(index), cupy.cuda.ExternalStream(torch.cuda.current_stream(self.device).cuda_stream):
            _cuda_module(index).get_function(name)((blocks,), (_THREADS,), conv)  # on torch's stream

    def _ids(self, ids: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Ids as a contiguous int64 tensor (the uint64 bits) on the map's device."""
        if isinstance(ids, torch.Tensor):
            return ids.to(self.device, torch.int64).contiguous()
        return torch.from_numpy(np.ascontiguousarray(ids).view(np.int64)).to(self.device)

    def _check(self) -> None:
        if self.device.type == "cpu":
            self.raise_if_failed()

    def raise_if_failed(self) -> None:
        """Raise StoreError if an insert found no bucket or an erase no key (reads the
        device flag: a synchronisation on CUDA)."""
        if int(self.failed.item()):
            raise StoreError("the cache's id -> slot map lost track of the cache: an insert found no free "
                             "bucket or an erase an absent id")

    # -- the map -----------------------------------------------------------------------------
    def probe(self, ids: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Cache slots (int64) of ``ids``, -1 where the map does not hold them."""
        q = self._ids(ids)
        out = torch.empty(len(q), dtype=torch.int64, device=self.device)
        self._launch("fbx_slot_map_probe", len(q), self.keys, self.vals, self._mask(), q, np.int64(len(q)), out)
        return out

    def insert(self, ids: np.ndarray | torch.Tensor, slots: np.ndarray | torch.Tensor) -> None:
        """Add distinct ``ids`` (absent from the map) at cache ``slots``."""
        n = len(ids)
        if n == 0:
            return
        if self.live + self.tombs + n > self.buckets * 3 // 4:
            self.rebuild(extra=n)
        s = slots.to(self.device, torch.int64) if isinstance(slots, torch.Tensor) else \
            torch.from_numpy(np.ascontiguousarray(slots, dtype=np.int64)).to(self.device)
        self._launch("fbx_slot_map_insert", n, self.keys, self.vals, self._mask(), self._ids(ids),
                     s.contiguous(), np.int64(n), self.failed)
        self.live += n
        self._check()

    def erase(self, ids: np.ndarray | torch.Tensor) -> None:
        """Tombstone distinct ``ids`` (present in the map)."""
        n = len(ids)
        self._launch("fbx_slot_map_erase", n, self.keys, self.vals, self._mask(), self._ids(ids),
                     np.int64(n), self.failed)
        self.live -= n
        self.tombs += n
        self._check()

    def items(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The live ``(ids as int64 bits, slots)``, in bucket order."""
        live = self.vals >= 0
        return self.keys[live], self.vals[live].to(torch.int64)

    def rebuild(self, extra: int = 0) -> None:
        """Reinsert the live ids into fresh buckets (dropping tombstones), doubling the
        bucket count while live ids plus ``extra`` would pass half of it."""
        ids, slots = self.items()
        buckets = self.buckets
        while len(ids) + extra > buckets // 2:
            buckets *= 2
        self._allocate(buckets)
        self.rebuilds += 1
        if len(ids):
            self.insert(ids, slots)
