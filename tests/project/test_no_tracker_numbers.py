"""No tracker numbers in code or docs: a reader of the repository cannot follow "issue 50" or
"(#49)", so a comment, docstring, test name or doc says what the thing is instead.  Scanned:
the package, the tests, the scripts, the benchmarks' code, docs/ and the README (file names
included); the benchmarks' JSON results are data, not scanned."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: a tracker reference: "issue 50", "issues 25, 37", "Issue-16", "issue_47", "issue36", "bug 7",
#: "ticket #3", "PR 12", "gh-12", "(#49)", "see #49" / "fixes #49"; never "HTTP 404", "Python 3.11",
#: a hex colour ("#888"), an explain node ("#32 split(...)") or a code such as "B1" / "sm_75"
TRACKER = re.compile(r"(?i)(?<![a-z])(?:issues?|tickets?|bugs?|pr|pull request|gh)[\s_-]*(?:#|no\.?\s*)?\d+(?!\.?\d)"
                     r"|\(#\d+\)"
                     r"|(?i:\b(?:see|fixes|closes|resolves|refs?)\s+#\d+)")
TEXT = {".py", ".md", ".txt", ".toml", ".cfg", ".ini", ".sh", ".c", ".h", ".cu", ".cuh", ".cpp", ".pyi", ".yml",
        ".yaml", ".rst", ".html", ".ipynb"}


def scanned_files(repo: Path = REPO) -> list[Path]:
    """The files scanned: text files under fbrapids/, tests/, scripts/ and docs/, the
    benchmarks' ``*.py`` and README.md (but this file, whose examples of what the pattern
    catches are its test data)."""
    out = [p for d in ("fbrapids", "tests", "scripts", "docs") for p in sorted((repo / d).rglob("*"))
           if p.is_file() and p.suffix in TEXT and "__pycache__" not in p.parts]
    out += sorted((repo / "benchmarks").glob("*.py")) + [repo / "README.md"]
    return [p for p in out if p.resolve() != Path(__file__).resolve()]  # (this file: its examples are its data)


def tracker_numbers(files: list[Path], repo: Path = REPO) -> list[str]:
    """``path:line: text`` of each line (and ``path`` of each file name) naming a tracker number."""
    found = []
    for path in files:
        rel = path.relative_to(repo).as_posix()
        if TRACKER.search(path.name):
            found.append(f"{rel}: the file's name")
        for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if TRACKER.search(line):
                found.append(f"{rel}:{i}: {line.strip()[:120]}")
    return found


def test_the_pattern_catches_tracker_numbers_and_nothing_else() -> None:
    for text in ("# (issue 50)", "Issue 48 (2): the client", "issues 25, 37, 47", "the issue-16 figures",
                 'res["issue_47"]', "test_gpu_issue36_device.py", "bug 7", "ticket #3", "PR 12", "gh-12",
                 "fixed (#49)", "see #49", "Fixes #123"):
        assert TRACKER.search(text), text
    for text in ("HTTP 404", "Python 3.11", 'fill="#888"', "#32 split(title)", "B1, B2", "sm_75", "issues",
                 "the tissue 5", "debug 2 rows", "pr_auc", "version 0.1.0", "print(x) # 3 rows", "issue a 400",
                 "express 3 ways", "pruned 4 rows"):
        assert not TRACKER.search(text), text


def test_the_checker_finds_a_planted_number(tmp_path: Path) -> None:
    (tmp_path / "fbrapids").mkdir()
    (tmp_path / "fbrapids" / "a.py").write_text("x = 1  # the fix of issue 12\ny = 404  # HTTP 404\n")
    (tmp_path / "fbrapids" / "test_issue9.py").write_text("")
    assert tracker_numbers(sorted((tmp_path / "fbrapids").glob("*.py")), tmp_path) == [
        "fbrapids/a.py:1: x = 1  # the fix of issue 12", "fbrapids/test_issue9.py: the file's name"]


def test_no_tracker_numbers_in_code_or_docs() -> None:
    files = scanned_files()
    assert len(files) > 300  # the scan reads the repository, not an empty list
    assert tracker_numbers(files) == []
