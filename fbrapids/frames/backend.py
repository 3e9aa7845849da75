"""The one place that decides CPU or GPU, and knows which libraries back each.

Every other module asks this one for its frame library (pandas / cudf), its array
library (numpy / cupy), the dask backend name and the free device memory.  Nothing else
in fbrapids imports cudf, dask_cudf or cupy directly.

Selection order: an explicit ``name`` argument, then the ``FBRAPIDS_BACKEND``
environment variable (``cpu`` | ``gpu`` | ``auto``), then automatic (GPU when cudf imports
and a CUDA device is present).

Device memory (GPU backend): the first time the GPU backend is made in a process, it puts
an RMM pool (``rmm.mr.PoolMemoryResource``) under a ``StatisticsResourceAdaptor`` as the
current device resource, routes cupy through ``rmm_cupy_allocator`` and, when torch has
not touched CUDA yet, torch through ``rmm_torch_allocator`` -- one pool for cudf, cupy,
the kernels and the trainer.  In a dask-cuda worker the pool dask-cuda made is adopted
(never re-initialised).  One pool per device: a process that starts a local dask-cuda
cluster whose worker uses its device makes no pool of its own (the worker makes one of the
same share; :func:`leave_pool_to_workers`), or, when it has one already, the workers'
pools are sized from the memory left (:func:`cuda_cluster_options` ``shared_free``).  ``FBRAPIDS_RMM_POOL`` sets the initial pool size (``"8GiB"``,
``"0.5"`` = half the free memory, the default; ``"off"``: no pool);
``FBRAPIDS_RMM_TORCH=0`` leaves torch on its own allocator.
:meth:`Backend.free_device_memory` counts what the pool holds but has not handed out as
free, so join and operator placement see the memory they can really use.

Example:
    >>> from fbrapids.frames.backend import get_backend
    >>> be = get_backend("cpu")
    >>> be.name, be.xdf.__name__, be.xp.__name__, be.dask_backend
    ('cpu', 'pandas', 'numpy', 'pandas')
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
import re
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Hashable, Protocol, TypeAlias, TypeGuard, Union

import numpy as np
import pandas as pd
from pandas.api.extensions import ExtensionDtype

from fbrapids.errors import ArgumentError, BackendNameError, BackendUnavailableError

# the probes of the GPU backend import neither pandas nor cudf (the CLI asks them before any heavy import)
from fbrapids.frames.gpu_probe import (  # noqa: F401
    ENV_VAR,
    GPU_PACKAGES,
    gpu_missing,
    gpu_unavailable_message,
    installed,
    visible_devices,
)

if TYPE_CHECKING:  # names for the type checker only: importing the GPU libraries here would load them
    import cudf
    import dask.dataframe as dd
    import pylibcudf
    from dask.dataframe.dask_expr._collection import FrameBase
    from typing_extensions import TypeIs

log = logging.getLogger(__name__)

#: "some dataframe" in a signature: a pandas, cudf, dask or dask-cudf DataFrame (dask-cudf
#: frames are dask's class).  cudf has no stubs on a machine without it (mypy sees ``Any``
#: there); pandas' (pandas-stubs, installed with the test extra) and dask's are checked.
FrameLike: TypeAlias = Union[pd.DataFrame, "cudf.DataFrame", "dd.DataFrame"]
#: one column of a :data:`FrameLike`
SeriesLike: TypeAlias = Union[pd.Series, "cudf.Series", "dd.Series"]
#: an eager frame: a :data:`FrameLike` that is no dask collection (one partition of one)
EagerFrame: TypeAlias = Union[pd.DataFrame, "cudf.DataFrame"]
#: one column of an :data:`EagerFrame`
EagerSeries: TypeAlias = Union[pd.Series, "cudf.Series"]
#: the row labels of an :data:`EagerFrame`
IndexLike: TypeAlias = Union[pd.Index, "cudf.Index"]
#: a column's dtype: numpy's or a pandas extension dtype (cudf's dtypes derive from pandas' ``ExtensionDtype``)
DtypeObj: TypeAlias = Union[np.dtype, ExtensionDtype]

_VALID = ("cpu", "gpu", "auto")
POOL_ENV = "FBRAPIDS_RMM_POOL"
TORCH_POOL_ENV = "FBRAPIDS_RMM_TORCH"
DEFAULT_POOL = "0.5"
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


@functools.lru_cache(maxsize=None)
def try_import(name: str) -> ModuleType | None:
    """The module ``name``, or None when it cannot be imported.

    >>> try_import("json").__name__, try_import("no_such_module_fbx")
    ('json', None)
    """
    try:
        return importlib.import_module(name)
    except Exception as exc:  # ImportError, but also CUDA driver errors raised at import
        log.debug("import %s failed: %s", name, exc)
        return None


@dataclass(frozen=True)
class Backend:
    """The libraries behind one backend.

    Attributes:
        name: ``"cpu"`` or ``"gpu"``.
        xdf: the eager frame library (pandas or cudf).
        xp: the array library (numpy or cupy).
        dask_backend: the dask.dataframe backend name (``"pandas"`` or ``"cudf"``).
    """

    name: str
    xdf: ModuleType
    xp: ModuleType
    dask_backend: str

    @property
    def is_gpu(self) -> bool:
        return self.name == "gpu"

    def free_device_memory(self) -> int | None:
        """Free device memory in bytes; ``None`` on the CPU backend (there is no device).

        On the GPU: the driver's free memory plus what the RMM pool holds but has not
        handed out (the driver counts the whole pool as used).

        Example:
            >>> get_backend("cpu").free_device_memory() is None
            True
        """
        if not self.is_gpu:
            return None
        free, _total = self.xp.cuda.runtime.memGetInfo()
        return int(free) + device_memory().pool_free_bytes()

    def to_host(self, obj: object) -> Any:
        """A pandas / numpy copy of a cudf / cupy object; CPU objects pass through (the
        result's type is :func:`to_host`'s)."""
        return to_host(obj)

    def __repr__(self) -> str:
        return f"Backend({self.name!r}, frames={self.xdf.__name__}, arrays={self.xp.__name__})"


CPU = Backend("cpu", pd, np, "pandas")


# -- device memory (RMM) -----------------------------------------------------------------
def parse_pool_size(text: str | None, free_bytes: int) -> int | None:
    """The initial RMM pool size for a ``FBRAPIDS_RMM_POOL`` value; None for no pool.

    A number below 1 is a fraction of ``free_bytes``; otherwise bytes with an optional unit
    (``k``/``M``/``G``/``T`` decimal, ``KiB``/``MiB``/``GiB``/``TiB`` binary).  Rounded down to
    a multiple of 256 bytes, as RMM requires.

    Example:
        >>> parse_pool_size("0.5", 1000), parse_pool_size("1GiB", 0), parse_pool_size("off", 10)
        (256, 1073741824, None)
    """
    value = (text if text is not None else DEFAULT_POOL).strip().lower()
    if value in ("off", "none", "no", "0", "false", ""):
        return None
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([a-z]*)", value)
    if m is None or m.group(2) not in _UNITS:
        raise ArgumentError(f"${POOL_ENV}={text!r} is not a size: use a fraction of free memory (0.5), "
                         "bytes with a unit (8GiB, 512MB), or off")
    number = float(m.group(1))
    size = int(number * free_bytes) if number < 1 and not m.group(2) else int(number * _UNITS[m.group(2)])
    return size // 256 * 256


def resource_chain(mr: object) -> list[object]:
    """``mr`` and the resources under it (adaptors expose ``get_upstream()``)."""
    chain: list[object] = []
    while mr is not None and len(chain) < 32:
        chain.append(mr)
        mr = mr.get_upstream() if hasattr(mr, "get_upstream") else None
    return chain


class AllocationCounts(Protocol):
    """What fbrapids reads of an RMM ``StatisticsResourceAdaptor``'s ``allocation_counts``."""

    current_bytes: int


