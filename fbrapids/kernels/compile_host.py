"""Compile host C meta-kernels with the system C compiler into a shared library (cached on
disk by source hash) and load it with ctypes.

The compiler is ``$CC`` if set, else the first of gcc, cc, clang on PATH; flags
``-O3 -fopenmp -shared -fPIC``.  Before the first library is loaded, ``$OMP_WAIT_POLICY``
defaults to ``PASSIVE`` (see :data:`OMP_WAIT_POLICY`): libgomp reads it once, when it is
loaded, so the default holds only where no library loaded libgomp before (torch does, at
import).  Without a compiler the error says what to install; a
compile error quotes the compiler's message with the offending source lines (and the
operator they belong to).

Example:
    >>> lib = load_source("FBX_KERNEL int fbx_demo(int x) { return x + 1; }")
    >>> lib.fbx_demo(41)
    42
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from fbrapids.errors import CompilerNotFoundError, KernelCacheError, KernelCompileError
from fbrapids.kernels.cache import cached_artifact, invalidate, source_key, verified
from fbrapids.kernels.headers import inline_headers

if TYPE_CHECKING:  # (annotations only: the bar loads when a compile starts)
    from concurrent.futures import Future

    from tqdm.std import tqdm as Tqdm

FLAGS = ("-O3", "-std=gnu11", "-fopenmp", "-shared", "-fPIC", "-fno-strict-aliasing")

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def find_compiler() -> str:
    """The C compiler to use; raises CompilerNotFoundError saying what to install."""
    cc = os.environ.get("CC")
    if cc and shutil.which(cc):
        return shutil.which(cc)  # type: ignore[return-value]
    for name in ("gcc", "cc", "clang"):
        path = shutil.which(name)
        if path:
            return path
    raise CompilerNotFoundError(
        "no C compiler found for the CPU meta-kernels: install gcc with OpenMP "
        "(Debian/Ubuntu: `apt-get install gcc`; Fedora: `dnf install gcc`; conda: "
        "`conda install -c conda-forge gcc`), or point $CC at one")


@functools.lru_cache(maxsize=None)
def _compiler_id(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return cc


_LOC = re.compile(r"^[^:\n]*\.c:(\d+):(?:(\d+):)?\s*(?:fatal )?error:\s*(.*)$", re.M)


def _explain_error(log: str, source: str) -> str:
    lines = source.splitlines()
    parts = []
    for m in _LOC.finditer(log):
        ln = int(m.group(1))
        text = lines[ln - 1] if 0 < ln <= len(lines) else "?"
        owner = next((lines[i] for i in range(ln - 1, -1, -1)
                      if re.search(r"/\* (op \d+|user operator|layer \d+)", lines[i])), "")
        where = re.search(r"/\* ((?:op \d+: \S+|user operator \S+|layer \d+[^*]*))", owner)
        parts.append(f"line {ln}{' (' + where.group(1).strip() + ')' if where else ''}: {m.group(3)}\n    {text.strip()}")
    head = "\n".join(parts[:5]) if parts else log.strip()[-2000:]
    return f"the C compiler rejected a generated meta-kernel:\n{head}\n--- compiler output ---\n{log.strip()[-4000:]}"


def compile_bar(where: Path) -> Tqdm:
    """The line a cold compile shows while the C compiler runs (a plan's first use on this
    machine: seconds per layer; later runs load the cached library): a tqdm line on a
    terminal or in a notebook, with the seconds taken once it is done; nothing elsewhere
    (``disable=None``: tqdm's own test of the output).

    Example:
        >>> with compile_bar(Path("/tmp")) as bar:
        ...     pass
    """
    from fbrapids.ui.autobar import tqdm  # tqdm.auto would warn in a kernel without ipywidgets

    return tqdm(total=None, desc=f"fbrapids: compiling a meta-kernel (once: cached in {where})",
                bar_format="{desc} {elapsed}", disable=None, leave=True)


def compile_source(source: str) -> Path:
    """The path of the shared library built from ``source`` (from the cache when present)."""
    cc = find_compiler()
    key = _text_key(source, cc)

    def build(out: Path) -> None:
        src = out.with_suffix(".c")
        src.write_text(source)
        try:
            with compile_bar(out.parent):
                res = subprocess.run([cc, *FLAGS, str(src), "-o", str(out), "-lm"], capture_output=True, text=True)
        finally:
            src.unlink(missing_ok=True)
        if res.returncode != 0:
            raise KernelCompileError(_explain_error(res.stderr, source), res.stderr, source)

    return cached_artifact(key, ".so", build)


#: OpenMP wait policy the host kernels ask for unless the user set one.  Every host kernel
#: launch is an OpenMP parallel region ending in a barrier.  libgomp reads the policy once,
#: when it is loaded, and a process has one libgomp: where torch was imported first (its
#: libgomp is the process's), the default here comes too late and libgomp's own holds
#: (``OMP_DISPLAY_ENV=VERBOSE`` prints ``GOMP_SPINCOUNT = '300000'`` for ``fbrapids demo`` and
#: a trial, which import torch before a kernel); set ``$OMP_WAIT_POLICY`` before Python starts
#: to choose it there.  With libgomp's default
#: (threads spin at the barrier), a thread that another process has taken off its core
#: (the trainer of ``stream()``, which extracts the next partition while one trains) stalls
#: the whole barrier until the scheduler gives it a core back, while the spinning threads
#: hold theirs.  Measured on the 2-core benchmark box, 1M rows in 32768-row partitions,
#: one other process spinning: fused 129k rows/s and op-by-op 78k with spinning waits,
#: 255k and 292k with passive waits; without the other process passive waits cost nothing
#: measurable (fused 450k vs 412k rows/s).
OMP_WAIT_POLICY = "PASSIVE"

_loaded: dict[str, ctypes.CDLL] = {}
_lock = threading.Lock()


def _openmp_defaults() -> None:
    """Set ``$OMP_WAIT_POLICY`` (unless set) before libgomp is loaded with the first kernel."""
    os.environ.setdefault("OMP_WAIT_POLICY", OMP_WAIT_POLICY)


def _load_library(source: str) -> ctypes.CDLL:
    """Load the cached library of ``source``; one the loader refuses (a damaged entry whose
    digest was forged or lost with it) is removed and rebuilt once, then a
    :class:`~fbrapids.errors.KernelCacheError` names the file."""
    path = compile_source(source)
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        invalidate(path, f"cannot be loaded ({exc})")
    path = compile_source(source)
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        raise KernelCacheError(f"cannot load the kernel library {path}, even rebuilt: {exc}") from None


def _with_target(source: str) -> str:
    """``source`` with ``fbx_target.h`` prepended unless the text already contains it."""
    return source if "FBX_TARGET_H" in source else inline_headers([]) + "\n" + source


def load_source(source: str) -> ctypes.CDLL:
    """Compile (or fetch from the cache) and load ``source``; one load per process.

    ``source`` may use ``FBX_KERNEL`` and the ``fbx_*`` typedefs: ``fbx_target.h`` is
    prepended unless the text already contains it.
    """
    source = _with_target(source)
    key = source_key(source)
    with _lock:
        lib = _loaded.get(key)
        if lib is None:
            _openmp_defaults()
            lib = _load_library(source)
            _loaded[key] = lib
        return lib


class BuildAhead:
    """The libraries of ``sources`` not yet in the kernel cache, compiled on background
    threads while the caller goes on (one compiler process each, as many at once as the
    machine has cores: the compiler is a process of its own, so the threads hold no
    interpreter lock while it runs).  A later :func:`load_source` of one of them finds it
    built, or waits on the cache's lock for the build under way: never a second compile.
    A source that fails to build is left to that :func:`load_source`, which raises the
    error with the compiler's message; here it is only logged.

    For a run that knows early which libraries it will load (the model's, the store's)
    and has other work to do first (reading and planning): their compiles, seconds a
    library on a machine's first run, run beside that work instead of in its first step.

    Example:
        >>> import os, tempfile
        >>> os.environ["FBRAPIDS_KERNEL_CACHE"] = tempfile.mkdtemp()
        >>> src = "FBX_KERNEL int fbx_ahead(int x) { return x * 2; }"
        >>> ahead = BuildAhead([src]); ahead.missing
        1
        >>> ahead.wait(); BuildAhead([src]).missing  # built: nothing left to do
        0
        >>> load_source(src).fbx_ahead(21)
        42
    """

    def __init__(self, sources: Iterable[str]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        todo = list(dict.fromkeys(s for s in (_with_target(s) for s in sources) if not _is_built(s)))
        #: how many of the sources were not in the cache (each compiled here)
        self.missing = len(todo)
        self._futures: list[Future[Path]] = []
        if todo:
            pool = ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1),
                                      thread_name_prefix="fbrapids-build-ahead")
            self._futures = [pool.submit(compile_source, s) for s in todo]
            pool.shutdown(wait=False)  # its threads end with their builds

    def wait(self) -> None:
        """Wait for every build started here."""
        for f in self._futures:
            try:
                f.result()
            except Exception as exc:  # noqa: BLE001 -- raised again, with its context, by load_source
                log.debug("building ahead failed (load_source will say why): %s", exc)


def library_key(source: str) -> str:
    """The kernel cache's key of the library :func:`load_source` builds from ``source``: a
    hash of the text (``fbx_target.h`` in), the compiler's version and the flags.

    Example:
        >>> library_key("int f(void) { return 1; }") == library_key("int f(void) { return 2; }")
        False
    """
    return _text_key(_with_target(source), find_compiler())


def _text_key(text: str, cc: str) -> str:
    """The cache key of ``text`` compiled by ``cc`` with :data:`FLAGS`."""
    return source_key(text, _compiler_id(cc), " ".join(FLAGS))


def _is_built(source: str) -> bool:
    """Whether the library of ``source`` is in the cache, verified; False where no compiler
    is found (the build, then the load, will say so)."""
    try:
        return verified(library_key(source) + ".so") is not None
    except CompilerNotFoundError:
        return False
