"""The differential suite covers every public name of ``fbrapids.ops``, and its
references are independent: no ``diffref_*`` module imports fbrapids.

Each ``diffref_*`` module beside this one maps operator names to reference functions in
``OPERATORS``; a reference counts only when some ``test_diff_*`` module calls it.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import fbrapids.ops as ops

HERE = Path(__file__).resolve().parent


def reference_modules() -> dict[str, object]:
    return {p.stem: importlib.import_module(p.stem) for p in sorted(HERE.glob("diffref_*.py"))}


def test_every_public_operator_has_a_reference() -> None:
    covered: dict[str, str] = {}
    for name, module in reference_modules().items():
        for op in getattr(module, "OPERATORS", {}):
            covered.setdefault(op, name)
    missing = sorted(set(ops.__all__) - set(covered))
    assert not missing, f"public operators with no independent reference: {missing}"


def test_every_reference_is_used_by_a_test() -> None:
    tests = "\n".join(p.read_text() for p in HERE.glob("test_diff_*.py"))
    unused = []
    for name, module in reference_modules().items():
        for op, fn in getattr(module, "OPERATORS", {}).items():
            if not re.search(rf"\b{re.escape(fn.__name__)}\b", tests):
                unused.append(f"{name}.{fn.__name__} ({op})")
    assert not unused, f"references no test calls: {unused}"


def test_references_never_import_fbrapids() -> None:
    offenders = []
    for path in HERE.glob("diffref_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("fbrapids", "diff_harness")]
    assert not offenders, f"references must be independent of fbrapids: {offenders}"
