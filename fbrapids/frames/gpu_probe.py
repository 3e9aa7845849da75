"""Whether the GPU backend can run here, asked without importing pandas, cudf, cupy or
torch: ``find_spec`` for the packages, the driver (``libcuda``) for the devices.  The
command line asks it before any heavy import (``fbrapids demo --backend gpu`` on a machine
without a GPU fails in well under a second); :mod:`fbrapids.frames.backend` re-exports it.

Example:
    >>> from fbrapids.frames.gpu_probe import gpu_missing
    >>> isinstance(gpu_missing(), tuple)
    True
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import sys

ENV_VAR = "FBRAPIDS_BACKEND"


# the import names and pip packages of the GPU backend, checked installed without importing them
GPU_PACKAGES = (("cudf", "cudf-cu13"), ("dask_cudf", "dask-cudf-cu13"), ("cupy", "cupy-cuda13x"),
                ("pylibcudf", "pylibcudf-cu13"), ("rmm", "rmm-cu13"))
_CUDA_ERROR_NO_DEVICE = 100


def installed(name: str) -> bool:
    """Whether module ``name`` can be found (without importing it).

    >>> installed("json"), installed("no_such_module_fbx")
    (True, False)
    """
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@functools.lru_cache(maxsize=None)
def visible_devices() -> tuple[int, str]:
    """``(count, why)``: the CUDA devices this process sees, asked of the driver (``libcuda``)
    directly -- no cudf, cupy or torch is imported.  ``why`` says why there are none.

    Example:
        >>> n, why = visible_devices()
        >>> n > 0 or why.startswith("no CUDA device is visible")
        True
    """
    where = os.environ.get("CUDA_VISIBLE_DEVICES")
    scope = f" (CUDA_VISIBLE_DEVICES={where!r})" if where is not None else ""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0, "no CUDA device is visible: there is no NVIDIA driver (libcuda.so.1 cannot be loaded)"
    rc = lib.cuInit(0)
    if rc == _CUDA_ERROR_NO_DEVICE:
        return 0, f"no CUDA device is visible{scope}: the driver reports none"
    if rc != 0:
        return 0, f"no CUDA device is visible{scope}: the driver's cuInit failed with CUresult {rc}"
    count = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0 or count.value < 1:
        return 0, f"no CUDA device is visible{scope}: the driver counts {count.value}"
    return int(count.value), ""


@functools.lru_cache(maxsize=None)
def gpu_missing() -> tuple[str, ...]:
    """What the GPU backend lacks on this machine: an empty tuple when it is usable.

    Neither the RAPIDS packages nor cupy are imported to find out (``find_spec`` and the
    driver are asked), so the CPU backend never loads them.

    Example:
        >>> isinstance(gpu_missing(), tuple)
        True
    """
    missing = [f"python package {pkg!r} (import {mod})" for mod, pkg in GPU_PACKAGES if not installed(mod)]
    count, why = visible_devices()
    if count < 1:
        missing.append(why)
    return tuple(missing)


def gpu_unavailable_message(missing: tuple[str, ...]) -> str:
    """Why the GPU backend cannot be made, and what to do -- the extra only when a package is
    missing, the device only when none is visible.

    Example:
        >>> gpu_unavailable_message(("no CUDA device is visible: the driver reports none",))
        'the GPU backend needs a CUDA device: no CUDA device is visible: the driver reports none. The RAPIDS packages are installed; run on a machine with an NVIDIA GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES), or use the CPU backend (FBRAPIDS_BACKEND=cpu).'
    """
    packages = [m for m in missing if m.startswith("python package")]
    device = [m for m in missing if not m.startswith("python package")]
    if not packages:
        return ("the GPU backend needs a CUDA device: " + "; ".join(device) + ". The RAPIDS packages are installed; "
                "run on a machine with an NVIDIA GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES), "
                f"or use the CPU backend ({ENV_VAR}=cpu).")
    return ("the GPU backend needs " + "; ".join(missing)
            + ". Install the extra with `pip install 'fbrapids[gpu]'`" + (" on a machine with an NVIDIA GPU" if device else "")
            + f", or use the CPU backend ({ENV_VAR}=cpu).")
