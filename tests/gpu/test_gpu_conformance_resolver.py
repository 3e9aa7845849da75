"""The conformance stage's resolver, run in the CPU suite against libraries every machine has
(numpy and pandas stand in for cupy and cudf: the same aliases, attribute walk, signature
binding and Literal checks).  The same injections against the real RAPIDS wheels run in the
GPU venv stage (tests/gpu_conformance/test_injected_errors.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from gpu_conformance.resolver import resolve_source  # noqa: E402

ALIASES = {"xp": "numpy", "self.xp": "numpy", "be.xdf": "pandas"}
GOOD = '''
def f(be, n):
    a = xp.zeros(n, dtype=xp.int64)
    b = xp.cumsum(a, axis=0)
    return be.xdf.read_csv("x.csv", sep=",", usecols=["a"]), xp.linalg.norm(b)
'''


def _errors(src: str) -> list[str]:
    return [f"{f.line}: {f.text}: {f.why}" for f in resolve_source("m.py", src, ALIASES) if f.status == "error"]


def test_correct_calls_resolve_and_are_counted():
    findings = resolve_source("m.py", GOOD, ALIASES)
    assert not _errors(GOOD)
    assert sum(f.status == "ok" for f in findings) >= 5


@pytest.mark.parametrize("good, bad, why", [
    ("xp.cumsum(a, axis=0)", "xp.cumsumm(a, axis=0)", "no attribute 'cumsumm'"),       # misspelt attribute
    ("xp.cumsum(a, axis=0)", "xp.cumsum(a, axes=0)", "unexpected keyword argument 'axes'"),  # wrong keyword
    ("xp.zeros(n, dtype=xp.int64)", "xp.zeros(dtype=xp.int64)", "missing a required argument"),  # missing argument
    ("dtype=xp.int64", "dtype=xp.int65", "no attribute 'int65'"),                       # wrong member
    ("xp.linalg.norm(b)", "xp.linalg.normm(b)", "no attribute 'normm'"),                # deep chain
    ('usecols=["a"])', 'usecolz=["a"])', "usecolz"),                                    # keyword of pandas
])
def test_each_injected_error_fails(good, bad, why):
    assert good in GOOD
    errors = _errors(GOOD.replace(good, bad, 1))
    assert errors and why in errors[0], errors
