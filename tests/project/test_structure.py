"""The package's structure, drawn from its imports (every import, lazy ones inside
functions included; annotation-only imports under ``if TYPE_CHECKING:`` left out, since
they never run): no cycles among fbrapids modules, and no module using a private name
(``_x``) of another module, and no import from a floor to a floor above it (the floors:
``pyproject.toml``'s ``[tool.importlinter]`` contract, :func:`declared_floors`).  The
package root holds at most 6 modules besides ``__init__`` (the rest live on named floors).
No function holds more than :data:`FUNCTION_LINES` lines of code beyond the explicit,
shrinking list :data:`LONG_FUNCTIONS`.  The tests mirror the package: every subpackage
``fbrapids/<name>/`` has a ``tests/<name>/`` folder holding test files.

Run as a script to print the findings: ``python tests/project/test_structure.py``.
"""

from __future__ import annotations

import ast
import functools
import sys
import textwrap
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "fbrapids"
REPO = PKG.parent
#: where the repository's own code and prose live (the old paths may appear only in fbrapids/moved.py)
SCANNED = ("fbrapids", "tests", "benchmarks", "scripts", "notebooks", "docs")
ROOT_FILES = ("README.md", "Makefile", "pyproject.toml", ".ci/run")


def module_files(pkg: Path = PKG) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _absolute(mod: str, node: ast.ImportFrom, is_pkg: bool) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".")
    base = base[: len(base) - node.level + (1 if is_pkg else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:``."""
    out: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)
    return out


def imports(mods: dict[str, Path]) -> tuple[dict[str, set[str]], list[str]]:
    """The import graph among package modules, and the cross-module private-name uses.

    ``from a import b`` is an edge to ``a.b`` when that is a module, else to ``a``.  A
    private use is ``from a import _x`` (``_x`` not a module) or ``m._x`` where ``m`` is
    a name bound to another package module.
    """
    graph: dict[str, set[str]] = {m: set() for m in mods}
    private: list[str] = []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        is_pkg = path.name == "__init__.py"
        bound: dict[str, str] = {}  # local name -> package module it names
        nodes = _runtime_nodes(tree)
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods:
                        graph[mod].add(a.name)
                        bound[a.asname or a.name] = a.name
            elif isinstance(node, ast.ImportFrom):
                src = _absolute(mod, node, is_pkg)
                if src != "fbrapids" and not src.startswith("fbrapids."):
                    continue
                for a in node.names:
                    full = f"{src}.{a.name}"
                    if full in mods:
                        graph[mod].add(full)
                        bound[a.asname or a.name] = full
                    else:
                        if src in mods:
                            graph[mod].add(src)
                        if a.name.startswith("_") and not a.name.startswith("__"):
                            private.append(f"{mod}: from {src} import {a.name}")
        for node in nodes:
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in bound and bound[node.value.id] != mod
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                private.append(f"{mod}: {node.value.id}.{node.attr} ({bound[node.value.id]})")
        graph[mod].discard(mod)
    return graph, sorted(set(private))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_checker_finds_a_cycle_and_a_private_import(tmp_path: Path) -> None:
    pkg = tmp_path / "fbrapids"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from fbrapids.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from fbrapids import a\n    return a._hidden\n")
    (pkg / "c.py").write_text("from fbrapids.a import _helper\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fbrapids import e\n")
    (pkg / "e.py").write_text("from fbrapids import d\n")
    graph, private = imports(module_files(pkg))
    assert cycles(graph) == [["fbrapids.a", "fbrapids.sub.b"]]
    assert private == ["fbrapids.c: from fbrapids.a import _helper", "fbrapids.sub.b: a._hidden (fbrapids.a)"]


@functools.cache
def package_imports() -> tuple[dict[str, set[str]], list[str]]:
    """:func:`imports` of the package, parsed once for the tests below."""
    return imports(module_files())


def test_no_import_cycles() -> None:
    graph, _ = package_imports()
    assert cycles(graph) == []


def test_no_private_names_across_modules() -> None:
    _, private = package_imports()
    assert private == []


def declared_floors(pyproject: Path = REPO / "pyproject.toml") -> list[list[str]]:
    """The floors of the package, top first, each the names of its members (folders and root
    modules): the ``floors`` contract of ``pyproject.toml``'s ``[tool.importlinter]``, the
    one place they are declared."""
    import tomllib

    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["name"] == "floors")["layers"]
    return [[name.strip() for name in layer.split("|")] for layer in layers]


def floor_of(module: str, floors: list[list[str]]) -> tuple[int, str] | None:
    """``(floor index, member)`` of a dotted module name (``-1`` for the package itself, above
    every floor), or None for a module on no floor."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1, parts[0]
    return next(((i, parts[1]) for i, members in enumerate(floors) if parts[1] in members), None)


def upward_imports(graph: dict[str, set[str]], floors: list[list[str]]) -> list[str]:
    """Every import from a floor to a floor above it (the package itself included), and
    between two members of one floor."""
    out = []
    for mod, targets in sorted(graph.items()):
        here = floor_of(mod, floors)
        for target in sorted(targets):
            there = floor_of(target, floors)
            if here is None or there is None:
                continue  # (test_every_module_stands_on_a_floor names it)
            if there[0] < here[0]:
                out.append(f"{mod} -> {target}: {there[1]!r} is on a floor above {here[1]!r}")
            elif there[0] == here[0] and there[1] != here[1]:
                out.append(f"{mod} -> {target}: {here[1]!r} and {there[1]!r} share a floor and import neither each other")
    return out


def test_checker_finds_an_upward_import(tmp_path: Path) -> None:
    pkg = tmp_path / "fbrapids"
    for folder in ("top", "mid", "side", "low"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from fbrapids.top import t\n")
    (pkg / "top" / "t.py").write_text("from fbrapids.low import l\n")
    (pkg / "mid" / "m.py").write_text("def f():\n    from fbrapids.top import t\n    import fbrapids\n")
    (pkg / "side" / "s.py").write_text("from fbrapids.mid import m\n")
    (pkg / "low" / "l.py").write_text("from fbrapids.mid import m\n")
    (pkg / "loose.py").write_text("")
    graph, _ = imports(module_files(pkg))
    floors = [["top"], ["mid", "side"], ["low"]]
    assert upward_imports(graph, floors) == [
        "fbrapids.low.l -> fbrapids.mid.m: 'mid' is on a floor above 'low'",
        "fbrapids.mid.m -> fbrapids: 'fbrapids' is on a floor above 'mid'",
        "fbrapids.mid.m -> fbrapids.top.t: 'top' is on a floor above 'mid'",
        "fbrapids.side.s -> fbrapids.mid.m: 'side' and 'mid' share a floor and import neither each other"]
    assert floor_of("fbrapids.loose", floors) is None


def test_every_module_stands_on_a_floor() -> None:
    floors = declared_floors()
    assert sorted({m.split(".")[1] for m in module_files() if "." in m and floor_of(m, floors) is None}) == []
    named = [name for members in floors for name in members]
    assert sorted(n for n in named if not (PKG / n).is_dir() and not (PKG / f"{n}.py").is_file()) == []


def test_imports_go_down_the_floors() -> None:
    graph, _ = package_imports()
    assert upward_imports(graph, declared_floors()) == [], "imports from a floor to one above it"


def tool_imports(repo: Path = REPO) -> dict[str, set[str]]:
    """The import graph among the scripts (run with ``scripts/`` on the path: ``import bench``)
    and the benchmarks (imported from the repository root: ``benchmarks.extract``)."""
    mods: dict[str, Path] = {}
    for folder, prefix in (("scripts", ""), ("benchmarks", "benchmarks")):
        for path in sorted((repo / folder).rglob("*.py")):
            parts = list(path.relative_to(repo / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(([prefix] if prefix else []) + parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                graph[mod].update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom):
                src = _absolute(mod, node, path.name == "__init__.py")
                for a in node.names:
                    full = f"{src}.{a.name}"
                    graph[mod].add(full if full in mods else src)
        graph[mod] = {m for m in graph[mod] if m in mods and m != mod}
    return graph


def test_no_import_cycles_in_scripts_and_benchmarks(tmp_path: Path) -> None:
    for folder in ("scripts", "benchmarks"):
        (tmp_path / folder).mkdir()
    (tmp_path / "scripts" / "a.py").write_text("def f():\n    import b\n")
    (tmp_path / "scripts" / "b.py").write_text("import a\nfrom benchmarks.c import x\n")
    (tmp_path / "benchmarks" / "c.py").write_text("x = 1\n")
    assert cycles(tool_imports(tmp_path)) == [["a", "b"]]
    assert cycles(tool_imports()) == []


def test_package_root_holds_at_most_six_modules() -> None:
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= 6, f"modules loose at the package root (give them a floor): {loose}"


def unmirrored_subpackages(pkg: Path = PKG, tests: Path = REPO / "tests") -> list[str]:
    """The subpackages ``pkg/<name>/`` (folders holding an ``__init__.py``) without a
    ``tests/<name>/`` folder holding a ``test_*.py`` file."""
    names = sorted(p.parent.name for p in pkg.glob("*/__init__.py"))
    return [name for name in names if not any((tests / name).glob("test_*.py"))]


def test_mirror_checker_finds_a_subpackage_without_tests(tmp_path: Path) -> None:
    pkg, tests = tmp_path / "fbrapids", tmp_path / "tests"
    for folder in ("tested", "untested", "empty_tests"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "data").mkdir()  # not a package: no __init__.py
    (tests / "tested").mkdir(parents=True)
    (tests / "tested" / "test_it.py").write_text("")
    (tests / "empty_tests").mkdir()
    (tests / "empty_tests" / "helper.py").write_text("")
    assert unmirrored_subpackages(pkg, tests) == ["empty_tests", "untested"]


def test_tests_mirror_every_subpackage() -> None:
    assert unmirrored_subpackages() == [], "subpackages with no tests/<name>/ folder of test files"


#: the most lines of code a function of the package may hold: its ``def`` line(s) to its last
#: line, less its docstring (documentation is not counted against it; a nested function's
#: lines count in its own entry and in its parent's)
FUNCTION_LINES = 60

#: today's functions over :data:`FUNCTION_LINES`, each with the lines it holds now as
#: its ceiling: one may shrink (drop it from here once it is under the limit: a stale entry
#: fails), none may grow, and no function may join the list.  Split a long function into
#: named steps with one job each rather than raising a number here.
LONG_FUNCTIONS = {
    # the default data's generator: its files, blocks and metadata in one pass (it was being
    # typed elsewhere when the limit came in)
    "datasets/synthetic/generate.py::generate": 67,
    # the meta-kernels' layer runners (the CUDA one is checked only on a GPU)
    "kernels/runtime_cuda.py::CudaPlan._run_device_layer": 79,
    "kernels/runtime_host.py::HostPlan._run_layer": 75,
    # serving: the guarded h11 protocol is a class made inside a function (uvicorn is imported
    # only to serve), its methods counted in it
    "serving/guard.py::guarded_protocol": 77,
    # the distributed demo's body of a rank
}


def function_lines(pkg: Path = PKG) -> dict[str, int]:
    """``"path::Qual.name"`` -> the lines of code of every function and method under ``pkg``
    (its docstring left out)."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                doc = child.body[0] if ast.get_docstring(child, clean=False) is not None else None
                skipped = doc.end_lineno - doc.lineno + 1 if doc is not None else 0
                out[f"{where}::{name}"] = child.end_lineno - child.lineno + 1 - skipped
                visit(child, f"{name}.", where)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", where)
            else:
                visit(child, prefix, where)

    for path in sorted(pkg.rglob("*.py")):
        visit(ast.parse(path.read_text()), "", path.relative_to(pkg).as_posix())
    return out


def long_function_findings(lines: dict[str, int], allowed: dict[str, int], limit: int = FUNCTION_LINES) -> list[str]:
    """What breaks the rule: a function over ``limit`` not in ``allowed``, an allowed one grown
    past its ceiling, and an allowed entry that is gone or now within the limit (stale)."""
    out = []
    for name, n in sorted(lines.items()):
        if n > limit and name not in allowed:
            out.append(f"{name}: {n} lines of code, over {limit}: split it into named steps")
        elif name in allowed and n > allowed[name]:
            out.append(f"{name}: {n} lines of code, grown past its allowed {allowed[name]}: split it")
    for name, ceiling in sorted(allowed.items()):
        if lines.get(name, 0) <= limit:
            out.append(f"{name}: allowed {ceiling} lines but holds {lines.get(name, 'no function')}: "
                       "drop it from LONG_FUNCTIONS")
    return out


def test_long_function_checker_counts_code_not_docstrings(tmp_path: Path) -> None:
    body = "".join(f"x{i} = {i}\n" for i in range(59))
    doc = '"""A docstring\n' + "of many lines.\n" * 30 + '"""\n'
    (tmp_path / "m.py").write_text("def short():\n" + textwrap.indent(doc + body, "    ") + "\n\nclass C:\n"
                                   "    def long(self):\n" + textwrap.indent(body + "y = 1\nreturn y\n", "        "))
    lines = function_lines(tmp_path)
    assert lines == {"m.py::short": 60, "m.py::C.long": 62}
    assert long_function_findings(lines, {}) == ["m.py::C.long: 62 lines of code, over 60: split it into named steps"]
    assert long_function_findings(lines, {"m.py::C.long": 62}) == []
    assert long_function_findings(lines, {"m.py::C.long": 61, "m.py::short": 70, "m.py::gone": 80}) == [
        "m.py::C.long: 62 lines of code, grown past its allowed 61: split it",
        "m.py::gone: allowed 80 lines but holds no function: drop it from LONG_FUNCTIONS",
        "m.py::short: allowed 70 lines but holds 60: drop it from LONG_FUNCTIONS"]


def test_no_function_over_the_line_limit_beyond_the_allowed_ones() -> None:
    assert long_function_findings(function_lines(), LONG_FUNCTIONS) == []


if __name__ == "__main__":
    g, priv = imports(module_files())
    for c in cycles(g):
        print("cycle:", " ".join(c))
    for p in priv:
        print("private:", p)
    for arrow in upward_imports(g, declared_floors()):
        print("upward:", arrow)
    for finding in long_function_findings(function_lines(), LONG_FUNCTIONS):
        print("long function:", finding)
