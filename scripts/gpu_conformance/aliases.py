"""Which names in fbrapids' source stand for which GPU library object.

Module objects travel as ``Any`` in this codebase (``self.cp``, ``plc: Any``, ``be.xdf``), so a
type checker sees none of the calls into cudf, pylibcudf, rmm, cupy, dask_cudf, dask_cuda and
torch.cuda.  The resolver reads them by name instead:

* ``import`` statements of a GPU library bind their names (module-wide, lazy imports included);
* ``X = try_import("mod")`` (also ``self.X = backends.try_import(...)``) binds ``X`` to ``mod``;
* :data:`MODULE_ALIASES`: the expression texts the code uses for a library passed around as a
  value (found with ``grep -rn 'be.xdf\\|self.cp\\|plc: Any'``);
* :data:`RECEIVERS`: names that hold an *instance* of a library class (a ``pylibcudf.Column``,
  a cudf series) in the functions that touch their attributes; the resolver checks those
  attributes and method calls against the class.

Keep these tables next to the code they describe: a new alias that is not listed is simply
not checked (the report counts the chains it resolved, so a drop shows).
"""

from __future__ import annotations

# the libraries whose use is checked (import roots)
GPU_ROOTS = ("cudf", "pylibcudf", "rmm", "cupy", "cupyx", "dask_cudf", "dask_cuda")

# expression text -> module it holds on the GPU backend (the CPU side is covered by the CPU suite)
MODULE_ALIASES = {
    "cp": "cupy",
    "self.cp": "cupy",
    "plc": "pylibcudf",
    "self.plc": "pylibcudf",
    "cudf": "cudf",
    "self.cudf": "cudf",
    "be.xdf": "cudf",
    "backend.xdf": "cudf",
    "self.backend.xdf": "cudf",
    "be.xp": "cupy",
    "backend.xp": "cupy",
    "self.xp": "cupy",
    "xp": "cupy",
    "rmm": "rmm",
    "mr_mod": "rmm.mr",
    "dask_cudf": "dask_cudf",
    "torch.cuda": "torch.cuda",
}

# (file relative to the repo, function name or "*") -> {name: class path}
RECEIVERS: dict[tuple[str, str], dict[str, str]] = {
    ("fbrapids/kernels/device_columns.py", "*"): {
        "col": "pylibcudf.Column", "offs": "pylibcudf.Column", "child": "pylibcudf.Column",
        "soffs": "pylibcudf.Column", "offsets": "pylibcudf.Column",
    },
    ("fbrapids/trainers/device_batch.py", "_plc_ints"): {"col": "pylibcudf.Column"},
    ("fbrapids/trainers/device_batch.py", "_sparse"): {
        "s": "cudf.Series", "col": "pylibcudf.Column", "offs_col": "pylibcudf.Column", "vals_col": "pylibcudf.Column"},
    ("fbrapids/trainers/device_batch.py", "_dense"): {"df": "cudf.DataFrame", "s": "cudf.Series", "x": "cudf.Series"},
    ("fbrapids/trainers/device_batch.py", "_tensor"): {"series": "cudf.Series"},
    ("fbrapids/trainers/device_batch.py", "device_columns"): {
        "df": "cudf.DataFrame", "y": "cudf.Series", "gs": "cudf.Series"},
    ("fbrapids/kernels/runtime_cuda.py", "_input"): {"s": "cudf.Series"},
    ("fbrapids/joins/hash_join.py", "device_join"): {
        "left": "cudf.DataFrame", "right": "cudf.DataFrame", "lk": "cudf.DataFrame", "rk": "cudf.DataFrame",
        "out": "cudf.DataFrame", "result": "cudf.DataFrame", "maps": "pylibcudf.Table",
        "gathered": "pylibcudf.Table"},
    ("fbrapids/joins/hash_join.py", "_check_device_unique"): {
        "keys_frame": "cudf.DataFrame", "valid": "cudf.DataFrame", "dup": "cudf.DataFrame", "first": "cudf.DataFrame"},
    ("fbrapids/views/text_columns.py", "text_to_dtypes_device"): {
        "text": "cudf.DataFrame", "values": "cudf.Series", "stripped": "cudf.Series", "checked": "cudf.Series"},
    # code shared by pandas and cudf objects: what it calls must exist on cudf too
    ("fbrapids/views/clean.py", "_fill_column"): {"col": "cudf.Series", "filled": "cudf.Series"},
    ("fbrapids/features/fitted.py", "_copy"): {"part": "cudf.DataFrame"},
    ("fbrapids/features/fitted.py", "_attach"): {"part": "cudf.DataFrame"},
    ("fbrapids/frames/backend.py", "on_index"): {"series": "cudf.Series"},
    ("fbrapids/frames/backend.py", "_series_to_host"): {"s": "cudf.Series"},
    ("fbrapids/trainers/labels.py", "check_labels"): {"values": "cudf.Series"},
    ("fbrapids/features/schema.py", "column_type"): {"s": "cudf.Series"},
}
