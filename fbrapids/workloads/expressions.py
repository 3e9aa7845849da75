"""Feature expressions written as text (``'ops.cross("a", "b", buckets=1024)'``), as a TOML
workload file or the command line (``fbrapids trial --candidate``) gives them.

The text is parsed, never evaluated: only calls of :mod:`fbrapids.ops` feature operators
(with or without the ``ops.`` prefix) whose arguments are literals (numbers, strings,
booleans, None, lists / tuples of them) or further such calls are accepted; anything else,
``ops.register_operator`` (which registers C source) included, is a
:class:`~fbrapids.errors.WorkloadError` naming where the text came from, at parse time.

Example:
    >>> str(parse_expression('ops.cross("slot", ops.hour("ts"), buckets=64)')).split(", cap")[0]
    'cross(slot, hour(ts), buckets=64'
    >>> parse_expression('__import__("os")', where="--candidate x")
    Traceback (most recent call last):
    ...
    fbrapids.errors.WorkloadError: --candidate x: '__import__' is not an fbrapids.ops function (in '__import__("os")')
    >>> parse_expression('ops.register_operator("f", ["a"], "int64", "return 0;")', where="--candidate f")
    Traceback (most recent call last):
    ...
    fbrapids.errors.WorkloadError: --candidate f: 'register_operator' registers code (C source) and is refused in an expression from a workload file or the command line, which may only call operators; ...
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Callable

from fbrapids.errors import WorkloadError

if TYPE_CHECKING:  # (annotations only: fbrapids.ops is imported when an expression is read)
    from fbrapids.kernels import Expr

#: fbrapids.ops functions that are not operators: they register code, never allowed from text
NOT_OPERATORS = ("register_operator",)


def _ops_function(name: str, text: str, where: str) -> Callable[..., Expr]:
    """The operator ``name`` of :mod:`fbrapids.ops`: one of its feature operators, never a
    function that registers code (``register_operator`` takes C source) or anything else."""
    from fbrapids import ops

    if name in NOT_OPERATORS:
        raise WorkloadError(f"{where}: {name!r} registers code (C source) and is refused in an expression from a "
                            "workload file or the command line, which may only call operators; register the operator "
                            f"in Python before loading the workload (in {text!r})")
    fn = ops.constructors().get(name)
    if fn is None:
        raise WorkloadError(f"{where}: {name!r} is not an fbrapids.ops function (in {text!r})")
    return fn


def _value(node: ast.AST, text: str, where: str) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)):
        return -node.operand.value
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_value(e, text, where) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Call):
        return _call(node, text, where)
    raise WorkloadError(f"{where}: {ast.unparse(node)!r} is not a literal or an fbrapids.ops call (in {text!r})")


def _call(node: ast.Call, text: str, where: str) -> Expr:
    """The expression an ``fbrapids.ops`` call of ``text`` builds (its arguments literals or calls)."""
    f = node.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "ops":
        name = f.attr
    elif isinstance(f, ast.Name):
        name = f.id
    else:
        raise WorkloadError(f"{where}: only fbrapids.ops calls are allowed, got {ast.unparse(f)!r} (in {text!r})")
    fn = _ops_function(name, text, where)
    args = [_value(a, text, where) for a in node.args]
    kwargs = {k.arg: _value(k.value, text, where) for k in node.keywords if k.arg is not None}
    if len(kwargs) != len(node.keywords):
        raise WorkloadError(f"{where}: **kwargs are not allowed (in {text!r})")
    try:
        return fn(*args, **kwargs)
    except WorkloadError:
        raise
    except Exception as e:  # a wrong argument of the operator: say where it was written
        raise WorkloadError(f"{where}: {text!r}: {e}") from e


def parse_expression(text: str, where: str = "expression") -> Expr:
    """The feature expression ``text`` names (module docstring); ``where`` names its origin
    in errors (a TOML field, a command-line option).

    Example:
        >>> str(parse_expression("hash_bucket('pid', 1024)"))
        'hash_bucket(pid, buckets=1024)'
    """
    if not isinstance(text, str) or not text.strip():
        raise WorkloadError(f"{where}: a feature expression must be a non-empty string, got {text!r}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise WorkloadError(f"{where}: {text!r} is not an expression ({e.msg})") from e
    if not isinstance(tree.body, ast.Call):
        raise WorkloadError(f"{where}: {text!r} is not an fbrapids.ops call (a raw column needs no expression: "
                            "list its name among the features)")
    return _call(tree.body, text, where)


def parse_candidate(text: str) -> tuple[str, Expr]:
    """A ``name=expression`` pair, as ``fbrapids trial --candidate`` takes it.

    Example:
        >>> name, e = parse_candidate('slot_x_os=ops.cross("slot", "os")')
        >>> name, str(e).split("(")[0]
        ('slot_x_os', 'cross')
    """
    name, sep, expr = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise WorkloadError(f"--candidate {text!r}: expected NAME=EXPRESSION, e.g. 'slot_x_os=ops.cross(\"slot\", \"os\")'")
    return name, parse_expression(expr, where=f"--candidate {name}")
