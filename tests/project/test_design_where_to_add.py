"""``docs/design.md``'s *Where to add a thing* names, for each of the four things a team adds
(an operator, a model, a store tier, a data set), the files and folders it goes in: every
backticked path there exists, and the section covers all four."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEADING = "## Where to add a thing"
#: a backticked repository path: a file with an extension, or a folder ending in "/"
PATH = re.compile(r"`([\w./-]+(?:\.\w+|/))`")


def section(text: str, heading: str = HEADING) -> str:
    """The text of ``heading``'s section of a markdown page (up to the next ``## `` heading)."""
    start = text.index(heading) + len(heading)
    end = text.find("\n## ", start)
    return text[start:] if end < 0 else text[start:end]


def named_paths(text: str) -> list[str]:
    """The backticked paths in ``text`` (a dotted name such as ``register_dataset(...)`` is none).

    Example:
        >>> named_paths("`fbrapids/ops.py`, `kernels/csrc/ops/`, `register_operator(...)`, `CTRModel`")
        ['fbrapids/ops.py', 'kernels/csrc/ops/']
    """
    return [p for p in PATH.findall(text) if "/" in p]


def test_every_path_the_section_names_exists() -> None:
    paths = named_paths(section((REPO / "docs" / "design.md").read_text()))
    assert len(paths) >= 8, paths  # the four things' places are named, not dropped
    assert [p for p in paths if not (REPO / p).exists()] == []


def test_the_section_says_where_each_of_the_four_goes() -> None:
    text = section((REPO / "docs" / "design.md").read_text())
    assert re.findall(r"^- \*\*(.+?)\.\*\*", text, re.M) == ["An operator", "A model", "A store tier", "A data set"]


def test_the_checker_finds_a_missing_path(tmp_path: Path) -> None:
    text = "# t\n## Where to add a thing\n- `fbrapids/ops.py` and `fbrapids/no_such.py`\n## Next\n`README.md`\n"
    paths = named_paths(section(text))
    assert paths == ["fbrapids/ops.py", "fbrapids/no_such.py"]
    assert [p for p in paths if not (REPO / p).exists()] == ["fbrapids/no_such.py"]
