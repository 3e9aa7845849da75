"""The committed notebooks as a person sees them: rendered to HTML by nbconvert, opened in
headless Chromium, every figure decoded and drawn by the browser, and a screenshot taken.

Skips where Chromium is absent (``.ci/run`` installs Debian's ``chromium`` before the tests).
"""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: figures each executed notebook must show (PNG plots and inline SVG plan graphs)
FIGURES = {"01_method_chaining": 4, "02_custom_c_operator": 0, "03_feature_trial": 1, "04_dask_cluster": 2}
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)

PROBE = """<script>
window.addEventListener("load", () => {
  const imgs = [...document.images];
  const drawn = imgs.filter(i => i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().height > 0);
  const svgs = [...document.querySelectorAll("svg")].filter(s => s.querySelector("g.node"));
  const shown = svgs.filter(s => s.getBoundingClientRect().width > 0 && s.querySelectorAll("g.node rect").length > 0);
  document.body.setAttribute("data-figures", `${drawn.length}/${imgs.length}`);
  document.body.setAttribute("data-graphs", `${shown.length}/${svgs.length}`);
});
</script>"""


def _html(path: Path) -> str:
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(template_name="basic").from_notebook_node(nbformat.read(path, as_version=4))
    # a page with no network needs: the basic template loads nothing from a CDN
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{body}{PROBE}</body></html>"


def _figures_in(book) -> int:
    n = 0
    for cell in book.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = out.get("data", {})
            n += "image/png" in data
            n += len(re.findall(r"<svg|data:image/png", str(data.get("text/html", ""))))
    return n


def _chromium(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--virtual-time-budget=10000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebooks_carry_their_outputs(path):
    book = nbformat.read(path, as_version=4)
    code = [c for c in book.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), f"{path.name}: not executed (run `make notebooks`)"
    assert not [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert _figures_in(book) >= FIGURES[path.stem], f"{path.name}: figures missing (run `make notebooks`)"
    for cell in code:
        for out in cell.get("outputs", []):
            png = out.get("data", {}).get("image/png")
            if png:
                from PIL import Image

                img = Image.open(io.BytesIO(base64.b64decode(png)))
                assert img.width > 200 and len(img.convert("L").getcolors(maxcolors=1 << 16) or []) > 10


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium); "
                                             ".ci/run installs it so CI runs this test")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_renders_in_chromium_with_every_figure(path, tmp_path):
    from PIL import Image

    page = tmp_path / f"{path.stem}.html"
    page.write_text(_html(path), encoding="utf-8")
    dom = _chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    figures = re.search(r'data-figures="(\d+)/(\d+)"', dom.stdout)
    graphs = re.search(r'data-graphs="(\d+)/(\d+)"', dom.stdout)
    assert figures and graphs, "the page's load probe did not run"
    drawn, total = map(int, figures.groups())
    shown, svgs = map(int, graphs.groups())
    assert drawn == total, f"{path.name}: the browser drew {drawn} of {total} images"
    assert shown == svgs, f"{path.name}: {shown} of {svgs} plan graphs have a size"
    assert total + svgs >= FIGURES[path.stem]

    shot = tmp_path / f"{path.stem}.png"
    res = _chromium(f"--screenshot={shot}", "--window-size=1280,4000", page.as_uri())
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    img = Image.open(shot).convert("L")
    assert img.size == (1280, 4000)
    colors = img.getcolors(maxcolors=1 << 16) or []
    assert len(colors) > 50  # text and figures, not an empty page
    dark = sum(n for n, v in colors if v < 200) / (img.width * img.height)
    assert dark > 0.01, f"{path.name}: the screenshot is nearly blank ({dark:.3%} dark pixels)"
