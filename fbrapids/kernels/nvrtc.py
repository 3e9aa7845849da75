"""Compile CUDA C++ source to PTX with NVRTC, without a GPU.

NVRTC is CUDA's run-time compiler library.  It needs no device and no driver, so generated
meta-kernels can be compile-checked on any machine that has ``libnvrtc``; the pip package
``nvidia-cuda-nvrtc`` provides it.  This module calls the library directly through ctypes.

The library is looked for, in order, at:

1. ``$FBRAPIDS_NVRTC`` (a path to ``libnvrtc.so*``);
2. the pip wheels' folders on ``sys.path``: ``nvidia/cu13/lib``, ``nvidia/cu12/lib`` and
   ``nvidia/cuda_nvrtc/lib``;
3. ``$CUDA_PATH`` / ``$CUDA_HOME`` (``lib64`` and ``lib``), then ``/usr/local/cuda``;
4. the system loader (``ldconfig``): ``libnvrtc.so.13``, ``.so.12``, ``.so``.

Example:
    >>> from fbrapids.kernels.nvrtc import nvrtc_available, compile_cuda
    >>> if nvrtc_available():
    ...     ptx = compile_cuda('extern "C" __global__ void k(int* x) { x[0] = 1; }')
    ...     assert ".entry k" in ptx
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import logging
import os
import re
import sys
from pathlib import Path
from typing import Iterable, Sequence

from fbrapids.errors import NvrtcCompileError, NvrtcUnavailableError
from fbrapids.kernels.headers import CSRC

log = logging.getLogger(__name__)

CSRC_DIR = CSRC
"""The folder of the shared device-function headers (fbx_target.h, farmhash.h, ...)."""

ENV_LIBRARY = "FBRAPIDS_NVRTC"
ENV_ARCH = "FBRAPIDS_NVRTC_ARCH"
#: the real architecture compiled for by default: ``-arch=sm_XX`` makes NVRTC run ptxas too
#: (a virtual ``compute_XX`` stops at PTX, and ptxas' limits -- shared memory, registers --
#: would first be met by cupy on the device); H100 / H200 are sm_90
DEFAULT_ARCH = "sm_90"
#: the NVRTC options every fbrapids CUDA module is built with (``cupy.RawModule`` at run time
#: and this module's checks alike).  ``-ftz=false``: cupy adds ``-ftz=true`` unless told
#: otherwise, which flushes float32 denormals to zero on the device only; the host C keeps them
RUNTIME_OPTIONS = ("--std=c++17", "-ftz=false")
_SONAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")
_WHEEL_DIRS = ("nvidia/cu13/lib", "nvidia/cu12/lib", "nvidia/cuda_nvrtc/lib")
_NVRTC_SUCCESS = 0
_CONTEXT_LINES = 1  # source lines quoted on each side of an offending line


def _candidate_paths() -> list[str]:
    paths: list[str] = []
    env = os.environ.get(ENV_LIBRARY)
    if env:
        paths.append(env)
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        for sub in _WHEEL_DIRS:
            d = os.path.join(entry, sub)
            for so in _SONAMES:
                paths.extend(sorted(glob.glob(os.path.join(d, so))))
    for var in ("CUDA_PATH", "CUDA_HOME"):
        root = os.environ.get(var)
        if root:
            for lib in ("lib64", "lib"):
                for so in _SONAMES:
                    paths.append(os.path.join(root, lib, so))
    for lib in ("lib64", "lib"):
        for so in _SONAMES:
            paths.append(os.path.join("/usr/local/cuda", lib, so))
    return [p for p in dict.fromkeys(paths) if os.path.exists(p)]


def _builtins_beside(path: str) -> None:
    """Load the ``libnvrtc-builtins`` next to ``path`` first, globally: libnvrtc opens it by
    its soname when it compiles, and a wheel's copy outside the loader's path (an NVRTC of
    another version, ``$FBRAPIDS_NVRTC``) would otherwise not be found ("failed to open
    libnvrtc-builtins.so.13.0")."""
    for lib in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
        try:
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
            return
        except OSError:
            continue


@functools.lru_cache(maxsize=1)
def _load() -> tuple[ctypes.CDLL, str]:
    tried: list[str] = []
    for path in _candidate_paths():
        try:
            _builtins_beside(path)
            return _declare(ctypes.CDLL(path)), path
        except OSError as exc:
            tried.append(f"{path}: {exc}")
    found = ctypes.util.find_library("nvrtc")
    for name in _SONAMES + ((found,) if found else ()):
        try:
            return _declare(ctypes.CDLL(name)), name
        except OSError as exc:
            tried.append(f"{name}: {exc}")
    raise NvrtcUnavailableError(
        "libnvrtc not found; install the pip package nvidia-cuda-nvrtc "
        f"(or set ${ENV_LIBRARY}, $CUDA_PATH or $CUDA_HOME). Tried: " + "; ".join(tried))


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    vp, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
    lib.nvrtcGetErrorString.restype = cp
    lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
    lib.nvrtcVersion.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
    lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(vp), cp, cp, ctypes.c_int,
                                       ctypes.POINTER(cp), ctypes.POINTER(cp)]
    lib.nvrtcCompileProgram.argtypes = [vp, ctypes.c_int, ctypes.POINTER(cp)]
    lib.nvrtcGetProgramLogSize.argtypes = [vp, ctypes.POINTER(sz)]
    lib.nvrtcGetProgramLog.argtypes = [vp, ctypes.c_char_p]
    lib.nvrtcGetPTXSize.argtypes = [vp, ctypes.POINTER(sz)]
    lib.nvrtcGetPTX.argtypes = [vp, ctypes.c_char_p]
    lib.nvrtcGetCUBINSize.argtypes = [vp, ctypes.POINTER(sz)]
    lib.nvrtcGetCUBIN.argtypes = [vp, ctypes.c_char_p]
    lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(vp)]
    for fn in ("nvrtcVersion", "nvrtcCreateProgram", "nvrtcCompileProgram",
               "nvrtcGetProgramLogSize", "nvrtcGetProgramLog", "nvrtcGetPTXSize",
               "nvrtcGetPTX", "nvrtcGetCUBINSize", "nvrtcGetCUBIN", "nvrtcDestroyProgram"):
        getattr(lib, fn).restype = ctypes.c_int
    return lib


