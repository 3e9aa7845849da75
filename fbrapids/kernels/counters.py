"""Kernel counters: launches, layers, pool peak and regrowths, bytes moved between host and
device, per plan and per process.

Example:
    >>> s = KernelStats(); s.launches += 3; s.as_dict()["launches"]
    3
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields


@dataclass
class KernelStats:
    """Counters of meta-kernel work (add with ``+=`` of another KernelStats)."""

    launches: int = 0  #: meta-kernel launches (one per layer per non-empty partition, plus re-runs)
    partitions: int = 0  #: partitions (frames) run
    rows: int = 0  #: input rows run
    regrowths: int = 0  #: pool overflows answered by growing the pool and re-running a layer
    presizes: int = 0  #: pools grown before a launch from the layer's earlier peak bytes per row
    peak_pool_bytes: int = 0  #: largest pool use of one layer launch
    pool_capacity: int = 0  #: largest pool capacity reached
    compactions: int = 0  #: variable-length results compacted out of the pool
    bytes_to_device: int = 0  #: every byte copied host -> device (pointer tables, constants, columns)
    bytes_to_host: int = 0  #: every byte copied device -> host (layer status reads, columns)
    column_bytes_to_device: int = 0  #: of which column data (inputs / results of CPU-placed layers)
    column_bytes_to_host: int = 0  #: of which column data
    #: FarmHash fingerprints taken by the hashing operators (hash, hash_bucket, cross, and
    #: split / ngrams with buckets): one per output value or list element computed
    hashes: int = 0
    #: fingerprints the row path would have taken beyond ``hashes``: operators run once per
    #: distinct value (the dictionary path) fill their other rows from those
    hashes_saved: int = 0
    dictionary_runs: int = 0  #: operator runs on the dictionary path (per partition)

    _SUMMED = ("launches", "partitions", "rows", "regrowths", "presizes", "compactions", "bytes_to_device",
               "bytes_to_host", "column_bytes_to_device", "column_bytes_to_host", "hashes", "hashes_saved",
               "dictionary_runs")

    def __iadd__(self, o: "KernelStats") -> "KernelStats":
        for k in self._SUMMED:
            setattr(self, k, getattr(self, k) + getattr(o, k))
        self.peak_pool_bytes = max(self.peak_pool_bytes, o.peak_pool_bytes)
        self.pool_capacity = max(self.pool_capacity, o.pool_capacity)
        return self

    def as_dict(self) -> dict[str, int]:
        # every field is an int: read them by name (dataclasses.asdict deep-copies recursively,
        # ~50 us per call, and the scorer reads the counters around every extraction)
        return {k: getattr(self, k) for k in _FIELDS}


_FIELDS = tuple(f.name for f in fields(KernelStats))


_lock = threading.Lock()
_process = KernelStats()


def record(s: KernelStats) -> None:
    """Add one run's counters to the process-wide totals."""
    global _process
    with _lock:
        _process += s


def stats() -> dict[str, int]:
    """Process-wide kernel counters since start (or the last :func:`reset_stats`).

    Example:
        >>> sorted(k for k in stats() if "bytes_to" in k)
        ['bytes_to_device', 'bytes_to_host', 'column_bytes_to_device', 'column_bytes_to_host']
    """
    with _lock:
        return _process.as_dict()


def reset_stats() -> None:
    """Zero the process-wide counters."""
    global _process
    with _lock:
        _process = KernelStats()
