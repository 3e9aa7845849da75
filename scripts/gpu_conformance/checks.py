"""The checks of the GPU conformance stage; each returns a :class:`Result` (one printed line).

They run in the stage's own virtual environment (the pinned RAPIDS wheels, no device):

* ``imports``: every fbrapids module imports there;
* ``lazy-import``: ``import fbrapids`` (CPU backend, and ``auto`` on this device-less machine)
  loads no cudf / dask_cudf / rmm / cupy / pylibcudf / dask_cuda module;
* ``cli-help``: ``fbrapids --help`` answers in under 1 s (best of 3, warm);
* ``api``: every reference into the GPU libraries resolves (:mod:`resolver`);
* ``shared-dtypes``: the backend's dtype questions answer right for cudf's real dtype objects;
* ``dry-*``: what cudf does without a device: the column builders' output accepted by
  ``cudf.Series.from_pylibcudf``, a parquet view's ``_meta``, the device join's re-typed columns.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

RAPIDS = ("cudf", "dask_cudf", "rmm", "cupy", "pylibcudf", "dask_cuda")


@dataclass
class Result:
    name: str
    ok: bool
    summary: str
    details: list[str] = field(default_factory=list)
    seconds: float = 0.0
    skipped: bool = False  # what cudf cannot do without a device: said, never counted as passed


def needs_device(exc: Exception) -> bool:
    """Whether cudf failed for want of a driver / device (not for a wrong call)."""
    return "driver" in str(exc).lower() or "DynamicLib" in type(exc).__name__ or "CUDA" in str(exc)


def _module_names(repo: Path) -> list[str]:
    out = []
    for path in sorted((repo / "fbrapids").rglob("*.py")):
        parts = list(path.relative_to(repo).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append(".".join(parts))
    return out


def check_imports(repo: Path) -> Result:
    failed = []
    names = _module_names(repo)
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - every failure is reported
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    return Result("imports", not failed, f"{len(names) - len(failed)}/{len(names)} fbrapids modules import", failed)


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env},
                          timeout=120)


def check_lazy_import(repo: Path) -> Result:
    code = ("import sys, fbrapids, pandas as pd; pd.DataFrame({'a': [1]}).fbx;"
            "from fbrapids.frames.backend import get_backend; get_backend();"
            f"print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in {RAPIDS!r})))")
    details, ok = [], True
    for backend in ("cpu", "auto"):
        proc = _python(code, {"FBRAPIDS_BACKEND": backend})
        loaded = proc.stdout.strip()
        if proc.returncode != 0 or loaded:
            ok = False
            details.append(f"FBRAPIDS_BACKEND={backend}: " + (loaded or proc.stderr.strip()[-300:]))
    # the accessor still reaches cudf frames: registered when cudf is imported later
    proc = _python("import fbrapids, cudf; print(hasattr(cudf.DataFrame, 'fbx'))", {"FBRAPIDS_BACKEND": "cpu"})
    if proc.stdout.strip() != "True":
        ok = False
        details.append("importing cudf after fbrapids leaves cudf.DataFrame without .fbx: " + proc.stderr[-300:])
    return Result("lazy-import", ok, "import fbrapids (cpu, auto) loads no RAPIDS module; .fbx reaches cudf when "
                  "cudf is imported later" if ok else "import fbrapids loads RAPIDS modules", details)


def check_cli_help(repo: Path, limit: float = 1.0) -> Result:
    times = []
    for _ in range(4):  # the first one warms the file cache
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "fbrapids.app.cli", "--help"], capture_output=True, text=True,
                              cwd=repo, timeout=60)
        times.append(time.perf_counter() - t)
        if proc.returncode != 0:
            return Result("cli-help", False, "fbrapids --help failed", [proc.stderr[-500:]])
    best = min(times[1:])
    return Result("cli-help", best < limit, f"fbrapids --help in {best:.2f} s warm (limit {limit:.0f} s)")


def check_api(repo: Path) -> Result:
    from gpu_conformance.resolver import resolve_tree

    findings = list(resolve_tree(repo))
    errors = [str(f) for f in findings if f.status == "error"]
    unchecked = [str(f) for f in findings if f.status == "unchecked"]
    ok_n = sum(f.status == "ok" for f in findings)
    return Result("api", not errors, f"{ok_n} references into the GPU libraries resolve, {len(errors)} errors, "
                  f"{len(unchecked)} unchecked (listed with -v)", errors + [f"unchecked {u}" for u in unchecked])


def check_shared_dtypes(repo: Path) -> Result:
    import cudf
    import numpy as np
    import pandas as pd

    from fbrapids.frames import backend as B

    cases: list[tuple[str, Callable[[], bool]]] = [
        ("cudf.CategoricalDtype() is categorical", lambda: B.is_categorical(cudf.CategoricalDtype())),
        ("cudf.CategoricalDtype is no pd.CategoricalDtype (why the helper exists)",
         lambda: not isinstance(cudf.CategoricalDtype(), pd.CategoricalDtype)),
        ("cudf.CategoricalDtype().to_pandas() is a pd.CategoricalDtype",
         lambda: isinstance(B.host_dtype(cudf.CategoricalDtype()), pd.CategoricalDtype)),
        ("cudf.ListDtype(int64) is a list dtype", lambda: B.is_list_dtype(cudf.ListDtype("int64"))),
        ("cudf.ListDtype(int64) on the host is list<int64>",
         lambda: str(B.host_dtype(cudf.ListDtype("int64"))) == "list<item: int64>[pyarrow]"),
        ("cudf's string dtype is the pandas Arrow string dtype (so only the object can tell)",
         lambda: cudf.api.types.pandas_dtype("str") == pd.StringDtype("pyarrow", na_value=np.nan)),
        ("cudf.Series has neither .array nor .set_axis (why on_index exists)",
         lambda: not hasattr(cudf.Series, "array") and not hasattr(cudf.Series, "set_axis")),
        ("cudf.Index supports `in` (clean's category test)", lambda: hasattr(cudf.Index, "__contains__")),
        ("cudf.Series has explode and value_counts (categorify's counts of list columns)",
         lambda: hasattr(cudf.Series, "explode") and hasattr(cudf.Series, "value_counts")),
    ]
    failed = []
    for text, fn in cases:
        try:
            if not fn():
                failed.append(text)
        except Exception as exc:  # noqa: BLE001
            failed.append(f"{text}: {type(exc).__name__}: {exc}")
    return Result("shared-dtypes", not failed, f"{len(cases) - len(failed)}/{len(cases)} dtype answers on cudf's "
                  "real classes as the shared code expects", failed)


def check_dry_builders(repo: Path) -> Result:
    import cudf
    import numpy as np
    import pylibcudf as plc

    from fbrapids.kernels import device_columns as D

    from gpu_conformance.host_arrays import host

    want = {"i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16",
            "u32": "uint32", "u64": "uint64", "f32": "float32", "f64": "float64", "bool": "bool"}
    failed, n = [], 0
    for kind, dtype in want.items():
        n += 1
        np_dtype = "uint8" if kind == "bool" else dtype
        col = D.fixed_column(plc, kind, host([1, 0, 1], np_dtype).view(np.bool_ if kind == "bool" else np_dtype)
                             if kind == "bool" else host([1, 0, 1], np_dtype), None, 0)
        got = str(cudf.Series.from_pylibcudf(col).dtype)
        if got != dtype:
            failed.append(f"fixed_column {kind}: cudf dtype {got}, expected {dtype}")
    off = host([0, 1, 3], "int64")
    n += 3
    s = cudf.Series.from_pylibcudf(D.strings_column(np, plc, 2, off, host([97, 98, 99], "uint8"), 3, None, 0))
    if str(s.dtype) != "str":
        failed.append(f"strings_column: dtype {s.dtype}")
    li = cudf.Series.from_pylibcudf(D.list_column(np, plc, 2, off, 3, D.int64_child(plc, "list<i64>",
                                                                                 host([1, 2, 3], "int64"), 3), None, 0))
    if str(li.dtype) != "list" or str(li.dtype.element_type) != "int64":
        failed.append(f"list_column<i64>: dtype {li.dtype}")
    child = D.strings_column(np, plc, 3, host([0, 1, 2, 3], "int64"), host([97, 98, 99], "uint8"), 3, None, 0)
    ls = cudf.Series.from_pylibcudf(D.list_column(np, plc, 2, off, 3, child, None, 0))
    if str(ls.dtype.element_type) != "str":
        failed.append(f"list_column<str>: dtype {ls.dtype}")
    return Result("dry-builders", not failed, f"{n - len(failed)}/{n} device column builders' output accepted by "
                  "cudf.Series.from_pylibcudf with the expected dtype (host stand-in buffers)", failed)


def check_dry_meta(repo: Path, tmp: Path) -> Result:
    import cudf
    import cupy
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fbrapids.frames import backend as B
    from fbrapids.views.paths import FilePiece
    from fbrapids.views.read import view_meta

    path = tmp / "meta.parquet"
    pq.write_table(pa.table({"a": pa.array([1], pa.int64()), "s": pa.array(["x"]),
                             "l": pa.array([[1]], pa.list_(pa.int64())),
                             "d": pa.array(["x"]).dictionary_encode()}), path)
    be = B.Backend("gpu", cudf, cupy, "cudf")  # made directly: the stage has no device to pass the backend's check
    try:
        meta = view_meta(FilePiece(str(path)), "parquet", ["a", "s", "l", "d"], None, {}, be)  # no CSV options
    except Exception as exc:  # noqa: BLE001
        if needs_device(exc):  # cudf.DataFrame.from_arrow allocates its (empty) columns on the device
            return Result("dry-meta", True, "parquet view _meta: cudf.DataFrame.from_arrow needs a device even for "
                          f"an empty table ({type(exc).__name__})", skipped=True)
        return Result("dry-meta", False, f"parquet view _meta on cudf failed: {type(exc).__name__}: {exc}")
    got = {c: str(t) for c, t in meta.dtypes.items()}
    want = {"a": "int64", "s": "str", "l": "list", "d": "str"}
    bad = [f"{c}: {got.get(c)} (expected {w})" for c, w in want.items() if got.get(c) != w]
    return Result("dry-meta", not bad, f"parquet view _meta built as an empty cudf frame: {got}", bad)


def check_dry_join(repo: Path) -> Result:
    import cudf
    import numpy as np
    import pandas as pd
    import pylibcudf as plc

    from fbrapids.frames import backend as B

    from gpu_conformance.host_arrays import host

    def col(tid: str, dtype: str, n: int = 0):
        return plc.Column(plc.DataType(getattr(plc.TypeId, tid)), n, plc.gpumemoryview(host([0] * n, dtype)),
                          None, 0, 0, [])

    cases = [
        ("categorical", cudf.CategoricalDtype(), col("INT8", "int8")),
        ("Int64", pd.Int64Dtype(), col("INT64", "int64")),
        ("boolean", pd.BooleanDtype(), col("BOOL8", "uint8")),
        ("datetime64[ns, UTC]", pd.DatetimeTZDtype("ns", "UTC"), col("TIMESTAMP_NANOSECONDS", "int64")),
        ("int8", np.dtype("int8"), col("INT8", "int8")),
    ]
    failed, device = [], []
    for name, dtype, plc_col in cases:
        raw = str(cudf.Series.from_pylibcudf(plc_col).dtype)
        try:
            got = B.cudf_series_of(plc_col, dtype, name="v").dtype
        except Exception as exc:  # noqa: BLE001
            if needs_device(exc):
                device.append(name)  # cudf keeps a categorical's categories on the device
            else:
                failed.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if str(got) != str(dtype) and not (name == "categorical" and B.is_categorical(got)):
            failed.append(f"{name}: re-typed as {got} (from_pylibcudf alone gives {raw})")
    done = len(cases) - len(device)
    return Result("dry-join", not failed, f"{done - len(failed)}/{done} right-side dtypes of the device join survive "
                  "the gather (empty columns)" + (f"; needs a device: {', '.join(device)}" if device else ""), failed)


def check_ptxas(repo: Path, jobs: tuple[str, ...] | None = None) -> Result:
    """Every generated CUDA source through NVRTC and ptxas for sm_90 (:mod:`kernels`)."""
    from gpu_conformance import kernels

    # the longest first; every built-in over cudf's offset layouts (int32 string / list offsets, as
    # cudf columns come), the workload over the host's int64 layout (as intermediate results are)
    names = list(jobs or ("layouts", "workload", "limits", "helpers", "dictionary"))
    lines = kernels.run(repo, names)
    bad = [l for l in lines if l.startswith("FAIL")]
    return Result("ptxas", not bad, f"{len(lines) - len(bad)}/{len(lines)} CUDA sources compile for {kernels.ARCH} "
                  f"through ptxas ({', '.join(names)})", bad + [l for l in lines if l not in bad])


def _host_column(tid: str, dtype: str, n: int = 0):
    import pylibcudf as plc

    from gpu_conformance.host_arrays import host

    return plc.Column(plc.DataType(getattr(plc.TypeId, tid)), n, plc.gpumemoryview(host([0] * n, dtype)),
                      None, 0, 0, [])


def _reaches_device(fn: Callable[[], object]) -> str | None:
    """None when ``fn`` runs, or stops only for want of a device; else the error."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        if not needs_device(exc):
            return f"{type(exc).__name__}: {exc}"[:300]
    return None