class PoolResource(Protocol):
    """An ``rmm.mr.PoolMemoryResource``, as fbrapids asks it."""

    def pool_size(self) -> int: ...


class StatisticsResource(Protocol):
    """An ``rmm.mr.StatisticsResourceAdaptor``, as fbrapids asks it."""

    @property
    def allocation_counts(self) -> AllocationCounts: ...


@dataclass
class DeviceMemory:
    """The RMM resources this process allocates device memory from.

    Attributes:
        pool: the ``PoolMemoryResource`` (None: no pool, e.g. ``FBRAPIDS_RMM_POOL=off``).
        stats: the ``StatisticsResourceAdaptor`` over it (None where there is no RMM).
        created: True when fbrapids made the pool, False when it adopted dask-cuda's.
        torch: True when torch allocates through RMM too.
        counted: True when ``stats`` has counted every allocation from the pool since it
            was made; False when fbrapids put it over a pool already in use (a dask-cuda
            worker's): what the pool handed out before is unknown to it.
    """

    pool: PoolResource | None = None
    stats: StatisticsResource | None = None
    created: bool = False
    torch: bool = False
    counted: bool = True

    def pool_free_bytes(self) -> int:
        """Bytes the pool holds but has not handed out (0 without a pool or statistics, and
        0 when the statistics came late: ``pool_size - current`` would count as free what
        the pool handed out before them, so join placement and the device budget would
        plan with memory that is taken).

        Example:
            >>> class Pool:
            ...     def pool_size(self): return 1000
            >>> class Stats:
            ...     class allocation_counts: current_bytes = 300
            >>> DeviceMemory(Pool(), Stats()).pool_free_bytes(), DeviceMemory(Pool(), Stats(), counted=False).pool_free_bytes()
            (700, 0)
        """
        if self.pool is None or self.stats is None or not self.counted:
            return 0
        used = int(self.stats.allocation_counts.current_bytes)
        return max(0, int(self.pool.pool_size()) - max(0, used))


