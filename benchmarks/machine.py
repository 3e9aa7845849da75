"""What a benchmark ran on, in words, for its JSON line and the README table.

Example:
    >>> "cores" in machine_description()
    True
"""

from __future__ import annotations

import json
import os
import platform
import sys


def machine_description(backend: str = "cpu") -> str:
    """CPU model and cores, the load average at the time, and the GPU when one was used."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    text = f"{os.cpu_count()} cores ({cpu})"
    try:
        text += f", load average {os.getloadavg()[0]:.1f} at the start"
    except OSError:
        pass
    if backend == "gpu":
        try:
            import cupy

            name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
            text += f", GPU {name.decode() if isinstance(name, bytes) else name}"
        except Exception as exc:  # noqa: BLE001 - describing the machine must not fail the run
            text += f", GPU (unnamed: {exc})"
    return text


def write_result(out: "os.PathLike[str] | str", result: dict) -> None:
    """Write a benchmark's ``result`` to ``out`` (indented JSON, its folder made) and print it
    as the one JSON line the benchmark ends with.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "r" / "x.json"
        >>> write_result(p, {"a": 1})
        {"a": 1}
        >>> json.loads(p.read_text())
        {'a': 1}
    """
    from pathlib import Path

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    sys.stdout.write(json.dumps(result) + "\n")
