"""Every attribute chain and call fbrapids makes into the GPU libraries, resolved against the
installed ones: attributes (enum members included) exist, and arguments bind to the real
signature (``inspect.signature``, else the wheel's ``.pyi`` stub); a string passed where the
signature says ``Literal[...]`` is one of its values.

A *reference* is found by name (see :mod:`aliases`), in source text, with ``ast``; nothing of
fbrapids is imported.  Each gives a :class:`Finding`: ``ok``, ``error`` (the stage fails) or
``unchecked`` (a chain through a value whose type is unknown, or a callable with no readable
signature: counted and listed, never silently passed).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from gpu_conformance import stubs
from gpu_conformance.aliases import GPU_ROOTS, MODULE_ALIASES, RECEIVERS


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    text: str
    status: str  # "ok" | "error" | "unchecked"
    why: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}: {self.status}{' - ' + self.why if self.why else ''}"


def _chain(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]`` (None for anything but names and attributes)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


def _import_bindings(tree: ast.Module) -> dict[str, str]:
    """Names bound to GPU-library objects by import statements and ``try_import("mod")``."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in GPU_ROOTS:
                    out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in GPU_ROOTS and not node.level:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}:{a.name}"
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            fn = _chain(node.value.func)
            args = node.value.args
            if fn and fn[-1] == "try_import" and args and isinstance(args[0], ast.Constant) \
                    and str(args[0].value).split(".")[0] in GPU_ROOTS:
                for target in node.targets:
                    text = ast.unparse(target)
                    out[text] = str(args[0].value)
    return out


def _load(path: str) -> Any:
    """The object for ``"pkg.mod"`` or ``"pkg.mod:attr"`` or ``"pkg.mod.Class"``."""
    if ":" in path:
        mod, attr = path.split(":", 1)
        return getattr(importlib.import_module(mod), attr)
    try:
        return importlib.import_module(path)
    except ImportError:
        mod, attr = path.rsplit(".", 1)
        return getattr(importlib.import_module(mod), attr)