def nvrtc_available() -> bool:
    """True when libnvrtc can be loaded.

    Example:
        >>> isinstance(nvrtc_available(), bool)
        True
    """
    try:
        _load()
        return True
    except NvrtcUnavailableError as exc:
        log.debug("%s", exc)
        return False


def nvrtc_library() -> str:
    """Path (or soname) of the libnvrtc in use; raises NvrtcUnavailableError."""
    return _load()[1]


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the loaded libnvrtc; raises NvrtcUnavailableError."""
    lib = _load()[0]
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def _check(lib: ctypes.CDLL, code: int, what: str) -> None:
    if code != _NVRTC_SUCCESS:
        msg = lib.nvrtcGetErrorString(code)
        raise NvrtcUnavailableError(f"{what} failed: {msg.decode() if msg else code}")


_LOG_LOCATION = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?:error|warning|catastrophic error)",
                           re.MULTILINE)


def _quote_lines(log_text: str, name: str, source: str, include_dirs: Sequence[Path]) -> str:
    """The source lines that NVRTC's log points at, numbered, with a line of context."""
    texts: dict[str, list[str] | None] = {name: source.splitlines()}
    quoted: list[str] = []
    seen: set[tuple[str, int]] = set()
    for m in _LOG_LOCATION.finditer(log_text):
        file, line = m.group("file"), int(m.group("line"))
        if (file, line) in seen:
            continue
        seen.add((file, line))
        if file not in texts:
            texts[file] = None
            for cand in [Path(file)] + [Path(d) / file for d in include_dirs]:
                if cand.is_file():
                    texts[file] = cand.read_text(errors="replace").splitlines()
                    break
        lines = texts[file]
        if not lines or line < 1 or line > len(lines):
            continue
        lo, hi = max(1, line - _CONTEXT_LINES), min(len(lines), line + _CONTEXT_LINES)
        block = [f"{'>' if i == line else ' '} {i:5d} | {lines[i - 1]}" for i in range(lo, hi + 1)]
        quoted.append(f"{file}:{line}:\n" + "\n".join(block))
    return "\n".join(quoted)


