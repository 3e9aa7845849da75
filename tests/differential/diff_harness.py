"""Run one public operation in every execution mode and compare it with an independent
reference, value by value.

The references live in the ``diffref_*`` modules beside this one. They are written from
the docstrings in plain Python / pandas / numpy / pyfarmhash and never import fbrapids;
this module is the only place that touches both sides.

Modes: ``eager`` (the pandas frame itself) and ``dask1`` / ``dask3`` / ``dask7`` (the same
frame as a dask frame of that many partitions, index kept as it is: duplicates,
unsorted and string indexes included). On a GPU the same cases run as ``cudf`` and
``dask_cudf1/3/7`` (the ``gpu`` family, ``gpu``-marked, skipped without a device).

Every dask result is checked twice: its ``_meta`` dtypes must equal the computed dtypes,
and its values must equal the reference's.

Hypothesis profiles: ``ci`` (the default; derandomised, so CI is reproducible) and
``thorough`` (many more examples, random). Choose one with
``FBRAPIDS_DIFF_PROFILE=thorough pytest tests/differential``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import os
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, settings

from fbrapids.frames import dask_tokens

# -- hypothesis profiles ------------------------------------------------------------------
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
            HealthCheck.large_base_example]
settings.register_profile("ci", max_examples=12, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=_SLOW_OK)
settings.register_profile("thorough", max_examples=400, deadline=None, print_blob=True,
                          suppress_health_check=_SLOW_OK)
PROFILE = os.environ.get("FBRAPIDS_DIFF_PROFILE", "ci")
if PROFILE not in ("ci", "thorough"):
    raise pytest.UsageError(f"FBRAPIDS_DIFF_PROFILE={PROFILE!r}: expected 'ci' or 'thorough'")
#: decorate every ``@given`` test with this: ``@DIFF`` (the profile chosen above)
DIFF = settings.get_profile(PROFILE)

# -- execution modes -----------------------------------------------------------------------
CPU_MODES = ("eager", "dask1", "dask3", "dask7")
GPU_MODES = ("cudf", "dask_cudf1", "dask_cudf3", "dask_cudf7")
#: parametrize a test with ``@pytest.mark.parametrize("family", FAMILIES)``
FAMILIES = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


def modes(family: str) -> tuple[str, ...]:
    """The execution modes of a family (``"cpu"`` or ``"gpu"``)."""
    return CPU_MODES if family == "cpu" else GPU_MODES


def is_dask_mode(mode: str) -> bool:
    return mode.startswith("dask")


def to_mode(df: pd.DataFrame, mode: str) -> Any:
    """``df`` as the frame of ``mode``: itself, cudf, or a dask frame of N partitions.

    ``sort=False`` keeps the index as it is (duplicate, unsorted and string indexes stay).
    """
    import dask.dataframe as dd

    if mode == "eager":
        return df
    if mode == "cudf":
        import cudf

        return cudf.DataFrame(df)
    n = int("".join(ch for ch in mode if ch.isdigit()))
    ddf = dd.from_pandas(df, npartitions=max(n, 1), sort=False)
    if mode.startswith("dask_cudf"):
        ddf = ddf.to_backend("cudf")
    return ddf


def dtypes_of(obj: Any) -> dict[Any, str]:
    if hasattr(obj, "dtypes") and hasattr(obj, "columns"):
        return {c: str(t) for c, t in obj.dtypes.items()}
    return {getattr(obj, "name", None): str(obj.dtype)}


def materialize(obj: Any, mode: str) -> Any:
    """The result of ``mode`` as pandas; a dask result's ``_meta`` dtypes must equal the
    computed ones (a wrong meta makes later dask steps plan for the wrong type)."""
    if is_dask_mode(mode):
        meta = dtypes_of(obj._meta)
        obj = obj.compute()
        got = dtypes_of(obj)
        assert meta == got, f"{mode}: _meta dtypes {meta} differ from computed dtypes {got}"
    if mode in ("cudf",) or mode.startswith("dask_cudf"):
        from fbrapids.frames.backend import to_host

        obj = to_host(obj)
    return obj


def run_modes(df: pd.DataFrame, fn: Callable[[Any], Any], family: str = "cpu",
              only: Iterable[str] | None = None) -> Iterator[tuple[str, Any]]:
    """``(mode, pandas result)`` of ``fn(frame)`` for ``df`` in each mode of ``family``.

    An exception from ``fn`` or from computing propagates, annotated with the mode.
    """
    for mode in (only or modes(family)):
        try:
            yield mode, materialize(fn(to_mode(df, mode)), mode)
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - re-raised with the mode named
            exc.add_note(f"[differential] raised in mode {mode!r}")
            raise


# -- values -------------------------------------------------------------------------------
MISSING = "<missing>"


def is_missing(v: Any) -> bool:
    """None, NaN, pd.NA and NaT (the null kinds a frame can hold)."""
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    if isinstance(v, (float, np.floating)) and math.isnan(v):
        return True
    if isinstance(v, (np.datetime64, np.timedelta64)) and np.isnat(v):
        return True
    return False


def canon(v: Any) -> Any:
    """One value as a plain Python object: nulls as MISSING, numpy scalars as int / float /
    bool / str, arrays and lists as lists, timestamps as ``pd.Timestamp``."""
    if isinstance(v, (list, tuple, np.ndarray)) or (hasattr(v, "__len__") and hasattr(v, "tolist")
                                                   and not isinstance(v, (str, bytes))):
        seq = v.tolist() if hasattr(v, "tolist") else list(v)
        return [canon(x) for x in seq]
    if isinstance(v, dict):
        return {k: canon(x) for k, x in v.items()}
    if is_missing(v):
        return MISSING
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    if isinstance(v, decimal.Decimal):
        return v
    if isinstance(v, (np.datetime64, dt.datetime)):
        return pd.Timestamp(v)
    if isinstance(v, np.str_):
        return str(v)
    return v


def values_of(s: pd.Series | Sequence[Any]) -> list[Any]:
    """A series' values (positionally) as canonical Python objects."""
    if isinstance(s, pd.Series):
        s = s.astype(object).tolist() if not isinstance(s.dtype, pd.ArrowDtype) else s.tolist()
    return [canon(v) for v in s]