class _Instance:
    """An instance of ``cls`` (attribute lookups go to the class)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls


def _signature(obj: Any) -> inspect.Signature | None:
    target = obj.cls if isinstance(obj, _Instance) else obj
    try:
        sig = inspect.signature(target)
        if isinstance(target, type) and list(sig.parameters) == ["args", "kwargs"] or \
                (isinstance(target, type) and tuple(sig.parameters) == ("args", "_obj", "_no_init", "kwargs")):
            return stubs.stub_signature(target) or sig
        return sig
    except (TypeError, ValueError):
        return stubs.stub_signature(target) or stubs.docstring_signature(target)


_LITERAL = re.compile(r"Literal\[(.*?)\]")


def _check_literals(sig: inspect.Signature, bound: inspect.BoundArguments, call: ast.Call) -> str:
    for name, value in bound.arguments.items():
        param = sig.parameters[name]
        ann = param.annotation if isinstance(param.annotation, str) else ""
        m = _LITERAL.search(ann)
        if m and isinstance(value, ast.Constant) and isinstance(value.value, str):
            allowed = {s.strip().strip("'\"") for s in m.group(1).split(",")}
            if value.value not in allowed:
                return f"{name}={value.value!r} is not one of {sorted(allowed)}"
    return ""


def _bind(obj: Any, call: ast.Call) -> tuple[str, str]:
    """``(status, why)`` of binding ``call``'s arguments to ``obj``'s signature."""
    sig = _signature(obj)
    if sig is None:
        return "unchecked", "no signature (compiled, no stub)"
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        try:
            names = {k.arg for k in call.keywords if k.arg}
            unknown = [n for n in names if n not in sig.parameters]
            if unknown and not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
                return "error", f"no keyword {unknown[0]!r} in {sig}"
        except Exception:  # noqa: BLE001
            pass
        return "unchecked", "*args / **kwargs at the call"
    try:
        bound = sig.bind(*call.args, **{k.arg: k.value for k in call.keywords})
    except TypeError as exc:
        return "error", f"{exc} -- signature {sig}"
    lit = _check_literals(sig, bound, call)
    return ("error", lit) if lit else ("ok", "")


def _returned(obj: Any, owner: Any) -> Any:
    """What calling ``obj`` gives, when its annotations say (a class instance), else None."""
    if (stubs.module_of(obj) or "").split(".")[0] == "torch":
        return None  # a CPU build of torch: torch.cuda's classes are stand-ins, their members not real
    if isinstance(obj, type):
        return _Instance(obj)
    sig = _signature(obj)
    ann = getattr(sig, "return_annotation", inspect.Signature.empty) if sig else inspect.Signature.empty
    if ann in (inspect.Signature.empty, None):
        stub = stubs.stub_signature(obj)
        ann = stub.return_annotation if stub is not None else None
    if ann in (inspect.Signature.empty, None):
        name = getattr(obj, "__name__", "")
        if isinstance(owner, _Instance) and owner.cls.__module__.startswith("cudf") and name in SAME_CLASS:
            return owner  # unannotated in cudf, documented to return the same kind of frame
        return None
    text = ann if isinstance(ann, str) else getattr(ann, "__name__", "")
    parts = [p.strip().strip("'\"") for p in text.split("|") if p.strip().strip("'\"") != "None"]
    text = parts[0] if parts else ""
    if text.strip("'\"") in ("Self", "Series", "DataFrame") and isinstance(owner, _Instance):
        cls = owner.cls
        if text.strip("'\"") == "Self":
            return owner
        mod = importlib.import_module(cls.__module__.split(".")[0])
        return _Instance(getattr(mod, text.strip("'\"")))
    mod = stubs.module_of(obj)
    found = stubs.resolve_annotation(text, mod) if mod else None
    if found is None and mod:
        glb = getattr(obj, "__globals__", {})
        cand = glb.get(text.strip("'\"").split("[")[0])
        found = cand if isinstance(cand, type) else None
    return _Instance(found) if isinstance(found, type) else None


# cudf frame methods with no return annotation that return the frame's own class
SAME_CLASS = frozenset({"head", "tail", "take", "rename", "reset_index", "assign", "copy", "dropna",
                        "sort_values", "sort_index", "set_index", "merge", "drop_duplicates", "duplicated"})


def always_raises(fn: Any) -> str:
    """The exception a library function raises whatever its input (its body, docstring aside,
    is one ``raise``: cudf marks what it does not support this way, e.g. ``Series.tolist``),
    else an empty string."""
    fn = inspect.unwrap(fn)
    try:
        tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return ""
    if not tree.body or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return ""
    body = [b for b in tree.body[0].body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None:
        return ast.unparse(body[0].exc)[:160]
    return ""


class _Dtypes:
    """``series.dtype`` of a cudf series: any of the dtypes cudf columns carry; an attribute
    read from it must exist on every one (the shared code's dtype tests)."""

    def samples(self) -> list[Any]:
        import cudf
        import numpy as np
        import pandas as pd

        return [np.dtype("int64"), np.dtype("uint8"), np.dtype("float32"), np.dtype("bool"),
                np.dtype("datetime64[ns]"), pd.StringDtype(na_value=np.nan), pd.Int64Dtype(), pd.BooleanDtype(),
                pd.DatetimeTZDtype("ns", "UTC"), cudf.ListDtype("int64"), cudf.StructDtype({"a": "int64"}),
                cudf.CategoricalDtype(), cudf.Decimal64Dtype(10, 2)]


def _getattr(obj: Any, name: str) -> tuple[bool, Any]:
    if isinstance(obj, _Dtypes):
        lacking = [repr(d) for d in obj.samples() if not hasattr(d, name)]
        if lacking:
            return False, None
        return True, _Unknown()
    if isinstance(obj, _Instance) and name == "dtype" and obj.cls.__module__.startswith("cudf") \
            and obj.cls.__name__ in ("Series", "Index"):
        return True, _Dtypes()
    if isinstance(obj, _Instance):
        if not any(name in vars(k) for k in obj.cls.__mro__):  # static: enum ``name`` is no class attribute
            return False, None
        member = inspect.getattr_static(obj.cls, name)
        if type(member).__name__ in ("property", "DynamicClassAttribute") and not isinstance(member, property):
            return True, _Unknown()
        if isinstance(member, property) and member.fget is not None:
            return True, _returned(member.fget, obj) or _constructed(member.fget) or _Unknown()
        if inspect.isclass(member) and name in ("str", "cat", "list", "dt", "struct"):
            return True, _Instance(member)
        if not callable(member) and type(member).__name__ in ("getset_descriptor", "member_descriptor"):
            return True, _Unknown()
        if type(member).__name__ == "CachedAccessor" or hasattr(member, "_accessor"):
            acc = getattr(member, "_accessor", None)
            return True, _Instance(acc) if isinstance(acc, type) else _Unknown()
        return True, _Bound(getattr(obj.cls, name), obj)
    if not hasattr(obj, name):
        return False, None
    return True, getattr(obj, name)


def _constructed(fget: Any) -> Any:
    """The class a property builds, when its body is ``return SomeClass(...)`` (cudf's
    ``Series.str`` / ``.cat`` / ``.list`` accessors carry no annotation)."""
    fn = inspect.unwrap(fget)
    try:
        tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef) else []
    body = [b for b in body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Call) \
            and isinstance(body[0].value.func, ast.Name):
        cls = fn.__globals__.get(body[0].value.func.id)
        return _Instance(cls) if isinstance(cls, type) else None
    return None


