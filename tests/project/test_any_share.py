"""How much of the package's typing says nothing: the share of its annotations (parameters,
returns, annotated assignments) that contain ``Any``, computed from the AST.

Run as a script to print the share and the modules holding the most:
``python tests/project/test_any_share.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "fbrapids"


def annotations(tree: ast.AST) -> list[ast.expr]:
    """Every annotation in ``tree``: each parameter's (``*args`` / ``**kwargs`` too), each
    return's and each annotated assignment's."""
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]
            out += [p.annotation for p in params if p.annotation is not None]
            if node.returns is not None:
                out.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            out.append(node.annotation)
    return out


def mentions_any(annotation: ast.expr) -> bool:
    """Whether ``annotation`` contains ``Any`` (``typing.Any`` too, and inside a quoted one).

    Example:
        >>> [mentions_any(ast.parse(t, mode="eval").body) for t in ("int", "dict[str, Any]", "'list[Any]'", "t.Any")]
        [False, True, True, True]
    """
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id == "Any":
            return True
        if isinstance(node, ast.Attribute) and node.attr == "Any":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                if mentions_any(ast.parse(node.value, mode="eval").body):
                    return True
            except SyntaxError:
                continue
    return False


def any_counts(pkg: Path = PKG) -> dict[str, tuple[int, int]]:
    """Module path -> (annotations with ``Any``, annotations), for every module under ``pkg``."""
    out = {}
    for path in sorted(pkg.rglob("*.py")):
        found = annotations(ast.parse(path.read_text(), str(path)))
        out[path.relative_to(pkg).as_posix()] = (sum(map(mentions_any, found)), len(found))
    return out


def any_share(counts: dict[str, tuple[int, int]]) -> float:
    """The share of all annotations that contain ``Any``."""
    return sum(a for a, _ in counts.values()) / max(1, sum(n for _, n in counts.values()))


def test_the_count_reads_parameters_returns_and_assignments(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("from typing import Any\nX: int = 1\nY: 'dict[str, Any]' = {}\n"
                                   "def f(a: Any, *b: int, c=1, **d: Any) -> list[Any]:\n    z: str = ''\n")
    assert any_counts(tmp_path) == {"m.py": (4, 7)}  # X, Y, a, b, d, the return, z


#: the most of the package's annotations that may contain ``Any`` (1.4% when this was set;
#: pandas and dask are typed through their stubs, cudf and cupy by name)
MAX_ANY_SHARE = 0.03


def test_the_package_says_what_its_values_are():
    counts = any_counts()
    worst = sorted(counts.items(), key=lambda kv: -kv[1][0])[:5]
    assert any_share(counts) <= MAX_ANY_SHARE, f"Any in {any_share(counts):.1%} of annotations; most in {worst}"


if __name__ == "__main__":
    counts = any_counts()
    total = sum(n for _, n in counts.values())
    print(f"Any in {sum(a for a, _ in counts.values())} of {total} annotations: {any_share(counts):.1%}")
    for mod, (a, n) in sorted(counts.items(), key=lambda kv: -kv[1][0])[:25]:
        print(f"  {a:4d} / {n:4d}  {mod}")