#: why this process makes no RMM pool of its own (empty: it makes one): a local cluster's
#: worker on its device holds the device's pool (:func:`leave_pool_to_workers`)
_POOL_LEFT: list[str] = []
#: the pool this process made (:func:`_setup_device_memory`), once made
_POOL_MADE: list[PoolResource] = []


def leave_pool_to_workers(why: str) -> bool:
    """Called before a local dask-cuda cluster starts a worker on this process's device: this
    process then makes no RMM pool (its allocations go to RMM's default resource and torch
    keeps its own allocator), since the worker makes one of ``FBRAPIDS_RMM_POOL``'s share of
    the device and two such pools do not fit.  Returns False when it is too late (this
    process made its pool already): the caller sizes the workers' pools from the memory left
    (:func:`cuda_cluster_options` ``shared_free``).

    Example (changes this process's memory set-up: not run here):
        >>> leave_pool_to_workers("the local cluster's worker on GPU 0")  # doctest: +SKIP
        True
    """
    if _POOL_MADE:
        return False
    if why not in _POOL_LEFT:
        _POOL_LEFT.append(why)
    return True


def _setup_device_memory(rmm: ModuleType) -> DeviceMemory:
    """Make (or adopt) the RMM pool and the statistics over it, and route cupy and torch to it."""
    mr_mod = rmm.mr
    chain = resource_chain(mr_mod.get_current_device_resource())
    pool = next((r for r in chain if isinstance(r, mr_mod.PoolMemoryResource)), None)
    stats = next((r for r in chain if isinstance(r, mr_mod.StatisticsResourceAdaptor)), None)
    created, counted = False, True
    untouched = len(chain) == 1 and type(chain[0]) is mr_mod.CudaMemoryResource  # RMM's default
    if untouched:
        free, _total = mr_mod.available_device_memory()
        size = parse_pool_size(os.environ.get(POOL_ENV), int(free))
        if size is not None and _POOL_LEFT:
            log.info("no RMM pool in this process: %s holds the device's pool", _POOL_LEFT[0])
            size = None
        if size is not None:
            pool = mr_mod.PoolMemoryResource(mr_mod.CudaMemoryResource(), initial_pool_size=size)
            stats = mr_mod.StatisticsResourceAdaptor(pool)
            mr_mod.set_current_device_resource(stats)
            created = True
            _POOL_MADE.append(pool)
            log.info("RMM pool of %s bytes (%s=%s)", f"{size:,}", POOL_ENV, os.environ.get(POOL_ENV, DEFAULT_POOL))
    elif pool is not None and stats is None:  # e.g. a dask-cuda worker's pool: count over it, never re-initialise it
        stats = mr_mod.StatisticsResourceAdaptor(mr_mod.get_current_device_resource())
        mr_mod.set_current_device_resource(stats)
        counted = False  # it counts from now on; what the pool handed out before is unknown
    cupy = try_import("cupy")
    allocators = try_import("rmm.allocators.cupy")
    if cupy is not None and allocators is not None:
        cupy.cuda.set_allocator(allocators.rmm_cupy_allocator)
    return DeviceMemory(pool, stats, created, _route_torch() if pool is not None else False, counted)


