"""Operators: what a feature operator declares, and user operators from C snippets.

An operator declares its inputs (type classes), its output type, its parameters and the
per-row C it runs.  Built-ins (:mod:`fbrapids.kernels.builtins`) and user operators have
the same form; the registry of them by name is :mod:`fbrapids.kernels.registry`.  Resolving an operator against concrete input types gives an
:class:`Impl`: the output type and the C text the renderers put in a meta-kernel.

C text templates use placeholders, filled in by the renderer:

* ``{a0}``, ``{a1}``, ...: the row's input values (scalars, or ``fbx_str`` / ``fbx_li`` /
  ``fbx_ls`` views); ``{v0}``, ...: their validity (int, 1 = a value);
* ``{out}``: where the result goes (a scalar pointer for ``kind="func"``; for
  variable-length results NULL in the size phase, the pool address in the write phase);
  ``{ends}``, ``{bytes}``, ``{nbytes}`` for string-list results;
* ``{b0}``, ...: read-only parameter buffers (lookup tables, boundaries);
* ``{err}``: the kernel's error word; ``{status}``: a per-row int8 side output or NULL;
* ``{id}``: a name unique to the operator instance (for prelude temporaries).
* ``{scratch}``: (``var`` results other than ``list<str>``) a per-row ``fbx_i64*`` the size
  phase may write and the write phase reads back (json_get keeps the value's offset there).

Kinds: ``expr`` (a C expression giving the value), ``func`` (a call returning validity,
writing ``*{out}``), ``var`` (a call returning the element count, < 0 for null, in the
two-phase pool protocol).

Example:
    >>> op = user_operator("times_plus_demo", "i64 x, i64 y", "i64 z", "z = x * y + 1;")
    >>> op.resolve(("i64", "i64"), {}).out_type
    'i64'
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from fbrapids.kernels import types as T
from fbrapids.errors import OperatorError, OperatorTypeError


@dataclass(frozen=True)
class Impl:
    """An operator resolved for concrete input types: what the renderer emits."""

    out_type: str
    kind: str  # "expr" | "func" | "var"
    template: str
    null_rule: str = "propagate"  # or "handles": called on null inputs too ({v0}.. tell)
    prelude: str = ""
    buffers: tuple[np.ndarray, ...] = ()
    status: bool = False
    headers: tuple[str, ...] = ()
    footprint: int = 0  # bytes the operator needs resident (its parameter buffers)
    never_null: bool = False  # a value on every row, null inputs included (fill_null, lookup)
    #: a type every input value must fit (cast): the runtime checks the input before the layer
    #: runs and raises naming the feature, the row and the value (see ``types.misfits``)
    checks_fit: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("expr", "func", "var"):
            raise OperatorError(f"Impl kind {self.kind!r}: expected expr, func or var")
        if self.kind == "var" and not T.is_var(self.out_type):
            raise OperatorError(f"Impl kind 'var' needs a variable-length output, got {self.out_type}")
        if self.kind != "var" and T.is_var(self.out_type):
            raise OperatorError(f"a {self.out_type} output needs kind 'var', got {self.kind!r}")


@dataclass
class Operator:
    """A feature operator.

    Attributes:
        name: registry name.
        inputs: one type class per input (see :data:`fbrapids.kernels.types.CLASSES`);
            with ``variadic`` the last class applies to every further input.
        resolver: ``(input_types, params) -> Impl``; raises OperatorTypeError / OperatorError.
        doc: what it computes, including its null rule.
        headers: csrc headers its C needs (``ops/fbx_ops_hash.h``, ...).
        source: extra C (device functions) for user operators.
        null_rule: one line for ``explain`` and the docs.
        needs_fit: the operator has state fitted over the data (``categorify``); the
            features layer fits it (:mod:`fbrapids.features.fitting`) and replaces the
            call by a fitted operator before planning.
    """

    name: str
    inputs: tuple[str, ...]
    resolver: Callable[[tuple[str, ...], dict[str, Any]], Impl]
    doc: str = ""
    headers: tuple[str, ...] = ()
    source: str = ""
    variadic: bool = False
    null_rule: str = "a null input gives a null output"
    needs_fit: bool = False

    def check_arity(self, n: int) -> None:
        if self.variadic:
            if n < len(self.inputs):
                raise OperatorError(f"operator {self.name!r} takes at least {len(self.inputs)} inputs, got {n}")
        elif n != len(self.inputs):
            raise OperatorError(f"operator {self.name!r} takes {len(self.inputs)} input(s), got {n}")

    def input_class(self, i: int) -> str:
        return self.inputs[min(i, len(self.inputs) - 1)]

    def resolve(self, in_types: tuple[str, ...], params: dict[str, Any]) -> Impl:
        """Check arity and input types, then give the Impl for these types."""
        self.check_arity(len(in_types))
        for i, t in enumerate(in_types):
            cls = self.input_class(i)
            if not T.matches(t, cls):
                raise OperatorTypeError(
                    f"operator {self.name!r} input {i} has type {t}; it accepts {cls} "
                    f"({', '.join(T.CLASSES.get(cls, (cls,)))})")
        try:
            impl = self.resolver(tuple(in_types), dict(params))
        except OperatorError as exc:  # a parameter's error names its operator
            if str(exc).startswith((self.name, f"operator {self.name!r}")):
                raise
            raise OperatorError(f"operator {self.name!r}: {exc}") from exc
        if self.headers or self.source:
            impl = Impl(**{**impl.__dict__, "headers": tuple(dict.fromkeys(self.headers + impl.headers))})
        return impl


_DECL = re.compile(r"^\s*(\w+)\s+([A-Za-z_]\w*)\s*$")


def _parse_decls(text: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = _DECL.match(part)
        if not m or m.group(1) not in T.FIXED_TYPES + ("str",):
            raise OperatorError(f"bad {what} declaration {part!r}: expected '<type> <name>' with type one of "
                                f"{', '.join(T.FIXED_TYPES + ('str',))}")
        out.append((m.group(1), m.group(2)))
    return out


def user_operator(name: str, in_params: str, out_params: str, operation: str, *,
                  preamble: str = "", null_rule: str = "propagate", doc: str = "") -> Operator:
    """A user operator from a C snippet, like ``cupy.ElementwiseKernel`` (not registered:
    :func:`fbrapids.kernels.registry.register_operator` builds and registers one).

    Args:
        name: operator name (used as ``fbrapids.ops.call(name, *inputs)``).
        in_params: ``"i64 x, str s"``: typed inputs; ``str`` arrives as an ``fbx_str``
            view (``s.p``, ``s.n``).  Accepted input columns must have exactly these types
            (``str`` accepts any string column).
        out_params: ``"f64 z"``: one fixed-width output.
        operation: C statements that assign the output (``z = x * 2;``); they may use the
            helpers of ``farmhash.h`` (``fbx_fp64``) and ``fbx_views.h``.
        preamble: extra C (device functions, declared with ``FBX_DEVICE``).
        null_rule: ``"propagate"`` (a null input gives null; the snippet never sees nulls).
        doc: a docstring shown by ``help``.

    Example:
        >>> user_operator("halve_demo", "f64 x", "f64 y", "y = x / 2;").inputs
        ('f64',)
    """
    ins = _parse_decls(in_params, "input")
    outs = _parse_decls(out_params, "output")
    if len(outs) != 1 or outs[0][0] == "str":
        raise OperatorError(f"operator {name!r}: declare exactly one fixed-width output, got {out_params!r}")
    if null_rule != "propagate":
        raise OperatorError(f"operator {name!r}: user operators support null_rule='propagate' only")
    out_t, out_name = outs[0]
    fn = f"fbx_user_{re.sub(r'[^0-9A-Za-z_]', '_', name)}_{hashlib.sha1(operation.encode()).hexdigest()[:8]}"
    args = ", ".join(f"{T.C_TYPE[t]} {n}" for t, n in ins)
    source = (f"{preamble}\n/* user operator {name} */\n"
              f"FBX_DEVICE int {fn}({args}{', ' if args else ''}{T.C_TYPE[out_t]}* fbx_out_) {{\n"
              f"  {T.C_TYPE[out_t]} {out_name} = 0;\n"
              f"  {operation}\n"
              f"  *fbx_out_ = {out_name};\n  return 1;\n}}\n")
    call = f"{fn}({', '.join('{a%d}' % i for i in range(len(ins)))}{', ' if ins else ''}{{out}})"

    def resolver(in_types: tuple[str, ...], params: dict[str, Any]) -> Impl:
        return Impl(out_type=out_t, kind="func", template=call)

    return Operator(name=name, inputs=tuple(t for t, _ in ins), resolver=resolver,
                    doc=doc or f"user operator: {in_params} -> {out_params}: {operation}",
                    headers=("ops/fbx_views.h", "farmhash.h"), source=source)
