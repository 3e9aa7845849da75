#!/usr/bin/env python
"""Zero the device code a GPU machine of one architecture never loads, so the cudf set packs
small (``scripts/gpu_pack.sh``, ``GPU_ONLY_ARCH=90``; docs/gpu.md).

A shared library built with nvcc holds fat binaries (magic ``0xBA55ED50``): per kernel set,
one entry per target -- SASS for sm_75 .. sm_120 and PTX for the newest.  libcudf.so is
~370 MB, ~270 MB of it such entries, and SASS barely compresses.  The driver loads the entry
matching the device (sm_90 on an H100 / H200) and never reads the others' payloads; this
script keeps every file's size, layout and every entry header, and overwrites the payloads
of the entries for other architectures with zeros (which compress to nothing).  The result
runs only on the kept architecture (no PTX is left to JIT for another one).  LTO-IR entries
(libcudf has 21 fat binaries holding only an sm_75 LTO-IR entry, which nvJitLink links for
the device at run time) and fat binaries with no SASS for the kept architecture are kept.

Usage: ``python scripts/gpu_slim_fatbin.py --keep 90 FILE.so ...``; prints one JSON line
(bytes zeroed and kept per file).  A file it cannot parse is left as it is (and said so).

Example:
    >>> import struct
    >>> entry = lambda arch, payload: struct.pack("<HHIQ", 2, 0, 64, len(payload)) + b"\\0" * 12 \\
    ...     + struct.pack("<I", arch) + b"\\0" * 32 + payload
    >>> body = entry(80, b"A" * 8) + entry(90, b"B" * 8)
    >>> blob = bytearray(b"xx" + struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body)
    >>> slim(blob, 90), bytes(blob).count(b"A"), bytes(blob).count(b"B")
    ((8, 8), 0, 8)
"""

from __future__ import annotations

import argparse
import json
import mmap
import struct
import sys

MAGIC = struct.pack("<I", 0xBA55ED50)
HEADER = 16  # magic u32, version u16, header size u16, fat size u64
ARCH_AT = 28  # an entry's architecture (u32), from the entry's start


#: entry kinds: PTX (JIT-compiled for any newer GPU), ELF (SASS for one architecture); other
#: kinds (8: LTO-IR, which nvJitLink links at run time for any newer GPU) are never zeroed
PTX, ELF = 1, 2


def _entries(buf: bytearray | mmap.mmap, e: int, end: int) -> list[tuple[int, int, int, int]]:
    """``(kind, arch, payload start, payload size)`` of the entries of one fat binary's body."""
    out = []
    while e + ARCH_AT + 4 <= end:
        kind, _, ehs, size = struct.unpack_from("<HHIQ", buf, e)
        if ehs < ARCH_AT + 4 or e + ehs + size > end:
            break
        out.append((kind, struct.unpack_from("<I", buf, e + ARCH_AT)[0], e + ehs, size))
        e += ehs + size
    return out


def slim(buf: bytearray | mmap.mmap, keep: int) -> tuple[int, int]:
    """Zero, in place, the payloads a GPU of architecture ``keep`` never reads: in each fat
    binary that holds SASS (an ELF entry) for ``keep``, the ELF entries of other architectures
    and the PTX entries.  A fat binary without SASS for ``keep`` is left whole (its PTX or
    LTO-IR is what the device compiles or links), and so is every LTO-IR entry.  Returns
    ``(bytes zeroed, bytes kept)``."""
    pos, zeroed, kept = 0, 0, 0
    n = len(buf)
    while True:
        i = buf.find(MAGIC, pos)
        if i < 0 or i + HEADER > n:
            return zeroed, kept
        _, _, hsize, fsize = struct.unpack_from("<IHHQ", buf, i)
        if hsize != HEADER or i + HEADER + fsize > n:
            pos = i + 4
            continue
        entries = _entries(buf, i + HEADER, i + HEADER + fsize)
        served = any(kind == ELF and arch == keep for kind, arch, _, _ in entries)
        for kind, arch, start, size in entries:
            if served and (kind == PTX or (kind == ELF and arch != keep)):
                buf[start:start + size] = bytes(size)
                zeroed += size
            else:
                kept += size
        pos = i + HEADER + fsize


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=int, required=True, help="the architecture kept, e.g. 90 for sm_90")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    report = {}
    for path in args.files:
        with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
            zeroed, kept = slim(m, args.keep)
            m.flush()
        report[path] = {"zeroed": zeroed, "kept": kept}
    sys.stdout.write(json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
