"""Compiled plans, once per process: a cache of :class:`~fbrapids.kernels.runtime.Runtime`
objects keyed by the plan's hash and the target.

Dask workers keep their compiled plans here, so a plan is compiled (or loaded from the disk
cache) once per worker process, never once per partition.

Example:
    >>> from fbrapids import ops
    >>> from fbrapids.kernels.plan import build_plan
    >>> p = build_plan({"h": ops.hour("ts")}, {"ts": "i64"})
    >>> compiled(p) is compiled(p), compilations() >= 1
    (True, True)
"""

from __future__ import annotations

import threading

from fbrapids.kernels.plan import Plan
from fbrapids.kernels.runtime import Runtime

_plans: dict[tuple[str, str], Runtime] = {}
_lock = threading.Lock()
_compilations = 0


def target_of(plan: Plan) -> str:
    """The runtime target a plan runs on: ``"cuda"`` on the GPU backend, else ``"host"``."""
    return "cuda" if plan.backend == "gpu" else "host"


def compiled(plan: Plan, target: str | None = None) -> Runtime:
    """The per-process compiled plan for ``plan`` (compiled on first use)."""
    global _compilations
    target = target or target_of(plan)
    key = (plan.key, target)
    with _lock:
        hit = _plans.get(key)
    if hit is not None:
        return hit
    if target == "host":
        from fbrapids.kernels.runtime_host import HostPlan

        runtime: Runtime = HostPlan(plan)
    else:
        from fbrapids.kernels.runtime_cuda import CudaPlan

        runtime = CudaPlan(plan)
    with _lock:
        if key not in _plans:
            _compilations += 1
        return _plans.setdefault(key, runtime)


def cached(plan: Plan, target: str | None = None) -> Runtime | None:
    """The compiled plan for ``plan`` if this process has one (compiles nothing)."""
    with _lock:
        return _plans.get((plan.key, target or target_of(plan)))


def compilations() -> int:
    """Plans this process compiled (each plan at most once per target)."""
    return _compilations


def cached_plans() -> int:
    """Compiled plans this process holds."""
    with _lock:
        return len(_plans)