class _Unknown:
    """A value whose type the resolver does not know (chains through it are unchecked)."""


class _Bound:
    """A method looked up on an instance: bound, so ``self`` is not an argument."""

    def __init__(self, fn: Any, owner: _Instance) -> None:
        self.fn, self.owner = fn, owner


def _bind_method(b: _Bound, call: ast.Call) -> tuple[str, str]:
    raises = always_raises(b.fn) if b.owner.cls.__module__.split(".")[0] in ("cudf", "dask_cudf") else ""
    if raises:
        return "error", f"{b.owner.cls.__name__}.{b.fn.__name__} always raises: {raises}"
    sig = _signature(b.fn)
    if sig is None:
        return "unchecked", "no signature (compiled, no stub)"
    params = list(sig.parameters.values())
    if params and params[0].name in ("self", "cls") and not isinstance(inspect.getattr_static(b.owner.cls, b.fn.__name__, None), staticmethod):
        sig = sig.replace(parameters=params[1:])
    fake = type("F", (), {})()
    fake.__signature__ = sig  # type: ignore[attr-defined]
    try:
        bound = sig.bind(*call.args, **{k.arg: k.value for k in call.keywords if k.arg})
    except TypeError as exc:
        return "error", f"{exc} -- signature {sig}"
    lit = _check_literals(sig, bound, call)
    return ("error", lit) if lit else ("ok", "")


