"""The repository stands alone: every link in the README and in docs/ resolves to
a file inside the repository (or to a heading of the page it names), so a fresh clone has
no dead link: the design, the workload's schema and the GPU set-up are docs/ pages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, flags=re.M)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
    return [m.group(1) for m in LINK.finditer(text)]


def test_the_slug_rule() -> None:
    assert _slug("Promised by DESIGN.md, not built (or not yet run)") == "promised-by-designmd-not-built-or-not-yet-run"
    assert _slug("Training on several processes") == "training-on-several-processes"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_link_resolves_inside_the_repository(page: Path) -> None:
    dead = []
    for target in _links(page):
        if re.match(r"^[a-z]+:", target):  # http(s):, mailto: ... outside the repository by intent
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_relative_to(REPO) or not dest.exists():
            dead.append(f"{target} -> {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            dead.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not dead, f"{page.name}: dead links {dead}"


def test_the_readme_links_the_design_the_workload_and_the_gpu_setup() -> None:
    links = set(_links(REPO / "README.md"))
    assert {"docs/design.md", "docs/workload.md", "docs/gpu.md"} <= links
    assert "../shared" not in (REPO / "README.md").read_text().replace("`../shared/data`", "")


OUTSIDE = re.compile(r"(?<![\w.])((?:\.\./)+[\w./-]+)")


def test_the_gpu_page_names_no_path_outside_the_repository() -> None:
    """docs/gpu.md once named ``../shared/gpu/README.md`` and ``../shared/gpu/fetch-wheels``
    (in code, so the link test above did not see them): dead in a clone.  Every ``../`` path
    it names, in prose, code or links, must stay inside the repository read from the page's
    folder and from the root (links in every page: the test above)."""
    page = REPO / "docs" / "gpu.md"
    outside = [m.group(1) for m in OUTSIDE.finditer(page.read_text())
               if not ((page.parent / m.group(1)).resolve().is_relative_to(REPO)
                       and (REPO / m.group(1)).resolve().is_relative_to(REPO))]
    assert not outside, f"{page.name} names paths outside the repository: {outside}"


def test_the_gpu_page_speaks_of_the_project_and_its_users() -> None:
    """docs/gpu.md is for a user with a GPU: nothing of how one development machine gets one."""
    text = (REPO / "docs" / "gpu.md").read_text().lower()
    said = [w for w in ("lent", "loan", "lend", "give_back", "carry", "idle", "device time", "../shared", "15 min",
                        "hand-back", "transfer budget") if w in text]
    assert not said, f"docs/gpu.md speaks of a development machine's GPU loan: {said}"
    for needed in ('pip install -e ".[gpu]"', "make gpu-check", "make gpu-conformance", "make gpu-pack",
                   "make gpu-kernels", "unpack.sh"):
        assert needed in text.replace("`", ""), needed
