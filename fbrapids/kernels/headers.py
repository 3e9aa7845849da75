"""Where the kernels' C lives (``csrc/``), and inlining its headers into one source text.

Inlined so that NVRTC needs no include path and the cache key covers the headers.  The
ABI constants (:func:`fbrapids.kernels.abi.c_defines`) come right after ``fbx_target.h``.

Example:
    >>> text = inline_headers(["ops/fbx_views.h"])
    >>> "FBX_TARGET_H" in text and "#define FBX_KEY_MAX 4096" in text and "fbx_mk_str" in text
    True
"""

from __future__ import annotations

import re
from pathlib import Path

from fbrapids.errors import MissingFileError
from fbrapids.kernels import abi

#: the folder of the kernels' C headers and helpers
CSRC = Path(__file__).resolve().parent / "csrc"
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)


def find_header(name: str, from_dir: Path = CSRC) -> Path:
    """The header file ``name``: an absolute path as it is (an operator kept outside the
    package, beside its own module), else looked for next to the includer, in csrc/ and csrc/ops/."""
    if Path(name).is_absolute():
        if Path(name).is_file():
            return Path(name)
        raise MissingFileError(f"kernel header {name!r} not found")
    for d in (from_dir, CSRC, CSRC / "ops"):
        p = d / name
        if p.exists():
            return p
    raise MissingFileError(f"kernel header {name!r} not found under {CSRC}")


def inline_headers(names: list[str]) -> str:
    """The text of the headers (and what they include), each once, includes resolved in place."""
    seen: set[Path] = set()
    out: list[str] = []

    def add(path: Path) -> None:
        if path in seen:
            return
        seen.add(path)
        text = path.read_text()
        for dep in _INCLUDE.findall(text):
            add(find_header(dep, path.parent))
        label = path.relative_to(CSRC) if path.is_relative_to(CSRC) else path.name
        out.append(f"/* ---- {label} ---- */\n" + _INCLUDE.sub("", text))

    add(CSRC / "fbx_target.h")
    out.append(abi.c_defines())
    for n in names:
        add(find_header(n, CSRC))
    return "\n".join(out)


def without_includes(text: str) -> str:
    """``text`` with its ``#include "..."`` lines removed (their headers get inlined instead)."""
    return _INCLUDE.sub("", text)
