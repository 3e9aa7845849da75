"""Plans for frames: a frame's schema and backend -> a :class:`~fbrapids.kernels.Plan`,
and its compiled runtime.

Example:
    >>> import pandas as pd
    >>> from fbrapids import ops
    >>> plan_for(pd.DataFrame({"ts": [0]}), {"h": ops.hour("ts")}).num_ops
    1
"""

from __future__ import annotations

from typing import Any, Mapping

from fbrapids import backend as backends
from fbrapids.features.schema import columns_used, schema_of
from fbrapids.kernels import DEVICE_BUDGET_FRACTION, Plan, Runtime, build_plan, compiled


def device_budget(be: backends.Backend) -> int | None:
    """Bytes an operator may keep resident on the device (None: no device)."""
    free = be.free_device_memory()
    return None if free is None else int(free * DEVICE_BUDGET_FRACTION)


def plan_for(frame: Any, features: Mapping[str, Any], fused: bool = True) -> Plan:
    """The plan ``features`` get over ``frame``'s schema (no compilation)."""
    be = backends.backend_of(frame)
    schema = schema_of(frame, columns_used(features))
    return build_plan(dict(features), schema, backend=be.name, fused=fused, device_budget=device_budget(be))


def compiled_plan(frame: Any, features: Mapping[str, Any], fused: bool = True) -> Runtime:
    """The compiled plan (HostPlan / CudaPlan) for eager ``frame``; its ``.stats`` count launches."""
    return compiled(plan_for(frame, features, fused))