def same_value(got: Any, want: Any, rtol: float, atol: float) -> bool:
    if isinstance(want, list) or isinstance(got, list):
        return (isinstance(want, list) and isinstance(got, list) and len(got) == len(want)
                and all(same_value(g, w, rtol, atol) for g, w in zip(got, want)))
    if got is MISSING or want is MISSING:
        return got is want
    if isinstance(want, float) or isinstance(got, float):
        if isinstance(got, bool) or isinstance(want, bool):
            return False
        if not isinstance(got, (int, float)) or not isinstance(want, (int, float)):
            return False
        if math.isinf(want) or math.isinf(got):
            return got == want
        return got == want or abs(got - want) <= atol + rtol * abs(want)
    if type(got) is bool or type(want) is bool:
        return type(got) is type(want) and got == want
    return type(got) is type(want) and got == want


def assert_values(got: pd.Series | Sequence[Any], want: pd.Series | Sequence[Any], *, what: str,
                  rtol: float = 0.0, atol: float = 0.0, limit: int = 5) -> None:
    """Equal value by value (nulls of any kind equal each other; ints exact; floats within
    ``rtol`` / ``atol``, exact by default); the message names the first differing rows."""
    g, w = values_of(got), values_of(want)
    assert len(g) == len(w), f"{what}: {len(g)} rows, reference has {len(w)}"
    bad = [i for i, (a, b) in enumerate(zip(g, w)) if not same_value(a, b, rtol, atol)]
    if bad:
        rows = "; ".join(f"row {i}: got {g[i]!r}, want {w[i]!r}" for i in bad[:limit])
        raise AssertionError(f"{what}: {len(bad)} of {len(w)} rows differ: {rows}")


def assert_column(out: pd.DataFrame, name: str, want: Sequence[Any], *, mode: str, rtol: float = 0.0,
                  atol: float = 0.0, order_by: str | None = None) -> None:
    """Column ``name`` of ``out`` equals ``want`` (reference values in the input's row
    order). ``order_by`` names a unique row-id column: the output is put back in input
    order first (operators that shuffle by key on dask return rows grouped by key)."""
    col = out[name]
    if order_by is not None:
        col = col.set_axis(out[order_by].to_numpy()).sort_index(kind="stable")
    assert_values(col, want, what=f"{mode}: column {name!r}", rtol=rtol, atol=atol)


def assert_error_names(exc: BaseException, *culprits: str) -> None:
    """A deliberate error: it derives from FbrapidsError and its message names a culprit."""
    from fbrapids.errors import FbrapidsError

    assert isinstance(exc, FbrapidsError), f"{type(exc).__name__} is not an FbrapidsError: {exc}"
    text = str(exc)
    assert any(c in text for c in culprits), f"error does not name any of {culprits}: {text}"


# -- dask tokens that tell dtypes apart ------------------------------------------------------
# dask tokenizes masked (Int8 / UInt64 / boolean) and Arrow arrays without their dtype, so
# dd.from_pandas of [1, <NA>] as Int8 and then as UInt64 would hand back the first frame: the
# second case would silently run on the first case's input. fbrapids registers dtype-aware
# tokens on import of dask.dataframe; registered here explicitly, before any case is built.
dask_tokens.register()
