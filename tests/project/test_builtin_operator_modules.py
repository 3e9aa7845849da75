"""A built-in operator is one module of ``fbrapids/kernels/builtins/`` (its C in
``kernels/csrc/ops/``): every registered built-in, kernel or frame-level, is declared in its
own module, one operator per module, with its function for users beside it; the package finds
the modules itself, so adding one is adding a file, and ``fbrapids.ops`` names none of them."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

import fbrapids.kernels.builtins as builtins_pkg
import fbrapids.ops as ops
from fbrapids.errors import OperatorError
from fbrapids.kernels import Operator, operators
from fbrapids.kernels.builtins import BUILTINS, declared_operators, operator_modules

PACKAGE = Path(builtins_pkg.__file__).parent
#: the calls that declare a built-in operator
DECLARING = {"builtin", "frame_level", "Operator"}


def _declarations(path: Path) -> list[str]:
    """The operator-declaring calls (``builtin(...)``, ``frame_level(...)``, ``Operator(...)``)
    anywhere in a module's code outside function bodies, as ``target = call`` strings."""
    found = []
    for node in ast.parse(path.read_text()).body:
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
            if name in DECLARING and not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                targets = [ast.unparse(t) for t in getattr(node, "targets", [])]
                found.append(f"{', '.join(targets)} = {name}(...)")
    return found


def test_every_builtin_is_registered_and_declared_by_its_own_module() -> None:
    registered = operators()
    assert len(BUILTINS) >= 30 and {op.stage for op in BUILTINS} == {"kernel", "fitted", "history", "row"}
    for op in BUILTINS:  # kernel and frame-level ones alike
        module = importlib.import_module(f"fbrapids.kernels.builtins.{op.name}")
        assert module.OPERATOR is op, op.name
        assert op.name in registered, op.name
        assert Path(module.__file__ or "").parent == PACKAGE
        if op.builder is not None:  # its function for users lives beside it
            assert op.builder.__module__ == module.__name__, op.name


def test_one_operator_per_module_and_none_in_the_shared_one() -> None:
    names = operator_modules()
    assert names == sorted(op.name for op in BUILTINS)  # a module per operator, an operator per module
    for name in names:
        module = importlib.import_module(f"fbrapids.kernels.builtins.{name}")
        declared = [v for v in vars(module).values() if isinstance(v, Operator)]
        assert declared == [module.OPERATOR], name
        decls = _declarations(PACKAGE / f"{name}.py")
        assert len(decls) == 1 and decls[0].startswith("OPERATOR = "), (name, decls)
    shared = importlib.import_module("fbrapids.kernels.builtins._shared")
    assert [v for v in vars(shared).values() if isinstance(v, Operator)] == []
    assert [p.name for p in PACKAGE.glob("_*.py")] and all(
        not _declarations(p) for p in PACKAGE.glob("_*.py")), "a private module declares an operator"


def test_registration_order_is_the_sorted_module_order() -> None:
    assert [op.name for op in BUILTINS] == operator_modules() == sorted(operator_modules())
    assert list(operators())[:len(BUILTINS)] == [op.name for op in BUILTINS]


def test_a_new_builtin_is_one_new_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "aa_demo_twice.py").write_text(
        "from fbrapids.kernels.builtins._shared import builtin\n"
        "from fbrapids.kernels.operator import Impl\n"
        "OPERATOR = builtin('aa_demo_twice', ('num',), 'Twice x (float64).',\n"
        "                   lambda t, p: Impl('f64', 'expr', '2.0 * (double){a0}'))\n")
    (tmp_path / "ab_demo_nothing.py").write_text("X = 1\n")
    monkeypatch.setattr(builtins_pkg, "__path__", [*builtins_pkg.__path__, str(tmp_path)])
    for name in ("aa_demo_twice", "ab_demo_nothing"):
        monkeypatch.delitem(sys.modules, f"fbrapids.kernels.builtins.{name}", raising=False)
    found = operator_modules(builtins_pkg.__path__)
    assert found[:3] == ["aa_demo_twice", "ab_demo_nothing", "bucketize"]  # found, in its sorted place
    (op,) = declared_operators(["aa_demo_twice"])
    assert op.resolve(("i32",), {}).template == "2.0 * (double){a0}" and op.headers == ("ops/fbx_views.h",)
    with pytest.raises(OperatorError, match=r"ab_demo_nothing\.py: an operator module declares OPERATOR"):
        declared_operators(["ab_demo_nothing"])


def test_ops_derives_each_function_from_the_builtins() -> None:
    with_builder = {op.name: op.builder for op in BUILTINS if op.builder is not None}
    assert len(with_builder) >= 30
    for name, builder in with_builder.items():
        assert getattr(ops, name) is builder and name in ops.__all__ and name in dir(ops)
    # fbrapids/ops.py defines no function named after an operator: a built-in needs no line there
    defined = {n.name for n in ast.parse(Path(ops.__file__ or "").read_text()).body if isinstance(n, ast.FunctionDef)}
    assert defined & {op.name for op in BUILTINS} == set()
    with pytest.raises(AttributeError, match="no_such_operator"):
        getattr(ops, "no_such_operator")