def check_dtype_paths(repo: Path) -> Result:
    """The shared code's dtype questions asked of real cudf series (host stand-in buffers):
    time-zoned datetimes through ``epoch_seconds`` (D2), both list dtypes into device
    batches (D3), and each plan output's dtype against the dask meta's (P5)."""
    import cudf
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pylibcudf as plc

    from fbrapids.frames import backend as B
    from fbrapids.kernels import device_columns as D
    from fbrapids.kernels.runtime_cuda import meta_dtype, output_series
    from fbrapids.trainers.device_batch import sparse_kind
    from fbrapids.views.inputs import datetime_unit, epoch_seconds, is_datetime

    from gpu_conformance.host_arrays import host

    failed, n = [], 0
    tids = {"s": "TIMESTAMP_SECONDS", "ms": "TIMESTAMP_MILLISECONDS", "us": "TIMESTAMP_MICROSECONDS",
            "ns": "TIMESTAMP_NANOSECONDS"}
    for unit, tid in tids.items():
        for tz in (None, "UTC", "Europe/Paris"):
            n += 1
            dtype = pd.DatetimeTZDtype(unit, tz) if tz else np.dtype(f"datetime64[{unit}]")
            s = B.cudf_series_of(_host_column(tid, "int64"), dtype, name="ts")
            if not is_datetime(s.dtype) or datetime_unit(s.dtype) != unit:
                failed.append(f"cudf {s.dtype}: is_datetime / datetime_unit answer wrong")
                continue
            err = _reaches_device(lambda: epoch_seconds(s))
            if err:
                failed.append(f"epoch_seconds(cudf series {s.dtype}): {err}")
    lists = [D.list_column(np, plc, 0, host([0], "int64"), 0, D.int64_child(plc, "list<i64>", host([], "int64"), 0),
                           None, 0)]
    child = D.strings_column(np, plc, 0, host([0], "int64"), host([], "uint8"), 0, None, 0)
    list_str = D.list_column(np, plc, 0, host([0], "int64"), 0, child, None, 0)
    for col, tname in ((lists[0], "list<i64>"), (list_str, "list<str>")):
        n += 3
        out = output_series(cudf, col, tname, "f")
        want = meta_dtype(tname)
        if str(out.dtype) != str(want):
            failed.append(f"plan output {tname}: partition dtype {out.dtype}, dask meta {want} (P5)")
        raw = cudf.Series.from_pylibcudf(col)
        for s in (out, raw):  # pd.ArrowDtype list and cudf.ListDtype: both are list features
            try:
                if sparse_kind(s.dtype, "f") != "list":
                    failed.append(f"sparse_kind({s.dtype}) is not 'list' (D3)")
            except Exception as exc:  # noqa: BLE001
                failed.append(f"sparse_kind({type(s.dtype).__name__} {s.dtype}): {type(exc).__name__}: {exc} (D3)")
    for tname, tid, np_dtype in (("i64", "INT64", "int64"), ("f32", "FLOAT32", "float32")):
        n += 1
        got = output_series(cudf, _host_column(tid, np_dtype), tname, "f").dtype
        if str(got) != str(meta_dtype(tname)):
            failed.append(f"plan output {tname}: partition dtype {got}, dask meta {meta_dtype(tname)} (P5)")
    n += 3
    if not (B.is_categorical(cudf.CategoricalDtype()) and B.is_list_dtype(cudf.ListDtype("int64"))
            and B.is_list_dtype(pd.ArrowDtype(pa.list_(pa.int64())))):
        failed.append("backend.is_categorical / is_list_dtype on cudf.CategoricalDtype, cudf.ListDtype, pd.ArrowDtype")
    return Result("dtype-paths", not failed, f"{n - len(failed)}/{n} shared-code paths right on real cudf series "
                  "(tz datetimes, both list dtypes, output vs meta dtypes)", failed)


def check_cupy_ftz(repo: Path) -> Result:
    """P3: cupy still appends ``-ftz=true`` to a RawModule's options, so fbrapids' float
    kernels must be loaded as CUBINs it built (runtime_cuda.load_module), never by RawModule."""
    import ast
    import inspect

    import cupy.cuda.compiler as C

    appends = "'-ftz=true'" in inspect.getsource(C._compile_with_cache_cuda)  # noqa: SLF001 - what we guard against
    tree = ast.parse((repo / "fbrapids" / "kernels" / "runtime_cuda.py").read_text())
    called = {getattr(n.func, "attr", getattr(n.func, "id", "")) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    ok = "RawModule" not in called and "load_module" in called
    return Result("cupy-ftz", ok, f"cupy appends -ftz=true: {appends}; the CUDA runtime loads its own -ftz=false "
                  f"CUBINs: {ok}", [] if ok else ["runtime_cuda.py builds kernels with cupy.RawModule (-ftz=true)"])
