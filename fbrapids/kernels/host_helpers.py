"""Host helpers beside the meta-kernels: ctypes bindings of ``csrc/fbx_host_helpers.c``
(compacting pool-resident results into Arrow buffers, building lookup tables).

Example:
    >>> import numpy as np
    >>> slots = build_int_table(np.array([5, 7], dtype=np.int64), 3)
    >>> sorted(slots[slots >= 0].tolist())
    [0, 1]
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from fbrapids.kernels import host_memory as HM
from fbrapids.kernels.compile_host import load_source
from fbrapids.kernels.headers import CSRC, inline_headers, without_includes

_P = ctypes.c_void_p
_I = ctypes.c_int64


@functools.lru_cache(maxsize=None)
def lib() -> ctypes.CDLL:
    """The loaded runtime library (compiled on first use, then from the disk cache)."""
    body = without_includes((CSRC / "fbx_host_helpers.c").read_text())
    src = inline_headers(["ops/fbx_views.h", "ops/fbx_ops_lookup.h"]) + "\n" + body
    so = load_source(src)
    so.fbx_compact.argtypes = [_I, _P, _P, _P, _I, _P, _P, _I]
    so.fbx_compact.restype = None
    so.fbx_compact_ls.argtypes = [_I, _P, _P, _P, _P, _P, _P, _P, _P, _P]
    so.fbx_compact_ls.restype = None
    so.fbx_table_int.argtypes = [_I, _P, _P, _I]
    so.fbx_table_int.restype = None
    so.fbx_table_str.argtypes = [_I, _P, _P, _P, _I]
    so.fbx_table_str.restype = None
    return so


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def prefix(cnt: np.ndarray) -> np.ndarray:
    """Exclusive prefix sum with a leading 0 (n + 1 entries, int64)."""
    out = HM.empty(len(cnt) + 1, np.int64)
    out[0] = 0
    np.cumsum(cnt, out=out[1:])
    return out


def compact(pool: np.ndarray, off: np.ndarray, cnt: np.ndarray, elem: int, block: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Arrow offsets and values of a pool-resident result (``elem`` bytes per element),
    written by a kernel with ``block`` rows per block (each block's rows are contiguous,
    in row order, in its pool region)."""
    offsets = prefix(cnt)
    total = int(offsets[-1])
    values = HM.empty(max(total, 1), np.uint8 if elem == 1 else np.int64)
    lib().fbx_compact(len(cnt), _ptr(pool), _ptr(off), _ptr(cnt), elem, _ptr(offsets), _ptr(values), block)
    return offsets, values


def compact_str_list(pool: np.ndarray, offa: np.ndarray, cnta: np.ndarray, offb: np.ndarray,
                     cntb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """List offsets, string offsets and bytes of a pool-resident list<str> result."""
    loff, boff = prefix(cnta), prefix(cntb)
    soffs = HM.empty(int(loff[-1]) + 1, np.int64)
    data = HM.empty(max(int(boff[-1]), 1), np.uint8)
    lib().fbx_compact_ls(len(cnta), _ptr(pool), _ptr(offa), _ptr(cnta), _ptr(offb), _ptr(cntb),
                         _ptr(loff), _ptr(boff), _ptr(soffs), _ptr(data))
    return loff, soffs, data


def table_size(nkeys: int) -> int:
    size = 16
    while size < 2 * max(nkeys, 1):
        size *= 2
    return size


def build_int_table(keys: np.ndarray, mask: int) -> np.ndarray:
    """The open-addressing slot array for int64 keys (``mask + 1`` slots)."""
    slots = np.full(mask + 1, -1, dtype=np.int64)
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    lib().fbx_table_int(len(keys), _ptr(keys), _ptr(slots), mask)
    return slots


def build_str_table(koffs: np.ndarray, kbytes: np.ndarray, mask: int) -> np.ndarray:
    """The open-addressing slot array for string keys (Arrow offsets + bytes)."""
    slots = np.full(mask + 1, -1, dtype=np.int64)
    lib().fbx_table_str(len(koffs) - 1, _ptr(koffs), _ptr(kbytes), _ptr(slots), mask)
    return slots