def _route_torch() -> bool:
    """torch's CUDA allocations through RMM, when torch has not allocated on CUDA yet."""
    if os.environ.get(TORCH_POOL_ENV, "1").strip() in ("0", "off", "false", "no"):
        return False
    torch = try_import("torch")
    allocator = getattr(try_import("rmm.allocators.torch"), "rmm_torch_allocator", None)
    if torch is None or allocator is None:
        return False
    if torch.cuda.is_initialized():
        log.info("torch already uses CUDA: it keeps its own allocator beside the RMM pool")
        return False
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as exc:  # torch refuses once its allocator has been used
        log.info("torch keeps its own allocator: %s", exc)
        return False
    return True


@functools.lru_cache(maxsize=None)
def device_memory() -> DeviceMemory:
    """This process's :class:`DeviceMemory`, set up once; empty where RMM is absent.

    Example:
        >>> isinstance(device_memory(), DeviceMemory)
        True
    """
    rmm = try_import("rmm") if not gpu_missing() else None
    return _setup_device_memory(rmm) if rmm is not None else DeviceMemory()


def cuda_cluster_options(shared_free: int | None = None, **given: object) -> dict[str, object]:
    """dask-cuda ``LocalCUDACluster`` options: every worker gets an RMM pool (the share of
    the device ``FBRAPIDS_RMM_POOL`` names, default half: dask-cuda takes a fraction of the
    device's total memory) with cupy routed to it; ``given`` options win.  ``shared_free``:
    the device's free bytes now, when this process holds a pool on a device a worker uses
    (:func:`leave_pool_to_workers` came too late); a fraction is then of that, in bytes, so
    the two pools together fit the device.

    Example:
        >>> cuda_cluster_options(n_workers=1)["rmm_pool_size"]
        0.5
        >>> cuda_cluster_options(shared_free=1000)["rmm_pool_size"]
        256
        >>> "rmm_pool_size" in cuda_cluster_options(rmm_async=True)
        False
    """
    opts = dict(given)
    text = os.environ.get(POOL_ENV, DEFAULT_POOL).strip()
    if not opts.get("rmm_async") and "rmm_pool_size" not in opts and parse_pool_size(text, 1 << 40) is not None:
        try:
            share = float(text)
        except ValueError:
            share = None
        if share is not None and share < 1:
            opts["rmm_pool_size"] = share if shared_free is None else parse_pool_size(text, shared_free)
        else:
            opts["rmm_pool_size"] = text
    opts.setdefault("rmm_allocator_external_lib_list", ["cupy"])
    return opts


