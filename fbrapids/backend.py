"""The one place that decides CPU or GPU, and knows which libraries back each.

Every other module asks this one for its frame library (pandas / cudf), its array
library (numpy / cupy), the dask backend name and the free device memory.  Nothing else
in fbrapids imports cudf, dask_cudf or cupy directly.

Selection order: an explicit ``name`` argument, then the ``FBRAPIDS_BACKEND``
environment variable (``cpu`` | ``gpu`` | ``auto``), then automatic (GPU when cudf imports
and a CUDA device is present).

Example:
    >>> from fbrapids.backend import get_backend
    >>> be = get_backend("cpu")
    >>> be.name, be.xdf.__name__, be.xp.__name__, be.dask_backend
    ('cpu', 'pandas', 'numpy', 'pandas')
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
from fbrapids.errors import BackendUnavailableError

log = logging.getLogger(__name__)

ENV_VAR = "FBRAPIDS_BACKEND"
_VALID = ("cpu", "gpu", "auto")


@functools.lru_cache(maxsize=None)
def _try_import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # ImportError, but also CUDA driver errors raised at import
        log.debug("import %s failed: %s", name, exc)
        return None


@functools.lru_cache(maxsize=None)
def gpu_missing() -> tuple[str, ...]:
    """What the GPU backend lacks on this machine: an empty tuple when it is usable.

    Example:
        >>> isinstance(gpu_missing(), tuple)
        True
    """
    missing = []
    for mod, pkg in (("cudf", "cudf-cu13"), ("dask_cudf", "dask-cudf-cu13"), ("cupy", "cupy-cuda13x")):
        if _try_import(mod) is None:
            missing.append(f"python package {pkg!r} (import {mod})")
    cupy = _try_import("cupy")
    if cupy is not None:
        try:
            if cupy.cuda.runtime.getDeviceCount() < 1:
                missing.append("a CUDA device (none found)")
        except Exception as exc:
            missing.append(f"a CUDA device ({exc})")
    return tuple(missing)


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

        Example:
            >>> get_backend("cpu").free_device_memory() is None
            True
        """
        if not self.is_gpu:
            return None
        free, _total = self.xp.cuda.runtime.memGetInfo()
        return int(free)

    def to_host(self, obj: Any) -> Any:
        """A pandas / numpy copy of a cudf / cupy object; CPU objects pass through."""
        return to_host(obj)

    def __repr__(self) -> str:
        return f"Backend({self.name!r}, frames={self.xdf.__name__}, arrays={self.xp.__name__})"


CPU = Backend("cpu", pd, np, "pandas")


@functools.lru_cache(maxsize=None)
def _gpu_backend() -> Backend:
    missing = gpu_missing()
    if missing:
        raise BackendUnavailableError(
            "the GPU backend needs " + "; ".join(missing)
            + ". Install the extra with `pip install 'fbrapids[gpu]'` on a machine with an NVIDIA GPU, "
            f"or use the CPU backend ({ENV_VAR}=cpu)."
        )
    return Backend("gpu", _try_import("cudf"), _try_import("cupy"), "cudf")


def resolve_name(name: str | None = None) -> str:
    """The backend name in force: the argument, else ``$FBRAPIDS_BACKEND``, else automatic.

    Example:
        >>> resolve_name("cpu")
        'cpu'
    """
    chosen = (name or os.environ.get(ENV_VAR) or "auto").strip().lower()
    if chosen not in _VALID:
        source = "argument" if name else f"${ENV_VAR}"
        raise ValueError(f"unknown backend {chosen!r} from {source}; expected one of {', '.join(_VALID)}")
    if chosen == "auto":
        chosen = "cpu" if gpu_missing() else "gpu"
    return chosen


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


def is_gpu_object(obj: Any) -> bool:
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


def backend_of(obj: Any) -> Backend:
    """The backend that holds ``obj`` (a frame, series, array, or dask collection).

    Example:
        >>> import pandas as pd
        >>> backend_of(pd.DataFrame()).name
        'cpu'
    """
    return _gpu_backend() if is_gpu_object(obj) else CPU


def to_host(obj: Any) -> Any:
    """Copy a cudf / cupy object to pandas / numpy; anything else is returned as is.

    Example:
        >>> import numpy as np
        >>> to_host(np.arange(3)).tolist()
        [0, 1, 2]
    """
    if is_gpu_object(obj):
        if hasattr(obj, "to_pandas"):
            return obj.to_pandas()
        if hasattr(obj, "get"):
            return obj.get()
    return obj


def to_backend(obj: Any, backend: Backend) -> Any:
    """Move an eager frame / array to ``backend`` (a no-op when it is there already).

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


def cudf_module() -> ModuleType | None:
    """cudf when importable, else None (for registering accessors)."""
    return _try_import("cudf")
