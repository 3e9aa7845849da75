"""A pytest plugin: the whole run's temporary files in one folder of its own, removed at the end.

At start-up the run makes ``$TMPDIR/fbrapids-tests-XXXX`` and points ``TMPDIR`` (and
``tempfile.tempdir``) at it, so every ``tempfile.mkdtemp`` of a test or a docstring
example, every subprocess the tests start, and pytest's own ``tmp_path`` folders land
there; when the run ends the folder is removed whatever the outcome, so the suite leaves
nothing in the machine's temporary folder.  ``FBRAPIDS_KEEP_TEST_TMP=1`` keeps it (to look
at a failed test's files; its path is printed).  The repository's conftest.py loads it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

KEEP_ENV = "FBRAPIDS_KEEP_TEST_TMP"
_STATE: dict[str, str | None] = {}


def pytest_configure(config) -> None:
    if "root" in _STATE:  # configured once per process (pytester runs nest)
        return
    root = tempfile.mkdtemp(prefix="fbrapids-tests-")
    _STATE.update(root=root, tmpdir=os.environ.get("TMPDIR"), tempdir=tempfile.tempdir)
    os.environ["TMPDIR"] = root
    tempfile.tempdir = root


def pytest_unconfigure(config) -> None:
    root = _STATE.pop("root", None)
    if root is None:
        return
    old = _STATE.pop("tmpdir", None)
    if old is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = old
    tempfile.tempdir = _STATE.pop("tempdir", None)
    if os.environ.get(KEEP_ENV) == "1":
        sys.stderr.write(f"kept the run's temporary files in {root} ({KEEP_ENV}=1)\n")
        return
    shutil.rmtree(root, ignore_errors=True)
