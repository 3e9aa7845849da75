"""Every progress bar of the package comes from :mod:`fbrapids.ui.autobar`.

``tqdm.auto`` (and ``tqdm.autonotebook`` / ``tqdm.notebook``) imported inside a Jupyter
kernel without ``ipywidgets`` emits a ``TqdmWarning`` into the notebook's output.  One
such import sat in the cold-compile path (``kernels/compile_host.compile_bar``), reached
only when the kernel cache is empty: the notebooks' no-warning test then failed on a fresh
machine and passed on the next run, once the cache was warm.  This scan holds the rule
whatever the cache holds.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "fbrapids"
WARNING_IMPORTS = ("tqdm.auto", "tqdm.autonotebook", "tqdm.notebook")


def _tqdm_imports(path: Path, root: Path = PKG.parent) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [f"{path.relative_to(root)}:{node.lineno}: {n}" for n in names if n in WARNING_IMPORTS
                  or (n == "tqdm" and isinstance(node, ast.ImportFrom) and node.module == "tqdm")]
    return found


def test_only_autobar_imports_tqdm_auto():
    autobar = PKG / "ui" / "autobar.py"
    offenders = [hit for path in sorted(PKG.rglob("*.py")) if path != autobar for hit in _tqdm_imports(path)]
    assert offenders == [], "import tqdm's bar from fbrapids.ui.autobar, not directly:\n" + "\n".join(offenders)


def test_the_scan_sees_a_direct_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from tqdm.auto import tqdm\n    return tqdm\n")
    assert _tqdm_imports(bad, root=tmp_path) == ["bad.py:2: tqdm.auto"]
