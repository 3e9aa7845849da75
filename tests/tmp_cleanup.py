"""A pytest plugin: the whole run's temporary files in one folder of its own, removed at the end.

At start-up the run makes ``$TMPDIR/fbrapids-tests-XXXX`` and points ``TMPDIR`` (and
``tempfile.tempdir``) at it, so every ``tempfile.mkdtemp`` of a test or a docstring
example, every subprocess the tests start, and pytest's own ``tmp_path`` folders land
there; when the run ends the folder is removed whatever the outcome, so the suite leaves
nothing in the machine's temporary folder.  A run killed outright cannot clean up: each run
holds a lock on its folder, and the next run removes the folders of runs that no longer
hold theirs.  ``FBRAPIDS_KEEP_TEST_TMP=1`` keeps the folder (to look at a failed test's
files; its path is printed).  The repository's conftest.py loads it.
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import sys
import tempfile

KEEP_ENV = "FBRAPIDS_KEEP_TEST_TMP"
PREFIX, LOCK = "fbrapids-tests-", ".run.lock"
_STATE: dict = {}


def remove_abandoned(base: str) -> list[str]:
    """Remove the run folders under ``base`` whose run is gone (their lock is free); the
    folders removed."""
    gone = []
    for path in glob.glob(os.path.join(base, PREFIX + "*")):
        try:
            fd = os.open(os.path.join(path, LOCK), os.O_RDWR)
        except OSError:
            continue  # not a run folder of this plugin (or being made): left alone
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live run holds it
        finally:
            os.close(fd)
        shutil.rmtree(path, ignore_errors=True)
        gone.append(path)
    return gone


def pytest_configure(config) -> None:
    if "root" in _STATE:  # configured once per process (pytester runs nest)
        return
    remove_abandoned(tempfile.gettempdir())
    root = tempfile.mkdtemp(prefix=PREFIX)
    fd = os.open(os.path.join(root, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held for the run (closed with the process): the folder is in use
    _STATE.update(root=root, tmpdir=os.environ.get("TMPDIR"), tempdir=tempfile.tempdir, lock=fd)
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
    lock = _STATE.pop("lock", None)
    if os.environ.get(KEEP_ENV) == "1":  # no lock file left: a later run leaves the folder alone
        os.unlink(os.path.join(root, LOCK))
        if lock is not None:
            os.close(lock)
        sys.stderr.write(f"kept the run's temporary files in {root} ({KEEP_ENV}=1)\n")
        return
    shutil.rmtree(root, ignore_errors=True)
    if lock is not None:
        os.close(lock)