@functools.lru_cache(maxsize=None)
def _gpu_backend() -> Backend:
    missing = gpu_missing()
    if missing:
        raise BackendUnavailableError(gpu_unavailable_message(missing))
    modules = {}
    for mod, pkg in GPU_PACKAGES:
        try:
            modules[mod] = importlib.import_module(mod)
        except Exception as exc:  # ImportError, or a CUDA library error raised at import
            raise BackendUnavailableError(f"the GPU backend could not import {mod} (package {pkg!r}): "
                                          f"{type(exc).__name__}: {exc}") from exc
    backend = Backend("gpu", modules["cudf"], modules["cupy"], "cudf")
    device_memory()  # the RMM pool, before this process allocates anything on the device
    return backend


def resolve_name(name: str | None = None) -> str:
    """The backend name in force: the argument, else ``$FBRAPIDS_BACKEND``, else automatic.

    Example:
        >>> resolve_name("cpu")
        'cpu'
    """
    chosen = (name or os.environ.get(ENV_VAR) or "auto").strip().lower()
    if chosen not in _VALID:
        source = "argument" if name else f"${ENV_VAR}"
        raise BackendNameError(f"unknown backend {chosen!r} from {source}; expected one of {', '.join(_VALID)}")
    if chosen == "auto":
        chosen = "gpu" if not gpu_missing() and _gpu_importable() else "cpu"
    return chosen


@functools.lru_cache(maxsize=None)
def _gpu_importable() -> bool:
    """Whether the GPU packages import (asked only where a device is visible: on a machine with
    the wheels but no device, ``auto`` never loads them)."""
    broken = [mod for mod, _pkg in GPU_PACKAGES if try_import(mod) is None]
    if broken:
        log.warning("a CUDA device is visible but %s do not import; the automatic backend is the CPU "
                    "(FBRAPIDS_BACKEND=gpu says why)", ", ".join(broken))
    return not broken


def get_backend(name: str | Backend | None = None) -> Backend:
    """The backend for ``name`` (``"cpu"``, ``"gpu"``, ``"auto"`` or None for the default).

    Raises:
        BackendUnavailableError: ``"gpu"`` was asked for where cudf, cupy or a device is missing.

    Example:
        >>> get_backend("cpu").name
        'cpu'
    """
    if isinstance(name, Backend):
        return name
    return _gpu_backend() if resolve_name(name) == "gpu" else CPU


def is_dask(obj: object) -> TypeIs[FrameBase]:
    """True for a dask collection with partitions and a meta object: a dask or dask-cudf
    DataFrame or Series (not a delayed value, not an eager frame).  The one "is this a dask
    frame" test of the package (:func:`frame_kind`).

    Example:
        >>> import pandas as pd, dask.dataframe as dd
        >>> df = pd.DataFrame({"a": [1, 2]})
        >>> is_dask(df), is_dask(dd.from_pandas(df, npartitions=1)), is_dask(dd.from_pandas(df, npartitions=1)["a"])
        (False, True, True)
    """
    return hasattr(obj, "__dask_graph__") and hasattr(obj, "npartitions") and hasattr(obj, "_meta")


def is_eager_frame(frame: FrameLike) -> TypeIs[EagerFrame]:
    """Whether ``frame`` is held in memory (pandas or cudf), not a dask collection: the
    complement of :func:`is_dask`, told to the type checker (a frame for which it is False
    is a dask one).  A dask frame is worked on partition by partition; each partition
    arrives as an :data:`EagerFrame`.

    Example:
        >>> import pandas as pd, dask.dataframe as dd
        >>> df = pd.DataFrame({"a": [1, 2]})
        >>> is_eager_frame(df), is_eager_frame(dd.from_pandas(df, npartitions=1))
        (True, False)
    """
    return not is_dask(frame)


def is_dask_frame(obj: object) -> TypeIs[dd.DataFrame]:
    """True for a dask or dask-cudf DataFrame (:func:`is_dask`, and no Series): the test that
    narrows a :data:`FrameLike` to dask's DataFrame for the type checker.

    Example:
        >>> import pandas as pd, dask.dataframe as dd
        >>> df = dd.from_pandas(pd.DataFrame({"a": [1, 2]}), npartitions=1)
        >>> is_dask_frame(df), is_dask_frame(df["a"]), is_dask_frame(pd.DataFrame())
        (True, False, False)
    """
    return is_dask(obj) and isinstance(obj, dask_dataframe().DataFrame)  # dask is loaded: obj is its object