def compile_cuda(source: str, name: str = "fbx.cu",
                 options: tuple[str, ...] = RUNTIME_OPTIONS,
                 include_dirs: Iterable[str | os.PathLike] = (), arch: str | None = None) -> str:
    """Compile CUDA C++ ``source`` to PTX text with NVRTC (no GPU needed).

    The device-function header folder (``fbrapids/kernels/csrc``, holding ``fbx_target.h``)
    is always on the include path, after ``include_dirs``.  Unless ``options`` name an
    ``-arch``, it compiles for ``arch`` (default ``$FBRAPIDS_NVRTC_ARCH``, else
    :data:`DEFAULT_ARCH`): a real ``sm_XX`` runs ptxas as well, so a kernel ptxas refuses
    (too much shared memory, ...) fails here as it would on the device.

    Raises:
        NvrtcUnavailableError: libnvrtc cannot be found.
        NvrtcCompileError: the source does not compile; the message holds NVRTC's log and
            the offending source lines quoted with their line numbers.

    Example:
        >>> ptx = compile_cuda('#include "farmhash.h"\\n'
        ...                    'extern "C" __global__ void k(unsigned long long* o)'
        ...                    ' { o[0] = fbx_fp64("a", 1); }')  # doctest: +SKIP
    """
    return _compile(source, name, options, include_dirs, arch, "PTX").decode()


def compile_cubin(source: str, arch: str, name: str = "fbx.cu", options: tuple[str, ...] = RUNTIME_OPTIONS,
                  include_dirs: Iterable[str | os.PathLike] = ()) -> bytes:
    """Compile ``source`` to a CUBIN for the real architecture ``arch`` (``sm_90``): what
    the CUDA runtime loads (``cupy.cuda.function.Module().load``) instead of letting
    ``cupy.RawModule(code=...)`` compile it, which appends ``-ftz=true`` to any options.

    Example:
        >>> if nvrtc_available():
        ...     assert compile_cubin('extern "C" __global__ void k(int* x) { x[0] = 1; }', "sm_90")[:4] == b"\\x7fELF"
    """
    if not arch.startswith("sm_"):
        raise NvrtcCompileError(f"compile_cubin needs a real architecture (sm_XX), got {arch!r}", "", name)
    return _compile(source, name, options, include_dirs, arch, "CUBIN")


def _compile(source: str, name: str, options: tuple[str, ...], include_dirs: Iterable[str | os.PathLike],
             arch: str | None, what: str) -> bytes:
    lib = _load()[0]
    dirs = [Path(d) for d in include_dirs] + [CSRC_DIR]
    opts = list(options) + [f"-I{d}" for d in dirs]
    if not any(o.startswith(("-arch", "--gpu-architecture")) for o in opts):
        opts.append(f"-arch={arch or os.environ.get(ENV_ARCH) or DEFAULT_ARCH}")
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(),
                                       0, None, None), "nvrtcCreateProgram")
    try:
        c_opts = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        code = lib.nvrtcCompileProgram(prog, len(opts), c_opts)
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
        buf = ctypes.create_string_buffer(max(size.value, 1))
        _check(lib, lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log_text = buf.value.decode(errors="replace")
        if code != _NVRTC_SUCCESS:
            err = lib.nvrtcGetErrorString(code)
            quoted = _quote_lines(log_text, name, source, dirs)
            msg = (f"NVRTC could not compile {name} "
                   f"({err.decode() if err else code}; options {' '.join(opts)}):\n{log_text.rstrip()}")
            if quoted:
                msg += "\n\nOffending source:\n" + quoted
            raise NvrtcCompileError(msg, log_text, name)
        if log_text.strip():
            log.debug("NVRTC log for %s:\n%s", name, log_text)
        get_size, get = getattr(lib, f"nvrtcGet{what}Size"), getattr(lib, f"nvrtcGet{what}")
        _check(lib, get_size(prog, ctypes.byref(size)), f"nvrtcGet{what}Size")
        out = ctypes.create_string_buffer(size.value)
        _check(lib, get(prog, out), f"nvrtcGet{what}")
        return out.raw[: size.value].rstrip(b"\0") if what == "PTX" else out.raw[: size.value]
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
