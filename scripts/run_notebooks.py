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


def execute(path: Path, timeout: int = 1800) -> int:
    """Run ``path`` top to bottom in a fresh python3 kernel and write it back with its
    outputs; returns the number of output images."""
    book = nbformat.read(path, as_version=4)
    NotebookClient(book, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in book.cells:  # execution counts and outputs stay; per-run timing metadata goes
        cell.get("metadata", {}).pop("execution", None)
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