class Resolver(ast.NodeVisitor):
    """Walks one file; :attr:`findings` holds one :class:`Finding` per reference."""

    def __init__(self, rel: str, tree: ast.Module, aliases: dict[str, str] | None = None) -> None:
        self.rel = rel
        self.roots: dict[str, str] = {**(MODULE_ALIASES if aliases is None else aliases), **_import_bindings(tree)}
        self.receivers_any = RECEIVERS.get((rel, "*"), {})
        self.func_stack: list[str] = []
        self.guards: list[set[tuple[str, str]]] = []
        self.findings: list[Finding] = []
        self._seen: set[int] = set()

    # -- scopes ------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.func_stack.append(node.name)
        self.guards.append(_guards(node))
        self.generic_visit(node)
        self.guards.pop()
        self.func_stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def _receivers(self) -> dict[str, str]:
        out = dict(self.receivers_any)
        for fn in self.func_stack:
            out.update(RECEIVERS.get((self.rel, fn), {}))
        return out

    # -- references --------------------------------------------------------------------
    def _start(self, node: ast.AST) -> tuple[Any, str, list[str]] | None:
        """The library object a chain starts from, its text, and the attributes after it."""
        chain = _chain(node)
        if chain is None:
            return None
        for k in range(len(chain), 0, -1):
            head = ".".join(chain[:k])
            if head in self.roots and (k < len(chain) or True):
                target = self.roots[head]
                try:
                    obj = _load(target)
                except Exception as exc:  # noqa: BLE001
                    return _Failed(f"{target} does not load: {exc}"), head, chain[k:]
                return obj, head, chain[k:]
        recv = self._receivers()
        if chain[0] in recv:
            return _Instance(_load(recv[chain[0]])), chain[0], chain[1:]
        return None

    def visit_Call(self, node: ast.Call) -> None:
        self._reference(node.func, node)
        if isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            self._getattr_call(node)
        for child in [*node.args, *[k.value for k in node.keywords]]:
            self.visit(child)
        if not isinstance(node.func, (ast.Name, ast.Attribute)):
            self.visit(node.func)
        else:
            self._visit_inner(node.func)

    def _visit_inner(self, func: ast.AST) -> None:
        # calls nested inside the callee chain (``a.b(x).c(y)``)
        node = func
        while isinstance(node, ast.Attribute):
            node = node.value
            if isinstance(node, ast.Call):
                self.visit(node)
                return
            if isinstance(node, ast.Subscript):
                self.visit(node)
                return

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._reference(node, None)
        self._visit_inner(node)

    def _getattr_call(self, node: ast.Call) -> None:
        start = self._start(node.args[0])
        if start is None or id(node) in self._seen:
            return
        self._seen.add(id(node))
        obj, head, rest = start
        text = f"getattr({ast.unparse(node.args[0])}, {node.args[1].value!r})"
        obj = self._walk(obj, rest, node, text)
        if obj is None:
            return
        ok, _ = _getattr(obj, node.args[1].value)
        has_default = len(node.args) > 2
        self._add(node, text, "ok" if ok or has_default else "error",
                  "" if ok else f"{_name(obj)} has no attribute {node.args[1].value!r}")

    def _walk(self, obj: Any, attrs: list[str], node: ast.AST, text: str) -> Any:
        for i, attr in enumerate(attrs):
            if isinstance(obj, _Failed):
                self._add(node, text, "error", obj.why)
                return None
            if isinstance(obj, _Unknown):
                self._add(node, text, "unchecked", f"type of {'.'.join(attrs[:i]) or 'it'} unknown")
                return None
            ok, nxt = _getattr(obj.owner.cls if isinstance(obj, _Bound) else obj, attr) if not isinstance(obj, _Bound) \
                else (False, None)
            if isinstance(obj, _Bound):
                self._add(node, text, "unchecked", f"attribute of a bound method {attr}")
                return None
            if not ok:
                prefix = ".".join(self._head_text(node, text, attrs, i))
                if any((prefix, attr) in g for g in self.guards):
                    self._add(node, text, "ok", f"guarded by hasattr/getattr({prefix}, {attr!r})")
                    return None
                self._add(node, text, "error", f"{_name(obj)} has no attribute {attr!r}")
                return None
            obj = nxt
        return obj

    @staticmethod
    def _head_text(node: ast.AST, text: str, attrs: list[str], i: int) -> list[str]:
        chain = _chain(node.func if isinstance(node, ast.Call) else node) or []
        # the chain's text up to (not including) attrs[i]
        cut = len(chain) - len(attrs) + i
        return chain[:cut]

    def _reference(self, func: ast.AST, call: ast.Call | None) -> None:
        # the chain may pass through calls: a.b(x).c -> resolve a.b, bind, follow the return
        node = func
        segments: list[tuple[str, ast.Call | None]] = []
        while True:
            if isinstance(node, ast.Attribute):
                segments.append((node.attr, None))
                node = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
                if segments:
                    segments[-1] = (segments[-1][0], None)
                segments.append(("()", node))
                node = node.func
            else:
                break
        segments.reverse()
        # ``node`` is now the innermost base: a Name, or something else (not ours)
        if not isinstance(node, ast.Name):
            return
        # rebuild: take the longest leading run of attributes as the start chain
        names = [node.id]
        idx = 0
        while idx < len(segments) and segments[idx][0] != "()":
            names.append(segments[idx][0])
            idx += 1
        base = ast.Name(id=names[0])
        expr: ast.AST = base
        for n in names[1:]:
            expr = ast.Attribute(value=expr, attr=n)
        start = self._start(expr)
        if start is None:
            return
        key = id(call if call is not None else func)
        if key in self._seen:
            return
        self._seen.add(key)
        obj, head, rest = start
        text = ast.unparse(call if call is not None else func)
        if len(text) > 120:
            text = text[:117] + "..."
        obj = self._walk(obj, rest, func, text)
        if obj is None:
            return
        # then each call and the attributes after it
        owner = None
        for name, inner in segments[idx:]:
            if name == "()":
                status, why = self._call(obj, inner)
                if status != "ok":
                    self._add(func, text, status, why)
                    return
                obj = _returned(obj.fn, obj.owner) if isinstance(obj, _Bound) else _returned(obj, owner)
                if obj is None:
                    self._add(func, text, "unchecked", "return type unknown after a call")
                    return
                continue
            ok, nxt = _getattr(obj, name) if not isinstance(obj, (_Unknown, _Bound)) else (False, None)
            if isinstance(obj, _Unknown):
                self._add(func, text, "unchecked", "type unknown")
                return
            if not ok:
                self._add(func, text, "error", f"{_name(obj)} has no attribute {name!r}")
                return
            owner, obj = obj, nxt
        if call is not None:
            status, why = self._call(obj, call)
            self._add(func, text, status, why)
        else:
            self._add(func, text, "ok" if not isinstance(obj, _Unknown) else "ok", "")

    def _call(self, obj: Any, call: ast.Call) -> tuple[str, str]:
        if isinstance(obj, _Bound):
            return _bind_method(obj, call)
        if isinstance(obj, (_Unknown, _Instance)):
            return "unchecked", "calling a value of unknown signature"
        if not callable(obj):
            return "error", f"{_name(obj)} is not callable"
        return _bind(obj, call)

    def _add(self, node: ast.AST, text: str, status: str, why: str) -> None:
        self.findings.append(Finding(self.rel, getattr(node, "lineno", 0), text, status, why))


