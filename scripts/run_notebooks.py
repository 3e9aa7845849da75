"""Execute every notebook in notebooks/ on the embedded default data and save its outputs.

``make notebooks`` runs this; the committed notebooks carry what it wrote (figures
included), so they show their results when opened.  ``--rows`` (default: the notebooks'
own default) sets ``FBRAPIDS_NOTEBOOK_ROWS``.

    python scripts/run_notebooks.py [--rows N] [NOTEBOOK ...]
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("run_notebooks")
DEFAULT_ROWS = 20_000  # the notebooks' own default (FBRAPIDS_NOTEBOOK_ROWS unset)


def machine_paths() -> dict[str, str]:
    """This machine's absolute paths that outputs may show, longest first, and what replaces
    them in the committed notebooks (the checkout, the venv's packages, the temporary
    folder, the home folder)."""
    import site
    import tempfile

    paths = {str(ROOT): ".", sys.prefix: "$VENV", tempfile.gettempdir(): "$TMPDIR", str(Path.home()): "~"}
    paths.update({p: "$SITE_PACKAGES" for p in site.getsitepackages()})
    for p in list(paths):  # the resolved spellings too (a symlinked venv or /tmp)
        paths.setdefault(str(Path(p).resolve()), paths[p])
    return dict(sorted(paths.items(), key=lambda kv: -len(kv[0])))


def scrub(text: str, paths: dict[str, str]) -> str:
    """``text`` with this machine's absolute paths replaced (:func:`machine_paths`)."""
    for path, name in paths.items():
        text = re.sub(re.escape(path) + r"(?=[/\\\s'\"<,)\]:]|$)", lambda _m, n=name: n, text)
    return text


def _scrub_output(output: dict, paths: dict[str, str]) -> None:
    if "text" in output:
        output["text"] = scrub(output["text"], paths)
    for mime, value in output.get("data", {}).items():
        if mime in ("text/plain", "text/html", "text/markdown") and isinstance(value, str):
            output["data"][mime] = scrub(value, paths)


def warnings_in(book: nbformat.NotebookNode) -> list[str]:
    """The stderr outputs that hold a warning (a committed notebook must carry none)."""
    return [f"cell {i}: {o['text'][:200]}" for i, c in enumerate(book.cells) if c.cell_type == "code"
            for o in c.get("outputs", []) if o.get("name") == "stderr" and "Warning" in o.get("text", "")]


def execute(path: Path, timeout: int = 1800) -> int:
    """Run ``path`` top to bottom in a fresh python3 kernel and write it back with its
    outputs, this machine's paths replaced (:func:`scrub`) and the generator's data version,
    the rows and the date in the notebook's ``fbrapids`` metadata; returns the number of
    output images.  A warning in an output is an error (the notebook is not written)."""
    from fbrapids.datasets.synthetic.generate import DATA_VERSION

    book = nbformat.read(path, as_version=4)
    NotebookClient(book, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    paths = machine_paths()
    for cell in book.cells:  # execution counts and outputs stay; per-run timing metadata goes
        cell.get("metadata", {}).pop("execution", None)
        for output in cell.get("outputs", []):
            _scrub_output(output, paths)
    found = warnings_in(book)
    if found:
        raise SystemExit(f"{path.name}: warnings in the outputs (fix their cause):\n" + "\n".join(found))
    book.metadata["fbrapids"] = {
        "data_version": DATA_VERSION, "rows": int(os.environ.get("FBRAPIDS_NOTEBOOK_ROWS", DEFAULT_ROWS)),
        "executed_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    nbformat.write(book, path)
    return sum(1 for c in book.cells if c.cell_type == "code" for o in c.get("outputs", [])
               if "image/png" in o.get("data", {}) or re.search(r"<svg|data:image/png", str(o.get("data", {}).get("text/html", ""))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--rows", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.rows is not None:
        os.environ["FBRAPIDS_NOTEBOOK_ROWS"] = str(args.rows)
    else:
        os.environ.pop("FBRAPIDS_NOTEBOOK_ROWS", None)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in paths:
        t = time.perf_counter()
        figures = execute(path)
        log.info("%s: executed in %.0f s, %d figure(s)", path.name, time.perf_counter() - t, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
