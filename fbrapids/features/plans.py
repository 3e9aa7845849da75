"""Plans for frames: a frame's schema and backend -> a :class:`~fbrapids.kernels.Plan`,
and its compiled runtime.

:func:`compiled_plan` remembers the runtime of each (features, schema, backend, fused,
device budget, operator registry generation) it has seen (the last RUNTIME_MEMO of them),
so an eager extract over a small frame (a served request) does not re-plan and re-hash the
plan on every call; :func:`memo_stats` counts plans built and memo hits.

Example:
    >>> import pandas as pd
    >>> from fbrapids import ops
    >>> plan_for(pd.DataFrame({"ts": [0]}), {"h": ops.hour("ts")}).num_ops
    1
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from fbrapids.features.schema import check_columns, columns_used, schema_of
from fbrapids.frames import backend as backends
from fbrapids.kernels import DEVICE_BUDGET_FRACTION, Plan, Runtime, as_expr, build_plan, compiled, registry_generation

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.features.feature_map import FeatureMap
    from fbrapids.frames.backend import FrameLike

#: compiled runtimes remembered by (features, schema, backend, fused, device budget, registry generation)
RUNTIME_MEMO = 256
_memo: OrderedDict[tuple, Runtime] = OrderedDict()
_memo_lock = threading.Lock()
_memo_counts = {"plans_built": 0, "memo_hits": 0}


def device_budget(be: backends.Backend) -> int | None:
    """Bytes an operator may keep resident on the device (None: no device): the
    DEVICE_BUDGET_FRACTION of free device memory, rounded down to a power of two.  The
    rounding keeps the plan memo's key (which holds the budget) still while free memory
    moves by a few allocations between partitions, so the memo hits; a plan changes only
    when free memory halves or doubles.

    Example:
        >>> class Device:
        ...     def __init__(self, free): self.free = free
        ...     def free_device_memory(self): return self.free
        >>> device_budget(Device(30 << 30)) == device_budget(Device((30 << 30) - 12345)) == 8 << 30
        True
    """
    free = be.free_device_memory()
    if free is None:
        return None
    budget = int(free * DEVICE_BUDGET_FRACTION)
    return 0 if budget <= 0 else 1 << (budget.bit_length() - 1)


def _plan_inputs(frame: FrameLike, features: FeatureMap) -> tuple[dict, str, int | None]:
    """What a plan of ``features`` over ``frame`` depends on: the schema of the columns
    used, the backend's name and its device budget.

    A column no feature can read is a :class:`~fbrapids.errors.FeatureError` naming the
    feature, the column and the frame's columns.

    Example:
        >>> import pandas as pd
        >>> from fbrapids import ops
        >>> plan_for(pd.DataFrame({"ts": [0], "u": [1]}), {"h": ops.hour("tss")})
        Traceback (most recent call last):
        ...
        fbrapids.errors.FeatureError: feature 'h': column 'tss' is not in the frame (columns: ts, u)
    """
    check_columns(frame, features)
    be = backends.backend_of(frame)
    return schema_of(frame, columns_used(features)), be.name, device_budget(be)


def plan_for(frame: FrameLike, features: FeatureMap, fused: bool = True) -> Plan:
    """The plan ``features`` get over ``frame``'s schema (no compilation)."""
    return _build(features, fused, *_plan_inputs(frame, features))


def _build(features: FeatureMap, fused: bool, schema: dict, backend: str, budget: int | None) -> Plan:
    with _memo_lock:
        _memo_counts["plans_built"] += 1
    return build_plan(dict(features), schema, backend=backend, fused=fused, device_budget=budget)


def compiled_plan(frame: FrameLike, features: FeatureMap, fused: bool = True) -> Runtime:
    """The compiled plan (HostPlan / CudaPlan) for eager ``frame``; its ``.stats`` count launches.

    Example:
        >>> import pandas as pd
        >>> from fbrapids import ops
        >>> before = memo_stats()
        >>> feats = {"h": ops.hash_bucket("u", 97)}
        >>> a = compiled_plan(pd.DataFrame({"u": [1, 2]}), feats)
        >>> b = compiled_plan(pd.DataFrame({"u": [3]}), feats)  # same features, same schema
        >>> a is b, memo_stats()["plans_built"] - before["plans_built"] <= 1
        (True, True)
    """
    schema, backend, budget = _plan_inputs(frame, features)
    try:
        # operators are named by the key: a redefined operator moves the registry's generation
        key: tuple | None = (tuple((name, as_expr(e).key) for name, e in features.items()),
                             tuple(schema.items()), backend, fused, budget, registry_generation())
        hash(key)
    except TypeError:  # a parameter with no hashable key: plan every time
        key = None
    if key is not None:
        with _memo_lock:
            hit = _memo.get(key)
            if hit is not None:
                _memo.move_to_end(key)
                _memo_counts["memo_hits"] += 1
                return hit
    runtime = compiled(_build(features, fused, schema, backend, budget))
    if key is not None:
        with _memo_lock:
            _memo[key] = runtime
            while len(_memo) > RUNTIME_MEMO:
                _memo.popitem(last=False)
    return runtime


def memo_stats() -> dict[str, int]:
    """``plans_built`` (by :func:`plan_for` and :func:`compiled_plan`) and ``memo_hits``
    (eager runs whose compiled plan came from the memo) in this process."""
    with _memo_lock:
        return dict(_memo_counts)