def _guards(fn: ast.AST) -> set[tuple[str, str]]:
    """``(expr, name)`` of every ``hasattr(expr, "name")`` and ``getattr(expr, "name", default)``
    in a function: an attribute read there is read only where it exists."""
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) \
                and (node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3)):
            out.add((ast.unparse(node.args[0]), node.args[1].value))
    return out


class _Failed:
    def __init__(self, why: str) -> None:
        self.why = why


def _name(obj: Any) -> str:
    if isinstance(obj, _Dtypes):
        return "some dtype a cudf series can hold"
    if isinstance(obj, _Instance):
        return f"{obj.cls.__module__}.{obj.cls.__qualname__} instance"
    return getattr(obj, "__name__", type(obj).__name__)


def resolve_source(rel: str, source: str, aliases: dict[str, str] | None = None) -> list[Finding]:
    """The findings of one file's source text (``rel``: its path relative to the repository;
    ``aliases``: expression text -> module, instead of :data:`MODULE_ALIASES`)."""
    tree = ast.parse(source)
    r = Resolver(rel, tree, aliases)
    r.visit(tree)
    return r.findings


def resolve_tree(repo: Path, package: str = "fbrapids") -> Iterator[Finding]:
    for path in sorted((repo / package).rglob("*.py")):
        rel = path.relative_to(repo).as_posix()
        yield from resolve_source(rel, path.read_text())
