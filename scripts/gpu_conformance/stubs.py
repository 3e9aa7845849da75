"""Signatures of compiled (Cython) callables, read from the ``.pyi`` stubs their wheels ship.

``inspect.signature`` fails on Cython classes (``pylibcudf.Column``, ``rmm.mr.PoolMemoryResource``)
and on some methods; pylibcudf and rmm install a ``.pyi`` next to each extension module, whose
``def`` lines are the real signatures.  A stub's annotations are kept as text; a return
annotation naming a class lets the resolver follow ``col.type().id()``.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


@functools.lru_cache(maxsize=None)
def _stub_tree(module_name: str) -> ast.Module | None:
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if not path:
        return None
    stub = Path(path).with_name(Path(path).name.split(".")[0] + ".pyi")
    if stub.name == "__init__.pyi" or not stub.exists():
        stub = Path(path).parent / (Path(path).name.split(".")[0] + ".pyi")
    if not stub.exists():
        return None
    return ast.parse(stub.read_text())


def _signature_of_def(fn: ast.FunctionDef, drop_self: bool) -> inspect.Signature:
    params: list[inspect.Parameter] = []
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        if drop_self and i == 0:
            continue
        kind = inspect.Parameter.POSITIONAL_ONLY if arg in a.posonlyargs else inspect.Parameter.POSITIONAL_OR_KEYWORD
        params.append(inspect.Parameter(arg.arg, kind, default=inspect.Parameter.empty if default is None else ...,
                                        annotation=ast.unparse(arg.annotation) if arg.annotation else inspect.Parameter.empty))
    if a.vararg:
        params.append(inspect.Parameter(a.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        params.append(inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY,
                                        default=inspect.Parameter.empty if default is None else ...,
                                        annotation=ast.unparse(arg.annotation) if arg.annotation else inspect.Parameter.empty))
    if a.kwarg:
        params.append(inspect.Parameter(a.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    ret = ast.unparse(fn.returns) if fn.returns is not None else inspect.Signature.empty
    return inspect.Signature(params, return_annotation=ret)


def stub_signature(obj: Any) -> inspect.Signature | None:
    """The stub signature of a compiled function, method or class (its ``__init__``), or None."""
    if isinstance(obj, type):
        owner_mod, qual, member = obj.__module__, obj.__qualname__, "__init__"
    else:
        qual_full = getattr(obj, "__qualname__", "")
        owner = getattr(obj, "__objclass__", None)
        owner_mod = getattr(obj, "__module__", None) or getattr(owner, "__module__", None)
        if owner is not None:
            qual, member = owner.__qualname__, obj.__name__
        elif "." in qual_full:
            qual, member = qual_full.rsplit(".", 1)
        else:
            qual, member = "", qual_full
    if not owner_mod:
        return None
    tree = _stub_tree(owner_mod)
    if tree is None:
        return None
    body = tree.body
    if qual:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == qual), None)
        if cls is None:
            return None
        body = cls.body
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == member:
            return _signature_of_def(node, drop_self=bool(qual))
    return None


def resolve_annotation(text: str, module_name: str) -> Any:
    """The object an annotation's text names, looked up in the stub's module (its imports
    included) and then in the real module; None when it names no class."""
    name = text.strip().strip("'\"").split("[")[0].split("|")[0].strip()
    if not name.isidentifier() and "." not in name:
        return None
    module = sys.modules.get(module_name)
    tree = _stub_tree(module_name)
    if tree is not None:
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        src = sys.modules.get(node.module)
                        if src is not None and hasattr(src, alias.name):
                            return getattr(src, alias.name)
    obj: Any = module
    for part in name.split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    return obj if isinstance(obj, type) else None


def module_of(obj: Any) -> str | None:
    """The module whose stub describes ``obj`` (a class, function or method)."""
    owner = getattr(obj, "__objclass__", None)
    mod = getattr(obj, "__module__", None) or getattr(owner, "__module__", None)
    return mod if isinstance(mod, str) else None


def is_module(obj: Any) -> bool:
    return isinstance(obj, ModuleType)


_FIRST_LINE = re.compile(r"^\s*([\w.]+)\((.*)\)\s*(?:->\s*([\w.\[\], |]+))?\s*$")


def docstring_signature(obj: Any) -> inspect.Signature | None:
    """The signature Cython's ``embedsignature`` writes as a docstring's first line
    (``UnownedMemory(intptr_t ptr, size_t size, owner, int device_id=-1)``), C types dropped."""
    doc = getattr(obj, "__doc__", None) or ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    m = _FIRST_LINE.match(first.replace("\\*", "*"))
    if m is None:
        return None
    params = []
    for raw in _split_params(m.group(2)):
        raw = raw.strip()
        if not raw:
            continue
        if raw in ("*", "/") or raw.startswith("*"):
            params.append(raw)
            continue
        name_part, eq, default = raw.partition("=")
        name = name_part.split()[-1]  # "int device_id" -> "device_id"
        params.append(f"{name}={default.strip() or 'None'}" if eq else name)
    if params and params[0] == "self":
        params = params[1:]
    try:
        fn = ast.parse(f"def f({', '.join(params)}): pass").body[0]
    except SyntaxError:
        return None
    # defaults are stand-ins (their values are not needed to bind)
    for i, d in enumerate(fn.args.defaults):
        fn.args.defaults[i] = ast.Constant(None)
    fn.args.kw_defaults = [None if d is None else ast.Constant(None) for d in fn.args.kw_defaults]
    return _signature_of_def(fn, drop_self=False)


def _split_params(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out
