"""Loaded for every test and docstring example the suite collects (tests/ and fbrapids/):
the run's temporary files go to one folder of its own, removed at the end (tests/tmp_cleanup.py)."""

pytest_plugins = ["tmp_cleanup"]