def frame_kind(obj: object) -> str:
    """What kind of frame (or series) ``obj`` is: ``"dask"`` (dask or dask-cudf, lazy),
    ``"cudf"`` (an eager cudf object, or a cupy array) or ``"pandas"`` (anything else: pandas,
    numpy).  Asked by module name: it never imports cudf.

    Example:
        >>> import pandas as pd
        >>> frame_kind(pd.DataFrame()), frame_kind(pd.Series([1]))
        ('pandas', 'pandas')
    """
    if is_dask(obj):
        return "dask"
    return "cudf" if is_gpu_object(obj) else "pandas"


def is_gpu_object(obj: object) -> bool:
    """True for cudf / dask-cudf frames and series, and for cupy arrays.

    Checked by module name, so it never imports cudf itself.

    Example:
        >>> import pandas as pd
        >>> is_gpu_object(pd.DataFrame())
        False
    """
    meta = getattr(obj, "_meta", None)  # dask collections carry an eager meta object
    target = meta if meta is not None else obj
    mod = type(target).__module__.split(".")[0]
    return mod in ("cudf", "cupy", "dask_cudf")


def backend_of(obj: object) -> Backend:
    """The backend that holds ``obj`` (a frame, series, array, or dask collection).

    Example:
        >>> import pandas as pd
        >>> backend_of(pd.DataFrame()).name
        'cpu'
    """
    return _gpu_backend() if is_gpu_object(obj) else CPU


def to_host(obj: object) -> Any:
    """Copy a cudf / cupy object to pandas / numpy; anything else is returned as is.

    The result is typed ``Any``: its type is the pandas / numpy counterpart of the argument's,
    and the argument's cudf / cupy classes are unknown to the type checker (no stubs).

    cudf columns arrive as the CPU backend would hold them: list (and struct) columns
    Arrow-backed (``pd.ArrowDtype``), never object arrays of Python lists; integer and bool
    columns with nulls as pandas nullable dtypes (``Int64``), never float64 (whose bits
    lose ids above 2^53); everything else as cudf's ``to_pandas()`` gives it.

    Example:
        >>> import numpy as np
        >>> to_host(np.arange(3)).tolist()
        [0, 1, 2]
    """
    if is_gpu_object(obj):
        if hasattr(obj, "to_pandas"):
            return _cudf_to_host(obj)
        if hasattr(obj, "get"):
            return obj.get()
    return obj


def _cudf_to_host(obj: Union["cudf.DataFrame", "cudf.Series", "cudf.Index"]) -> pd.DataFrame | pd.Series | pd.Index:
    """A cudf frame, series or index as pandas, with the dtype rules of :func:`to_host`."""
    if hasattr(obj, "columns"):  # a cudf DataFrame: column by column, one index
        columns = {c: _series_to_host(obj[c]).array for c in obj.columns}  # arrays: no alignment
        return pd.DataFrame(columns, index=obj.index.to_pandas())
    if hasattr(obj, "null_count") and hasattr(obj, "index"):  # a cudf Series
        return _series_to_host(obj).set_axis(obj.index.to_pandas())
    return obj.to_pandas()  # an Index


def _series_to_host(s: "cudf.Series") -> pd.Series:
    """One cudf series as pandas (RangeIndex), with the dtype rules of :func:`to_host`."""
    kind = getattr(s.dtype, "kind", "O")
    nested = type(s.dtype).__name__ in ("ListDtype", "StructDtype")
    if nested:
        return s.to_pandas(index=False, arrow_type=True)
    if kind in "iub" and int(s.null_count) > 0:
        return s.to_pandas(index=False, nullable=True)
    return s.to_pandas(index=False)


