"""Operators: what a feature operator declares, and user operators from C snippets.

An operator declares its inputs (type classes), its output type, its parameters and the
per-row C it runs.  Built-ins (:mod:`fbrapids.kernels.builtins`, one module each) and user operators have
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
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from fbrapids.errors import OperatorError, OperatorTypeError
from fbrapids.kernels import types as T
from fbrapids.kernels.expr import Call, Expr
from fbrapids.kernels.params import Check


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


#: a bound on the distinct values an expression takes: (most values, what bounds them)
Bound = tuple[int, str]


@dataclass(frozen=True)
class Sizes:
    """What an operator's ``bound`` may ask about its arguments: ``values(arg)``, the bound
    of an argument's distinct values; ``length(arg)``, the most elements an argument's list
    holds (each None when nothing bounds it)."""

    values: Callable[[Expr], Bound | None]
    length: Callable[[Expr], int | None]

#: where an operator runs: in a meta-kernel (``kernel``), or at frame level over whole
#: frames (:mod:`fbrapids.features.fitted`): ``fitted`` (statistics fitted on a training
#: frame and frozen), ``history`` (over a key's earlier rows: the frame is shuffled by the
#: key), ``row`` (vectorised per partition)
STAGES = ("kernel", "fitted", "history", "row")


@dataclass(frozen=True)
class DictionaryPath:
    """How an operator may run once per distinct input value (or tuple of values), its
    results scattered to the rows (:mod:`fbrapids.kernels.dictionary`): only a pure function
    of its inputs' values may, so the row path's output is kept bit for bit.

    Attributes:
        kind: ``"scalar"`` (one value per row) or ``"tokens"`` (a list per row: several
            fingerprints each, so worth it at a higher share of distinct values).
        takes: the exact input types it takes there; None: strings and integers.
        coded_inputs_only: only where its inputs are on the dictionary path themselves (a
            list has no dictionary of its own: ``ngrams`` of a ``split``).
        device: the CUDA runtime may also run it once per category of its single
            categorical input (a fixed-width result whose null rule is the plain one).

    Example:
        >>> DictionaryPath().allows(["str", "i64"]), DictionaryPath(takes=("str",)).allows(["i64"])
        (True, False)
    """

    kind: str = "scalar"
    takes: tuple[str, ...] | None = None
    coded_inputs_only: bool = False
    device: bool = False

    def allows(self, types: list[str]) -> bool:
        """Whether inputs of these types may take the dictionary path."""
        if self.takes is not None:
            return tuple(types) == self.takes
        return bool(types) and all(t == "str" or t in T.INT_TYPES for t in types)


def buckets_bound(call: Call) -> Bound | None:
    """What a ``buckets`` parameter bounds, on any operator: ``(buckets, why)``, or None.

    Example:
        >>> buckets_bound(Call("cross", (), (("buckets", 8),)))
        (8, '8 hash buckets')
    """
    buckets = call.param_dict().get("buckets")
    return (buckets, f"{buckets:,} hash buckets") if isinstance(buckets, int) and buckets > 0 else None


@dataclass
class Operator:
    """A feature operator: what the planner, the renderers, the runtimes, the dictionary
    path, the disk budget and the frame-level stage ask about it.

    Attributes:
        name: registry name.
        inputs: one type class per input (see :data:`fbrapids.kernels.types.CLASSES`);
            with ``variadic`` the last class applies to every further input.
        resolver: ``(input_types, params) -> Impl``; raises OperatorTypeError / OperatorError.
        doc: what it computes, including its null rule.
        headers: C headers its C needs (``ops/fbx_ops_hash.h``, ... under ``csrc/``, or
            an absolute path).
        source: extra C (device functions) for user operators.
        null_rule: one line for ``explain`` and the docs.
        stage: where it runs (:data:`STAGES`); a ``fitted`` one has state fitted over the
            data (``categorify``): the features layer fits it and replaces the call by its
            fitted column before planning.
        params: parameter name -> its check (:mod:`fbrapids.kernels.params`), run when
            ``fbrapids.ops`` builds an expression and again when the planner resolves it.
        family: what it does, for drawings (``hash``, ``cross``, ``string``, ``list``,
            ``json``, ``lookup``, ``scalar``, ``custom``).
        dictionary: how it may run once per distinct input value (None: never).
        hashes: each value or list element of its integer results is one FarmHash
            fingerprint (the dictionary path counts them).
        reads_time: its single input is a time (timestamps read as epoch seconds).
        bound: ``(call, sizes) -> Bound | None``: the most distinct values its output
            takes (the disk budget's table sizes), :class:`Sizes` telling its arguments'; a
            ``buckets`` parameter bounds any operator.
        longest: ``call -> int | None``: the most elements its list result holds.
        builder: its function for users, ``fbrapids.ops.<name>`` (None: reached through
            ``fbrapids.ops.call(name, ...)`` only).
    """

    name: str
    inputs: tuple[str, ...]
    resolver: Callable[[tuple[str, ...], dict[str, Any]], Impl]
    doc: str = ""
    headers: tuple[str, ...] = ()
    source: str = ""
    variadic: bool = False
    null_rule: str = "a null input gives a null output"
    stage: str = "kernel"
    params: Mapping[str, Check] = field(default_factory=dict)
    family: str = "custom"
    dictionary: DictionaryPath | None = None
    hashes: bool = False
    reads_time: bool = False
    bound: Callable[[Call, Sizes], Bound | None] | None = field(default=None, repr=False)
    longest: Callable[[Call], int | None] | None = field(default=None, repr=False)
    builder: Callable[..., Call] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise OperatorError(f"operator {self.name!r}: stage {self.stage!r} is not one of {', '.join(STAGES)}")

    @property
    def needs_fit(self) -> bool:
        """Whether its state is fitted over a training frame first (``stage == "fitted"``)."""
        return self.stage == "fitted"

    def check_params(self, params: Mapping[str, object]) -> None:
        """Each declared parameter's check on its value (a missing one checked as None);
        an error names the operator and the parameter.

        Example:
            >>> from fbrapids.kernels.registry import get_operator
            >>> get_operator("first_k").check_params({"k": -1})
            Traceback (most recent call last):
            ...
            fbrapids.errors.OperatorError: first_k: parameter 'k' must be an integer in [0, 9223372036854775807], got -1
        """
        try:
            for name, check in self.params.items():
                check(name, params.get(name))
        except OperatorError as exc:
            raise OperatorError(f"{self.name}: {exc}") from None

    def list_length(self, call: Call) -> int | None:
        """The most elements ``call``'s list result holds, or None when nothing bounds it.

        Example:
            >>> from fbrapids.kernels.registry import get_operator
            >>> get_operator("last_k").list_length(Call("last_k", (), (("k", 5),)))
            5
        """
        return self.longest(call) if self.longest is not None else None

    def distinct_bound(self, call: Call, sizes: Sizes) -> Bound | None:
        """The most distinct values ``call`` (of this operator) takes, and why; None when
        nothing bounds it.

        Example:
            >>> from fbrapids.kernels.registry import get_operator
            >>> unknown = Sizes(values=lambda e: None, length=lambda e: None)
            >>> get_operator("hash_bucket").distinct_bound(Call("hash_bucket", (), (("buckets", 64),)), unknown)
            (64, '64 hash buckets')
        """
        found = [b for b in (buckets_bound(call), self.bound(call, sizes) if self.bound else None) if b is not None]
        return min(found, key=lambda b: b[0]) if found else None

    def check_arity(self, n: int) -> None:
        if self.variadic:
            if n < len(self.inputs):
                raise OperatorError(f"operator {self.name!r} takes at least {len(self.inputs)} inputs, got {n}")
        elif n != len(self.inputs):
            raise OperatorError(f"operator {self.name!r} takes {len(self.inputs)} input(s), got {n}")

    def input_class(self, i: int) -> str:
        return self.inputs[min(i, len(self.inputs) - 1)]

    def resolve(self, in_types: tuple[str, ...], params: dict[str, Any]) -> Impl:
        """Check arity, input types and parameters, then give the Impl for these types."""
        self.check_arity(len(in_types))
        for i, t in enumerate(in_types):
            cls = self.input_class(i)
            if not T.matches(t, cls):
                raise OperatorTypeError(
                    f"operator {self.name!r} input {i} has type {t}; it accepts {cls} "
                    f"({', '.join(T.CLASSES.get(cls, (cls,)))})")
        try:
            self.check_params(params)
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
