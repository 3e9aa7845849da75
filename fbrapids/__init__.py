"""fbrapids: FeatureBox on RAPIDS.

CTR feature extraction as dataframe method chains (``.fbx``), compiled into one
meta-kernel per operator layer, streamed into a torch trainer with a tiered embedding
store.  Runs on cudf / dask-cudf / cupy with a GPU, and on pandas / dask / numpy without.

Example:
    >>> import pandas as pd, fbrapids
    >>> pd.DataFrame({"a": [None, 2.0]}).fbx.clean(fill={"a": 0.0})["a"].tolist()
    [0.0, 2.0]
"""

from __future__ import annotations

import logging

from fbrapids.accessors import register_accessors
from fbrapids.errors import BackendUnavailableError, FbrapidsError
from fbrapids.workloads.dataset_registry import add_dataset_loader

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
register_accessors()  # on pandas / dask / cudf as each is imported: `import fbrapids` itself loads none


def _register_builtin_datasets() -> None:
    """Import :mod:`fbrapids.datasets` (each of its modules registers its data set)."""
    import fbrapids.datasets  # noqa: F401  (imported for its registrations)


# the workloads' floor looks data sets up by name; the built-in ones, a floor above it, load on
# the first lookup (not here: `import fbrapids` stays light)
add_dataset_loader(_register_builtin_datasets)


def __getattr__(name: str):  # lazy: keep `import fbrapids` light (`fbrapids --help` imports no pandas)
    if name in ("Backend", "get_backend"):
        from fbrapids.frames import backend

        return getattr(backend, name)
    if name == "read_view":
        from fbrapids.views.read import read_view

        return read_view
    if name == "ops":
        import importlib

        return importlib.import_module("fbrapids.ops")
    if name == "FeatureSet":
        from fbrapids.features import FeatureSet

        return FeatureSet
    if name == "trial":
        from fbrapids.app.trials import trial

        return trial
    if name in ("Workload", "RunConfig", "load_workload"):
        from fbrapids import workloads

        return getattr(workloads, name)
    if name == "progress":
        from fbrapids.ui.progressbar import progress

        return progress
    raise AttributeError(f"module 'fbrapids' has no attribute {name!r}")


__all__ = ["Backend", "BackendUnavailableError", "FbrapidsError", "get_backend", "read_view", "ops", "FeatureSet", "trial", "progress", "Workload",
           "RunConfig", "load_workload"]