def to_backend(obj: object, backend: Backend) -> Any:
    """Move an eager frame / array to ``backend`` (a no-op when it is there already).

    The result is typed ``Any`` for :func:`to_host`'s reason: on the GPU it is a cudf / cupy object.

    Example:
        >>> import pandas as pd
        >>> to_backend(pd.DataFrame({"a": [1]}), get_backend("cpu")).shape
        (1, 1)
    """
    if backend.is_gpu and not is_gpu_object(obj):
        # cudf's class constructors take pandas objects (the ``.from_pandas`` constructors
        # were deprecated in cudf 25.12 and removed after)
        if isinstance(obj, pd.DataFrame):
            return backend.xdf.DataFrame(obj)
        if isinstance(obj, pd.Series):
            return backend.xdf.Series(obj)
        return backend.xp.asarray(obj)
    if not backend.is_gpu:
        return to_host(obj)
    return obj


def dask_dataframe() -> ModuleType:
    """The dask.dataframe module (the only import path for it the rest of the code uses)."""
    import dask.dataframe as dd

    return dd


def cudf_module() -> ModuleType:
    """cudf, imported (for code handed cudf objects); BackendUnavailableError where the GPU
    backend is not usable."""
    missing = gpu_missing()
    if missing:
        raise BackendUnavailableError(gpu_unavailable_message(missing))
    cudf = try_import("cudf")
    if cudf is None:
        raise BackendUnavailableError("the GPU backend could not import cudf")
    return cudf


# -- code shared by pandas and cudf objects: the questions whose answer differs --------------
# Every helper below is checked against cudf 26.10's classes by the GPU conformance stage
# (scripts/gpu_conformance.py); call sites in shared code ask these instead of testing
# ``isinstance(x, pd.SomeDtype)`` or calling a pandas-only method on what may be cudf.
#: the cudf dtypes :func:`_is_cudf_dtype` is asked about (the classes are asked by name: cudf is never imported)
_CudfDtype: TypeAlias = Union["cudf.CategoricalDtype", "cudf.ListDtype", "cudf.StructDtype"]


def _is_cudf_dtype(dtype: object, name: str) -> TypeGuard[_CudfDtype]:
    """Whether ``dtype`` is cudf's dtype class ``name`` (one of :data:`_CudfDtype`)."""
    cls = type(dtype)
    return cls.__name__ == name and cls.__module__.split(".")[0] == "cudf"


def is_categorical(dtype: object) -> bool:
    """True for a pandas or a cudf categorical dtype (cudf's does not derive from pandas').

    Example:
        >>> is_categorical(pd.CategoricalDtype(["a"])), is_categorical(np.dtype("int64"))
        (True, False)
    """
    return isinstance(dtype, pd.CategoricalDtype) or _is_cudf_dtype(dtype, "CategoricalDtype")


def is_list_dtype(dtype: object) -> bool:
    """True for an Arrow-backed pandas list (or large list) dtype, and for cudf's ``ListDtype``.

    Example:
        >>> import pyarrow as pa
        >>> is_list_dtype(pd.ArrowDtype(pa.list_(pa.int64()))), is_list_dtype(np.dtype("int64"))
        (True, False)
    """
    if isinstance(dtype, pd.ArrowDtype):
        import pyarrow as pa

        return pa.types.is_list(dtype.pyarrow_dtype) or pa.types.is_large_list(dtype.pyarrow_dtype)
    return _is_cudf_dtype(dtype, "ListDtype")


def host_dtype(dtype: DtypeObj) -> DtypeObj:
    """The pandas dtype a cudf dtype stands for (categorical -> ``pd.CategoricalDtype``, list ->
    ``pd.ArrowDtype``); a pandas / numpy dtype is returned as it is.

    Example:
        >>> host_dtype(np.dtype("int8"))
        dtype('int8')
    """
    if _is_cudf_dtype(dtype, "CategoricalDtype"):
        return dtype.to_pandas()
    if _is_cudf_dtype(dtype, "ListDtype") or _is_cudf_dtype(dtype, "StructDtype"):
        return pd.ArrowDtype(dtype.to_arrow())
    return dtype


