"""The conformance stage fails on each kind of wrong call, injected into a copy of a real
module's source and resolved against the installed RAPIDS wheels.  Runs in the GPU venv stage
(``make gpu-conformance``); skipped where the wheels are absent (the main venv)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
pytest.importorskip("pylibcudf")
pytest.importorskip("cudf")

from gpu_conformance.resolver import resolve_source  # noqa: E402

JOIN = "fbrapids/joins/hash_join.py"
BATCH = "fbrapids/trainers/device_batch.py"
COLUMNS = "fbrapids/kernels/device_columns.py"


def _errors(rel: str, source: str) -> list[str]:
    return [str(f) for f in resolve_source(rel, source) if f.status == "error"]


@pytest.mark.parametrize("rel", [JOIN, BATCH, COLUMNS, "fbrapids/kernels/runtime_cuda.py", "fbrapids/frames/backend.py",
                                 "fbrapids/views/read.py", "fbrapids/views/csv.py", "fbrapids/views/text_columns.py"])
def test_the_real_modules_resolve(rel):
    findings = resolve_source(rel, (REPO / rel).read_text())
    assert not [f for f in findings if f.status == "error"]
    assert any(f.status == "ok" for f in findings)


@pytest.mark.parametrize("rel, good, bad, why", [
    (JOIN, "plc.join.left_join if", "plc.join.left_joinn if", "no attribute 'left_joinn'"),  # misspelt attribute
    (JOIN, "plc.copying.gather(ptab, rmap, plc.copying.OutOfBoundsPolicy.NULLIFY)",
     "plc.copying.gather(ptab, rmap, bounds=plc.copying.OutOfBoundsPolicy.NULLIFY)", "bounds"),  # wrong keyword
    (JOIN, "plc.copying.gather(ptab, rmap, plc.copying.OutOfBoundsPolicy.NULLIFY)",
     "plc.copying.gather(ptab, rmap)", "missing a required argument"),  # missing argument
    (JOIN, "plc.types.NullEquality.UNEQUAL", "plc.types.NullEquality.UNEQUALS", "UNEQUALS"),  # wrong enum member
    (BATCH, "gs.hash_values(method=GROUP_HASH)", "gs.hash_values(method='xxhash_64')", "xxhash_64"),  # Literal value
    (COLUMNS, "off.size), _view(plc, off), None, 0, 0, [])",
     "off.size), _view(plc, off), None, 0, 0, [], True, 1)", "too many"),  # too many arguments (stub signature)
    (BATCH, "col.child(0), col.child(1)", "col.child(0), col.kid(1)", "no attribute 'kid'"),  # method of an instance
    ("fbrapids/trainers/labels.py", "_backend.to_host(values.dropna().head(1)).tolist()",
     "values.dropna().head(1).tolist()", "always raises"),  # a cudf method that only raises
    ("fbrapids/views/clean.py", "filled.dtype.kind in", "filled.dtype.kindd in", "no attribute 'kindd'"),  # dtype test
])
def test_each_injected_error_fails_the_stage(rel, good, bad, why):
    source = (REPO / rel).read_text()
    assert good in source, f"the injection site moved: {good!r} is no longer in {rel}"
    errors = _errors(rel, source.replace(good, bad, 1))
    assert errors and any(why in e for e in errors), errors
