"""Row filters written as Python expressions, evaluated column by column on pandas or cudf.

``clean(where="slot >= 0 and not (age < 18 or isnull(city))")`` goes through here, not
through ``DataFrame.eval``: cuDF's AST evaluator does not promote types (an ``int8``
column against an ``int64`` literal raises), and pandas' ``eval`` and cuDF's disagree on
nulls.  The text is parsed with Python's :mod:`ast` into a small tree that allows only:

* column names, and ``int`` / ``float`` / ``str`` / ``bool`` literals (``nan``, ``inf``);
* comparisons ``== != < <= > >=`` (chains such as ``0 <= x < 10`` too), ``in`` /
  ``not in`` against a list or tuple of literals;
* ``and``, ``or``, ``not``;
* arithmetic ``+ - * / // %`` and unary minus;
* ``isnull(x)`` / ``isna(x)`` / ``notnull(x)`` / ``notna(x)``.

Anything else (attribute access, calls to other functions, ``&`` / ``|``, whose Python
precedence differs from pandas') is a :class:`~fbrapids.errors.CleanError` naming the
construct.

Types: a literal compared with a column is cast to the column's dtype when the cast is
exact (``slot >= 0`` on ``int8`` compares ``int8`` with ``int8``).  When it is not exact
the comparison stays exact all the same: ``x < 300`` on ``int8`` widens the column to
``int16``; ``x > 2.5`` on an integer column is ``x >= 3``; a literal outside every integer
type the column could widen to (``2**64`` against ``int64``) gives the constant answer.
A ``float32`` column against ``0.1`` (not a ``float32`` value) is widened to ``float64``,
so ``x == 0.1`` is False for ``float32(0.1)``, unlike numpy's weak-scalar rule.
A ``float`` column against an int literal no float64 holds (``2**53 + 1``) is compared
exactly too.  Two columns compare exactly as well: ``int64`` against ``uint64`` by sign, then
value; an integer against a float as numbers (``x == f`` is False for ``x = 2**53 + 1``,
``f = 2.0**53``), never through ``float64`` alone.  ``x in [...]`` is exact the same way
(``2.0`` is in an integer column's list, ``2.5`` and ``2**64`` never are).  Strings compare
by value (a categorical's ``<`` compares its strings, not its codes).  A number against text
(``x == 'a'``, ``x in ['a']`` on an integer column, ``s in [1]`` or ``s == x`` on a string
column) is a :class:`~fbrapids.errors.CleanError` naming the column and the other side's type,
never a silent False.

Arithmetic is exact or refused: integers widen to ``int64`` (``uint64`` stays ``uint64``)
and floats to ``float64`` first; a row whose integer result the 64-bit type cannot hold
(``x * x`` beyond 2^63, ``u - 1`` at ``u = 0`` on ``uint64``) is a
:class:`~fbrapids.errors.CleanError` naming the row and the operands, never wrapped; an
``int64`` operand with a ``uint64`` one is refused (no exact common type).  Integer ``//``
and ``%`` by 0 or by a null give null (unknown, so the row is dropped); ``/`` gives ``float64`` (IEEE:
``x / 0`` is inf or NaN), and an integer with a float operand is ``float64`` arithmetic.

Nulls: SQL's three-valued logic on every backend.  A comparison with a null (or NaN)
operand is *unknown*; ``not unknown`` is unknown; ``False and unknown`` is False;
``True or unknown`` is True; rows whose filter is unknown are dropped.  A ``nan`` literal
is such an operand too: ``x != nan`` and ``not (x > nan)`` keep no row, and ``x in [1, nan]``
keeps only the rows where ``x == 1``; a null divisor makes ``x // y`` null.  (pandas' own
``eval`` keeps ``not (x > 1)`` for a NaN ``x`` but drops it for ``pd.NA``; cuDF drops it:
one rule here makes the backends agree.)

Example:
    >>> import pandas as pd
    >>> df = pd.DataFrame({"slot": pd.Series([1, -1, 3, 2], dtype="int8"),
    ...                    "age": pd.array([20, None, 15, 40], dtype="Int16")})
    >>> w = parse_where("slot >= 0 and not age < 18")
    >>> sorted(w.columns), evaluate(w, df).tolist()
    (['age', 'slot'], [True, False, False, True])
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Literal as TypingLiteral,  # (``Literal`` here is the parsed tree's literal node)
    Sequence,
    TypeAlias,
    TypeGuard,
    Union,
)

import numpy as np
from numpy.typing import DTypeLike

from fbrapids.errors import CleanError

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.frames.backend import EagerFrame, EagerSeries

_COMPARE: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Eq: ("==", operator.eq), ast.NotEq: ("!=", operator.ne), ast.Lt: ("<", operator.lt),
    ast.LtE: ("<=", operator.le), ast.Gt: (">", operator.gt), ast.GtE: (">=", operator.ge),
}
_ARITH: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", operator.add), ast.Sub: ("-", operator.sub), ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv), ast.FloorDiv: ("//", operator.floordiv), ast.Mod: ("%", operator.mod),
}
_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_OPS = {sym: fn for sym, fn in list(_COMPARE.values()) + list(_ARITH.values())}
_NULL_TESTS = {"isnull": True, "isna": True, "notnull": False, "notna": False}
#: the Python and numpy scalars an operand may be (anything else is a column)
_SCALARS = (int, float, str, bool, np.number)
_NAMED_LITERALS = {"nan": float("nan"), "inf": float("inf"), "NaN": float("nan"), "Inf": float("inf")}

Scalar = Union[int, float, str, bool]
#: what a value node gives: a column (or arithmetic over columns), or one Python / numpy scalar
Operand: TypeAlias = Union["EagerSeries", Scalar, np.number]


# -- the tree ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    name: str


@dataclass(frozen=True)
class Literal:
    value: Scalar


@dataclass(frozen=True)
class Arith:
    op: str
    left: Value
    right: Value


@dataclass(frozen=True)
class Compare:
    op: str
    left: Value
    right: Value


@dataclass(frozen=True)
class IsIn:
    operand: Value
    values: tuple[Scalar, ...]
    negate: bool


@dataclass(frozen=True)
class NullTest:
    operand: Value
    is_null: bool


@dataclass(frozen=True)
class BoolOp:
    op: str  # "and" | "or"
    operands: tuple[Condition, ...]


@dataclass(frozen=True)
class Not:
    operand: Condition


#: a node that gives a value per row (or one value): a column, a literal, arithmetic over them
Value: TypeAlias = Union[Column, Literal, Arith]
#: a node that gives True / False / unknown per row (a column or literal of bools among them)
Condition: TypeAlias = Union[Compare, BoolOp, Not, IsIn, NullTest, Column, Literal]
#: any node of a parsed filter
Node: TypeAlias = Union[Value, Condition]


@dataclass(frozen=True)
class Where:
    """A parsed filter: its text, its tree and the columns it reads."""

    text: str
    tree: Condition
    columns: frozenset[str]


# -- parsing -----------------------------------------------------------------------------
def parse_where(text: str) -> Where:
    """Parse a filter expression (see the module doc for what it may contain).

    Raises:
        CleanError: the text is not a valid expression, or uses a construct outside the
            allowed set; the message quotes the text and names the construct.

    Example:
        >>> sorted(parse_where("0 <= slot < 8 or isnull(os)").columns)
        ['os', 'slot']
        >>> parse_where("len(q) > 2")
        Traceback (most recent call last):
        ...
        fbrapids.errors.CleanError: filter 'len(q) > 2': call to 'len' is not allowed; functions: isna, isnull, notna, notnull
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise CleanError(f"filter {text!r} is not a valid expression: {exc.msg}") from None
    tree = _Parser(text).build(node)
    if isinstance(tree, (Literal, Arith)):
        raise CleanError(f"filter {text!r} is not a condition (it gives values, not True/False)")
    return Where(text, tree, frozenset(columns_of(tree)))


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, what: str) -> CleanError:
        return CleanError(f"filter {self.text!r}: {what}")

    def build(self, node: ast.AST) -> Node:
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            return BoolOp(op, tuple(self.condition(v) for v in node.values))
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                return Not(self.condition(node.operand))
            if isinstance(node.op, (ast.USub, ast.UAdd)):
                inner = self.value(node.operand)
                sign = -1 if isinstance(node.op, ast.USub) else 1
                if isinstance(inner, Literal) and isinstance(inner.value, (int, float)) and not isinstance(inner.value, bool):
                    return Literal(sign * inner.value)
                return Arith("*", Literal(sign), inner) if sign < 0 else inner
            raise self.fail("'~' is not allowed; write 'not'")
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.BinOp):
            if type(node.op) not in _ARITH:
                sym = {ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^"}.get(type(node.op), type(node.op).__name__)
                hint = "; write 'and' / 'or'" if sym in ("&", "|") else ""
                raise self.fail(f"operator {sym!r} is not allowed{hint}")
            return Arith(_ARITH[type(node.op)][0], self.value(node.left), self.value(node.right))
        if isinstance(node, ast.Call):
            fname = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            if fname not in _NULL_TESTS:
                raise self.fail(f"call to {fname!r} is not allowed; functions: {', '.join(sorted(_NULL_TESTS))}")
            if len(node.args) != 1 or node.keywords:
                raise self.fail(f"{fname}() takes exactly one argument")
            return NullTest(self.value(node.args[0]), _NULL_TESTS[fname])
        if isinstance(node, ast.Name):
            if node.id in _NAMED_LITERALS:
                return Literal(_NAMED_LITERALS[node.id])
            return Column(node.id)
        if isinstance(node, ast.Constant):
            if node.value is None or not isinstance(node.value, (int, float, str, bool)):
                raise self.fail(f"literal {node.value!r} is not allowed (use isnull() to test for nulls)")
            return Literal(node.value)
        raise self.fail(f"{type(node).__name__} expressions are not allowed ({ast.unparse(node)!r})")

    def value(self, node: ast.AST) -> Value:
        out = self.build(node)
        if isinstance(out, (Compare, BoolOp, Not, IsIn, NullTest)):
            raise self.fail(f"{ast.unparse(node)!r} is a condition where a value is expected")
        return out

    def condition(self, node: ast.AST) -> Condition:
        out = self.build(node)
        if isinstance(out, Literal) or isinstance(out, Arith):
            raise self.fail(f"{ast.unparse(node)!r} is a value where a condition is expected")
        return out

    def compare(self, node: ast.Compare) -> Compare | IsIn | BoolOp:
        parts: list[IsIn | Compare] = []
        left: Value | None = self.value(node.left)
        for op, right_node in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                if not isinstance(right_node, (ast.List, ast.Tuple, ast.Set)):
                    raise self.fail("'in' needs a list of literals on its right")
                if left is None:
                    raise self.fail("'in' cannot be chained")
                values = tuple(self.literal(e) for e in right_node.elts)
                parts.append(IsIn(left, values, isinstance(op, ast.NotIn)))
                left = None
                continue
            if type(op) not in _COMPARE:
                raise self.fail(f"comparison {type(op).__name__} is not allowed")
            if left is None:
                raise self.fail("'in' cannot be chained")
            right = self.value(right_node)
            parts.append(Compare(_COMPARE[type(op)][0], left, right))
            left = right
        return parts[0] if len(parts) == 1 else BoolOp("and", tuple(parts))

    def literal(self, node: ast.AST) -> Scalar:
        out = self.value(node)
        if not isinstance(out, Literal):
            raise self.fail(f"'in' lists hold literals only, not {ast.unparse(node)!r}")
        return out.value


def columns_of(tree: Node) -> set[str]:
    """The column names a parsed tree reads.

    Example:
        >>> sorted(columns_of(parse_where("a + b > c").tree))
        ['a', 'b', 'c']
    """
    if isinstance(tree, Column):
        return {tree.name}
    if isinstance(tree, (Arith, Compare)):
        return columns_of(tree.left) | columns_of(tree.right)
    if isinstance(tree, (IsIn, NullTest, Not)):
        return columns_of(tree.operand)
    if isinstance(tree, BoolOp):
        return set().union(*(columns_of(t) for t in tree.operands))
    return set()


def _show(tree: Value) -> str:
    """A value node as the user wrote it, to name it in an error: ``column 'x'``, ``'x + 1'``."""
    def text(t: Value) -> str:
        if isinstance(t, Column):
            return t.name
        if isinstance(t, Literal):
            return repr(t.value)
        if isinstance(t, Arith):
            return f"({text(t.left)} {t.op} {text(t.right)})"
        return repr(t)
    return f"column {tree.name!r}" if isinstance(tree, Column) else repr(text(tree))


# -- evaluation --------------------------------------------------------------------------
@dataclass
class _Truth:
    """A condition's value per row as two null-free bool series: ``value`` (True only where
    known and true) and ``known`` (None: every row known)."""

    value: EagerSeries
    known: EagerSeries | None = None

    def known_or(self, like: EagerSeries) -> EagerSeries:
        return self.known if self.known is not None else _all(like, True)


def evaluate(where: Where | str, frame: EagerFrame) -> EagerSeries:
    """The boolean mask of the rows of ``frame`` (pandas or cudf) that pass ``where``.

    The mask holds no nulls: rows whose condition is unknown are False.

    Raises:
        CleanError: a column is absent, or an operand has a type the operator cannot take.

    Example:
        >>> import pandas as pd
        >>> df = pd.DataFrame({"x": pd.Series([5, 100, -3], dtype="int8")})
        >>> evaluate("x < 300 and x > 2.5", df).tolist()
        [True, True, False]
        >>> big = pd.DataFrame({"x": [2**53 + 1], "f": [2.0**53]})
        >>> evaluate("x == f", big).tolist(), evaluate("x > f", big).tolist()  # not through float64
        ([False], [True])
    """
    w = parse_where(where) if isinstance(where, str) else where
    missing = sorted(w.columns - set(map(str, frame.columns)))
    if missing:
        raise CleanError(f"filter {w.text!r} names column(s) {', '.join(map(repr, missing))} not in the frame; "
                         f"available: {', '.join(map(str, frame.columns))}")
    return _Evaluator(w.text, frame).truth(w.tree).value


def _is_int(v: Operand) -> TypeGuard[EagerSeries | int | np.integer]:
    """An integer operand: a Python int literal (not a bool) or an integer series."""
    if isinstance(v, (bool, np.bool_, float, str)):
        return False
    if isinstance(v, (int, np.integer)):
        return True
    dt = _dtype(v)
    return dt is not None and dt.kind in "iu"


def _all(like: EagerSeries, value: bool) -> EagerSeries:
    """A null-free bool series of ``value`` with ``like``'s index (pandas or cudf)."""
    return (like.notna() | like.isna()) if value else (like.notna() & like.isna())


def _dtype(s: EagerSeries | np.number) -> np.dtype | None:
    """The numpy dtype behind a numeric series (nullable pandas dtypes unwrapped); None otherwise."""
    dt = getattr(s.dtype, "numpy_dtype", s.dtype)
    return dt if isinstance(dt, np.dtype) and dt.kind in "biuf" else None


def _num_dtype(s: EagerSeries | np.number) -> np.dtype:
    """:func:`_dtype` of a series the caller knows is numeric."""
    dt = _dtype(s)
    if dt is None:
        raise CleanError(f"expected a numeric column here, got dtype {s.dtype}")
    return dt


#: the name of pandas' nullable dtype for each numpy number type (``int8`` -> ``Int8``)
_MASKED: dict[str, TypingLiteral["Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64",
                                 "Float32", "Float64"]] = {
    "int8": "Int8", "int16": "Int16", "int32": "Int32", "int64": "Int64",
    "uint8": "UInt8", "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64",
    "float32": "Float32", "float64": "Float64",
}


def _astype(s: EagerSeries, dt: DTypeLike) -> EagerSeries:
    """``s`` as numpy dtype ``dt``, keeping nulls: a pandas nullable column becomes the
    nullable dtype of that width (``Int8`` -> ``Int16``); numpy / cudf columns cast directly."""
    dt = np.dtype(dt)
    if getattr(s.dtype, "numpy_dtype", None) is not None and not isinstance(s.dtype, np.dtype):
        masked = _MASKED.get(dt.name)
        if masked is not None:
            return s.astype(masked)
    return s.astype(dt)


class _Evaluator:
    def __init__(self, text: str, frame: EagerFrame) -> None:
        self.text = text
        self.frame = frame

    def fail(self, what: str) -> CleanError:
        return CleanError(f"filter {self.text!r}: {what}")

    def like(self) -> EagerSeries:
        return self.frame[self.frame.columns[0]]

    # values: a series or a Python scalar
    def value(self, tree: Value) -> Operand:
        if isinstance(tree, Column):
            return self.frame[tree.name]
        if isinstance(tree, Literal):
            return tree.value
        if isinstance(tree, Arith):
            left, right = self.widen(self.value(tree.left)), self.widen(self.value(tree.right))
            if _is_int(left) and _is_int(right) and tree.op != "/":
                return self.int_arith(tree, left, right)
            try:
                return _OPS[tree.op](left, right)
            except (TypeError, ValueError, ZeroDivisionError) as exc:
                raise self.fail(f"cannot compute {tree.op!r} here: {exc}") from None
        raise self.fail("a condition is not a value")

    @staticmethod
    def widen(v: Operand) -> Operand:
        """Integers to 64 bits and floats to float64 before arithmetic (no wrap-around); an
        Arrow-backed column to pandas' masked dtype (pandas' Arrow arrays have no ``%``)."""
        if isinstance(v, (int, float, str, bool)):
            return v
        dt = _dtype(v)
        if dt is None or dt.kind == "b":
            return v
        target = {"i": np.int64, "u": np.uint64 if dt.itemsize == 8 else np.int64, "f": np.float64}[dt.kind]
        arrow = getattr(v.dtype, "pyarrow_dtype", None) is not None
        return v if dt == target and not arrow else _astype(v, target)

    def int_arith(self, tree: Arith, left: EagerSeries | int | np.integer, right: EagerSeries | int | np.integer
                  ) -> EagerSeries | np.integer:
        """``a op b`` on 64-bit integers, exactly: a row whose result int64 (uint64 for a
        uint64 column) cannot hold is an error naming the row; ``//`` and ``%`` by 0 (or by a
        null) are null."""
        kinds = {_num_dtype(v).kind for v in (left, right) if not isinstance(v, int)}
        unsigned = "u" in kinds
        if kinds == {"i", "u"}:
            raise self.fail(f"{tree.op!r} of an int64 and a uint64 operand has no exact 64-bit type; cast one side")
        dt = np.dtype(np.uint64 if unsigned else np.int64)
        info = np.iinfo(dt)
        a, b = (self.int_literal(v, dt, info) if isinstance(v, int) else v for v in (left, right))
        op = tree.op
        zero: EagerSeries | None = None
        if op in ("//", "%") and isinstance(b, np.generic):  # a literal divisor: every row or none
            if isinstance(a, np.generic) and b == 0:
                raise self.fail(f"cannot compute {op!r} here: integer division by zero")
            zero = _all(self.like(), bool(b == 0))
        elif op in ("//", "%") and not isinstance(b, np.generic):  # a null divisor is unknown too
            zero = (b == 0).fillna(True).astype(bool) | b.isna()  # (it must not become the 1 below)
        if zero is not None:
            b = b.where(b != 0, dt.type(1)) if hasattr(b, "where") else (dt.type(1) if b == 0 else b)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            r = _OPS[op](a, b)
            if op == "+":
                bad = (r < a) if unsigned else ((b > 0) & (r < a)) | ((b < 0) & (r > a))
            elif op == "-":
                bad = (a < b) if unsigned else ((b > 0) & (r > a)) | ((b < 0) & (r < a))
            elif op == "*":
                one = a.where(a != 0, dt.type(1)) if hasattr(a, "where") else (a or dt.type(1))
                bad = (a != 0) & ((r // one != b) | (r % one != 0))
                if not unsigned:
                    bad = bad | ((a == -1) & (b == info.min)) | ((b == -1) & (a == info.min))
            elif op == "//" and not unsigned:
                bad = (a == info.min) & (b == -1)
            else:
                bad = False
        self.check_overflow(tree, bad, a, b)
        if zero is not None and hasattr(r, "where"):
            if isinstance(getattr(r, "dtype", None), np.dtype) and hasattr(r, "attrs"):  # pandas numpy ints: nullable first
                r = _astype(r.astype(("UInt" if unsigned else "Int") + "64"), dt)
            r = r.where(~zero.fillna(False))
        return r

    def int_literal(self, v: int, dt: np.dtype, info: np.iinfo) -> np.integer:
        if not info.min <= v <= info.max:
            raise self.fail(f"the literal {v} is outside {dt}, the type of this arithmetic")
        return dt.type(v)

    def check_overflow(self, tree: Arith, bad: EagerSeries | bool | np.bool_, a: Operand, b: Operand) -> None:
        if isinstance(bad, (bool, np.bool_)):
            if bad:
                raise self.fail(f"{tree.op!r} of {a} and {b} overflows 64 bits")
            return
        flags = np.asarray(bad.fillna(False).to_numpy(), dtype=bool) if hasattr(bad, "fillna") else np.asarray(bad)
        if flags.any():
            i = int(np.flatnonzero(flags)[0])
            row = bad.index[i]
            show = [v.iloc[i] if hasattr(v, "iloc") else v for v in (a, b)]
            dts = [_dtype(v) for v in (a, b) if hasattr(v, "dtype")]
            raise self.fail(f"row {row!r}: {show[0]} {tree.op} {show[1]} overflows "
                            f"{'uint64' if any(d is not None and d.kind == 'u' for d in dts) else 'int64'}"
                            " (integer arithmetic is exact in 64 bits or refused)")

    # conditions
    def truth(self, tree: Condition) -> _Truth:
        if isinstance(tree, Compare):
            return self.compare(tree)
        if isinstance(tree, BoolOp):
            return self.boolop(tree)
        if isinstance(tree, Not):
            inner = self.truth(tree.operand)
            known = inner.known_or(self.like())
            return _Truth(~inner.value & known, inner.known)
        if isinstance(tree, NullTest):
            v = self.value(tree.operand)
            if isinstance(v, _SCALARS):
                raise self.fail("isnull() takes a column or an expression over columns")
            return _Truth(v.isna() if tree.is_null else v.notna())
        if isinstance(tree, IsIn):
            v = self.value(tree.operand)
            if isinstance(v, _SCALARS):
                raise self.fail("'in' needs a column on its left")
            known = v.notna()
            hit = v.isin(self.in_values(tree, v)).fillna(False).astype(bool) & known
            if any(isinstance(lit, float) and math.isnan(lit) for lit in tree.values):
                known = hit  # ``x in [1, nan]`` is ``x == 1 or x == nan``: unknown where no value matched
            return _Truth((~hit & known) if tree.negate else hit, known)
        if isinstance(tree, Column):
            v = self.frame[tree.name]
            dt = _dtype(v)
            if dt is None or dt.kind != "b":
                raise self.fail(f"column {tree.name!r} ({v.dtype}) is not boolean; compare it with something")
            known = v.notna()
            return _Truth(v.fillna(False).astype(bool) & known, known)
        if isinstance(tree, Literal) and isinstance(tree.value, bool):
            return _Truth(_all(self.like(), tree.value))
        raise self.fail(f"{tree!r} is not a condition")

    def boolop(self, tree: BoolOp) -> _Truth:
        acc = self.truth(tree.operands[0])
        for operand in tree.operands[1:]:
            nxt = self.truth(operand)
            if acc.known is None and nxt.known is None:
                acc = _Truth(acc.value & nxt.value if tree.op == "and" else acc.value | nxt.value)
                continue
            ka, kb = acc.known_or(acc.value), nxt.known_or(nxt.value)
            if tree.op == "and":  # False wins over unknown
                value = acc.value & nxt.value
                known = (ka & kb) | (ka & ~acc.value) | (kb & ~nxt.value)
            else:  # True wins over unknown
                value = acc.value | nxt.value
                known = (ka & kb) | acc.value | nxt.value
            acc = _Truth(value, known)
        return acc

    def compare(self, tree: Compare) -> _Truth:
        left, right = self.value(tree.left), self.value(tree.right)
        op = tree.op
        named = tree.left
        if isinstance(left, _SCALARS):
            if isinstance(right, _SCALARS):
                raise self.fail(f"comparison {tree.left!r} {op} {tree.right!r} reads no column")
            left, right, op, named = right, left, _MIRROR[op], tree.right
        if not isinstance(right, _SCALARS):
            known = left.notna() & right.notna()
            raw = self.columns(op, left, right, tree)
        else:
            known = left.notna()
            raw = self.against_literal(left, op, right, named)
            if raw is None:  # unknown on every row
                none = _all(left, False)
                return _Truth(none, none)
            if isinstance(raw, bool):
                return _Truth(known & raw, known)
        value = raw.fillna(False).astype(bool) & known
        return _Truth(value, known)

    def columns(self, op: str, a: EagerSeries, b: EagerSeries, tree: Compare) -> EagerSeries:
        """``a op b`` for two series, exactly: ``int64`` against ``uint64`` by sign, then
        value; an integer against a float as numbers (never through float64 alone)."""
        da, db = _dtype(a), _dtype(b)
        if da is None or db is None or da == db:
            if (da is None) != (db is None):
                raise self.fail(f"cannot compare {_show(tree.left)} ({a.dtype}) with {_show(tree.right)} ({b.dtype})")
            return _OPS[op](a, b)
        kinds = da.kind + db.kind
        if "f" in kinds and kinds.replace("f", "").replace("b", "") != "":  # an integer with a float
            if da.kind == "f":
                return self.int_vs_float(_MIRROR[op], self.widen(b), self.widen(a))
            return self.int_vs_float(op, self.widen(a), self.widen(b))
        target = np.promote_types(da, db)
        if target.kind == "f" and "f" not in kinds:  # int64 with uint64: no exact common type
            a, b = self.widen(a), self.widen(b)
            if _num_dtype(a).kind == "u":
                a, b, op = b, a, _MIRROR[op]
            return self.signed_vs_unsigned(op, a, b)
        return _OPS[op](a if da == target else _astype(a, target), b if db == target else _astype(b, target))

    @staticmethod
    def signed_vs_unsigned(op: str, a: EagerSeries, b: EagerSeries) -> EagerSeries:
        """``a op b`` for an ``int64`` ``a`` and a ``uint64`` ``b``: a negative ``a`` is below
        every ``b``; otherwise both compare as ``uint64``."""
        neg = (a < 0).fillna(False).astype(bool)
        as_u = _astype(a.where(~neg, 0), np.uint64)
        same = _OPS[op](as_u, b).fillna(False).astype(bool)
        return (same & ~neg) | (neg & (op in ("<", "<=", "!=")))

    @staticmethod
    def int_vs_float(op: str, a: EagerSeries, f: EagerSeries) -> EagerSeries:
        """``a op f`` for a 64-bit integer ``a`` and a ``float64`` ``f``, exactly.  Rounding is
        monotonic, so where ``float(a) != f`` the float comparison is right; where they tie,
        ``f`` is integral and compares with ``a`` as an integer (``f`` beyond the integer type
        lies above every ``a``)."""
        dt = _num_dtype(a)
        fa = _astype(a, np.float64)
        tie = (fa == f).fillna(False).astype(bool)
        by_float = _OPS[op](fa, f).fillna(False).astype(bool) & ~tie
        limit = float(2**64 if dt.kind == "u" else 2**63)
        beyond = tie & (f >= limit).fillna(False).astype(bool)
        exact_rows = tie & ~beyond
        f_int = _astype(f.where(exact_rows, 0.0).fillna(0.0), dt)
        exact = _OPS[op](a, f_int).fillna(False).astype(bool) & exact_rows
        return by_float | exact | (beyond & (op in ("<", "<=", "!=")))

    def against_literal(self, col: EagerSeries, op: str, lit: Scalar | np.number, named: Value | None = None) -> EagerSeries | bool | None:
        """``col op lit`` with exact types; a bool when the answer is the same for every
        non-null row; None when it is unknown on every row (a NaN literal)."""
        dt = _dtype(col)
        what = _show(named) if named is not None else "a column"
        if isinstance(lit, str) or dt is None:
            if dt is not None:
                raise self.fail(f"cannot compare {what} ({col.dtype}) with the str literal {lit!r}")
            if not isinstance(lit, str):
                raise self.fail(f"cannot compare {what} ({col.dtype}) with the {type(lit).__name__} literal {lit!r}")
            if op not in ("==", "!=") and str(col.dtype) == "category":  # strings are ordered by value, not by code
                col = col.astype(col.cat.categories.dtype if len(col.cat.categories) else "str")
            return _OPS[op](col, lit)
        if dt.kind == "b":
            if not isinstance(lit, (bool, int)) or lit not in (0, 1):
                raise self.fail(f"cannot compare a boolean column with {lit!r}")
            return _OPS[op](col.fillna(False).astype(bool), bool(lit))
        if isinstance(lit, float) and math.isnan(lit):
            return None  # a NaN operand is unknown, whatever the operator (``x != nan`` too)
        if dt.kind == "f":
            cast = dt.type(lit)
            if float(cast) == lit or math.isinf(lit):
                return _OPS[op](col, cast)
            near = np.float64(lit)
            if isinstance(lit, int) and float(near) != lit:  # an int no float64 holds: exact all the same
                if op in ("==", "!="):
                    return op == "!="
                # no float lies strictly between lit and its nearest float64 ``near``
                op = {"<": "<", "<=": "<", ">": ">=", ">=": ">="}[op] if near > lit else \
                     {"<": "<=", "<=": "<=", ">": ">", ">=": ">"}[op]
            return _OPS[op](_astype(col, np.float64), near)
        return self.int_against(col, dt, op, lit)

    def in_values(self, tree: IsIn, col: EagerSeries) -> Sequence[Scalar] | np.ndarray:
        """The literals of ``col in [...]`` that a value of ``col`` can equal, in ``col``'s own
        type (so ``isin`` never goes through float64); a literal of another kind (a str
        against a number, a number against text) is a CleanError naming both."""
        dt = _dtype(col)
        categories = _dtype(col.cat.categories) if str(col.dtype) == "category" else None
        if categories is not None and not len(col.cat.categories):
            return []  # all null (pandas gives it float64 categories): nothing to match, any literal
        if categories is not None and categories.kind in "iuf":  # a categorical of numbers: by its values
            dt = categories
        for lit in tree.values:
            numeric = isinstance(lit, (int, float)) and not isinstance(lit, bool)
            if dt is None and not isinstance(lit, str) or dt is not None and dt.kind in "iuf" and not numeric \
                    or dt is not None and dt.kind == "b" and not isinstance(lit, bool):
                raise self.fail(f"'in' compares {_show(tree.operand)} ({col.dtype}) with the "
                                f"{type(lit).__name__} literal {lit!r}")
        if dt is None:
            return list(tree.values)
        if dt.kind == "b":
            return [bool(v) for v in tree.values]
        kept = [v for v in tree.values if isinstance(v, (int, float)) and self.holds(dt, v)]  # (all numeric here)
        return np.array(kept, dtype=dt) if categories is None else kept

    @staticmethod
    def holds(dt: np.dtype, v: int | float) -> bool:
        """Whether ``v`` is exactly a value of numeric dtype ``dt`` (NaN equals nothing)."""
        if isinstance(v, float) and not math.isfinite(v):
            return dt.kind == "f" and not math.isnan(v)
        if dt.kind in "iu":
            info = np.iinfo(dt)
            return float(v).is_integer() and info.min <= int(v) <= info.max if isinstance(v, float) \
                else info.min <= v <= info.max
        cast = dt.type(v)
        return math.isfinite(cast) and (int(cast) == v if isinstance(v, int) else float(cast) == v)

    def int_against(self, col: EagerSeries, dt: np.dtype, op: str, lit: int | float | np.number) -> EagerSeries | bool:
        if isinstance(lit, float):
            if math.isinf(lit):
                return op in ("!=", "<", "<=") if lit > 0 else op in ("!=", ">", ">=")
            if not lit.is_integer():  # an integer never equals 2.5; x > 2.5 <=> x >= 3, x < 2.5 <=> x <= 2
                if op in ("==", "!="):
                    return op == "!="
                op, lit = {"<": ("<=", math.floor(lit)), "<=": ("<=", math.floor(lit)),
                           ">": (">=", math.ceil(lit)), ">=": (">=", math.ceil(lit))}[op]
            lit = int(lit)
        info = np.iinfo(dt)
        if info.min <= lit <= info.max:
            return _OPS[op](col, dt.type(lit))
        wide = self.wider_int(dt, lit)
        if wide is not None:
            return _OPS[op](_astype(col, wide), wide.type(lit))
        above = lit > info.max  # the literal lies beyond every value the column can hold
        return {"==": False, "!=": True, "<": above, "<=": above, ">": not above, ">=": not above}[op]

    @staticmethod
    def wider_int(dt: np.dtype, lit: int | np.number) -> np.dtype | None:
        """The smallest integer dtype holding every value of ``dt`` and ``lit``, if any."""
        for cand in (np.int16, np.int32, np.int64, np.uint16, np.uint32, np.uint64):
            c: np.dtype[Any] = np.dtype(cand)
            ci, di = np.iinfo(c), np.iinfo(dt)
            if c.itemsize >= dt.itemsize and ci.min <= di.min and ci.max >= di.max and ci.min <= lit <= ci.max:
                return c
        return None