def is_host_arrow_strings(col: object) -> bool:
    """True for a pandas series of Arrow-backed strings, whose ``.array`` holds an Arrow array.

    A cudf string series has the same dtype object (``pd.StringDtype("pyarrow", na_value=nan)``)
    but its data lives on the device and it has no ``.array``, so the dtype alone cannot tell.

    Example:
        >>> is_host_arrow_strings(pd.Series(["a", None], dtype="str")), is_host_arrow_strings(pd.Series([1]))
        (True, False)
    """
    dtype = getattr(col, "dtype", None)
    return (isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow" and not is_gpu_object(col))


def on_index(series: EagerSeries, index: IndexLike) -> EagerSeries:
    """``series``' values, by position, labelled with ``index`` (no alignment): for assigning a
    column into a frame whose index has duplicate labels.  pandas and cudf alike (cudf series
    have neither ``.array`` nor ``set_axis``; both have ``copy(deep=False)`` and the ``index`` setter).

    Example:
        >>> s = on_index(pd.Series([1, 2], index=[5, 5]), pd.Index([0, 0]))
        >>> s.index.tolist(), s.tolist()
        ([0, 0], [1, 2])
    """
    if len(series) != len(index):
        raise ArgumentError(f"on_index: {len(series)} values for an index of {len(index)} labels")
    out = series.copy(deep=False)
    out.index = index
    return out


# pylibcudf type ids of the numpy integer dtypes (plc.types.TypeId member names)
_PLC_INT_IDS = {"int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
                "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64"}


def plc_int_type_id(dtype: DtypeObj | str) -> str:
    """The ``pylibcudf.types.TypeId`` member name of a numpy (or pandas nullable) integer dtype,
    or its name; an ArgumentError for another dtype (an extension dtype without a numpy one
    included).

    Example:
        >>> plc_int_type_id(np.dtype("uint16")), plc_int_type_id(pd.Int8Dtype()), plc_int_type_id("int32")
        ('UINT16', 'INT8', 'INT32')
    """
    given: object = dtype.numpy_dtype if hasattr(dtype, "numpy_dtype") else dtype
    try:
        np_dtype = np.dtype(given) if isinstance(given, (np.dtype, str)) else None
    except TypeError:
        np_dtype = None
    if np_dtype is None or np_dtype.name not in _PLC_INT_IDS:
        raise ArgumentError(f"{dtype} is not an integer dtype")
    return _PLC_INT_IDS[np_dtype.name]


def int_dtype_of_type_id(type_id: str) -> np.dtype:
    """The numpy dtype of a pylibcudf integer ``TypeId`` member name, signed or not as the id says.

    Example:
        >>> int_dtype_of_type_id("UINT32"), int_dtype_of_type_id("INT8")
        (dtype('uint32'), dtype('int8'))
    """
    for name, tid in _PLC_INT_IDS.items():
        if tid == type_id:
            return np.dtype(name)
    raise ArgumentError(f"pylibcudf type {type_id} is not an integer type")


def cudf_series_of(plc_column: pylibcudf.Column, dtype: DtypeObj, name: Hashable | None = None,
                   index: IndexLike | None = None) -> "cudf.Series":
    """A cudf series over a pylibcudf column, typed ``dtype`` -- the dtype of the column it was
    gathered from.  ``cudf.Series.from_pylibcudf`` rebuilds the dtype from the raw libcudf type
    (categorical -> its codes, ``Int64`` / ``boolean`` -> numpy, a datetime's zone dropped);
    cudf's own merge re-types its gathered columns the same way (``ColumnBase.create(col,
    original.dtype)``, cudf 26.10 ``cudf/core/join/join.py:771-775``), which checks that
    ``dtype``'s libcudf type is the column's (``cudf/core/column/column.py:378-384``).
    """
    from cudf.core.column import ColumnBase

    cudf = importlib.import_module("cudf")
    return cudf.Series._from_column(ColumnBase.create(plc_column, dtype), name=name, index=index)
