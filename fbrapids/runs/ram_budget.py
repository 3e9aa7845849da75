"""Where a run's embedding rows live: in one RAM tier when every table's rows fit in memory,
in the tiers (device cache, host RAM, SSD file) when they may not.

Each table is bounded before any row is read (:func:`fbrapids.runs.disk_budget.table_bounds`:
a hashed feature by its buckets, a raw id by its dictionary's rows).  When every table at its
bound takes at most :data:`RAM_SHARE` of the memory available when the run starts, nothing
would ever be evicted to disk: the store takes one RAM tier (``host_rows=None``, no SSD
files; on the CPU its cache grows to hold every row, :mod:`fbrapids.trainers.sparse.hierarchy`),
without being told.  Otherwise the run's configured tiers are used.

Example:
    >>> from fbrapids.runs.disk_budget import TableBound
    >>> bounds = {"ad": TableBound(1000, "1,000 hash buckets"), "user": TableBound(500, "500 users")}
    >>> fits_in_ram(bounds, row_bytes=68, available=1 << 30)[0]
    True
    >>> fits_in_ram(bounds, row_bytes=68, available=100_000)
    (False, 'every table at its bound: 1,500 rows, 246,000 bytes, more than 0.5 of the 100,000 bytes available')
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:  # (annotations only)
    from fbrapids.runs.disk_budget import TableBound

#: the share of the available memory every table at its bound may take for one RAM tier
RAM_SHARE = 0.5
#: bytes a row takes beyond its floats: its directory record, id, map buckets and slot
ROW_OVERHEAD = 96


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation now (Linux: ``MemAvailable``; else the
    free pages), or None when the system does not say.

    Example:
        >>> available_memory() is None or available_memory() > 0
        True
    """
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return None


def fits_in_ram(bounds: Mapping[str, TableBound], row_bytes: int, available: int | None = None) -> tuple[bool, str]:
    """Whether every table at its bound (``bounds``: name -> ``TableBound``) fits in
    :data:`RAM_SHARE` of ``available`` bytes (default: :func:`available_memory`), and why, in words."""
    if available is None:
        available = available_memory()
    rows = sum(int(b.rows) for b in bounds.values())
    need = rows * (int(row_bytes) + ROW_OVERHEAD)
    if available is None:
        return False, f"every table at its bound: {rows:,} rows, {need:,} bytes; the memory available is unknown"
    if need <= RAM_SHARE * available:
        return True, (f"every table at its bound: {rows:,} rows, {need:,} bytes, within {RAM_SHARE} of the "
                      f"{available:,} bytes available")
    return False, (f"every table at its bound: {rows:,} rows, {need:,} bytes, more than {RAM_SHARE} of the "
                   f"{available:,} bytes available")


@dataclass(frozen=True)
class TableLayout:
    """Where a run's embedding rows live: one RAM tier per table (``one_ram_tier``), or the
    tiers, ``host_rows`` per table in host RAM (None: unbounded) and the rows past them on
    the SSD tier; ``why``, in words."""

    one_ram_tier: bool
    host_rows: int | None
    why: str


def table_layout(tiers: str, host_rows: int | None, bounds: Mapping[str, TableBound], row_bytes: int,
                 available: int | None = None) -> TableLayout:
    """The layout ``tiers`` asks for (``"auto"``: one RAM tier when every table fits,
    :func:`fits_in_ram`; ``"ram"``; ``"tiered"``: ``host_rows`` per table).

    Example:
        >>> from fbrapids.runs.disk_budget import TableBound
        >>> b = {"ad": TableBound(1000, "buckets")}
        >>> table_layout("auto", 1 << 19, b, row_bytes=68, available=1 << 30).one_ram_tier
        True
        >>> table_layout("tiered", 1 << 19, b, row_bytes=68)
        TableLayout(one_ram_tier=False, host_rows=524288, why="asked for (tiers='tiered')")
    """
    if tiers == "auto":
        ram, why = fits_in_ram(bounds, row_bytes, available)
    else:
        ram, why = tiers == "ram", f"asked for (tiers={tiers!r})"
    return TableLayout(ram, None if ram else host_rows, why)
