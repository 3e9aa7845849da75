"""The module paths from before the package root was emptied into floors (issue 39), kept
working as deprecated aliases: ``import fbrapids.datagen`` gives the module
:mod:`fbrapids.datasets.synthetic.generate` itself (the same object, so pickles and
checkpoints naming an old path still load) with a :class:`DeprecationWarning` naming the new
path.  :data:`MOVED` is the map; the top-level names (``fbrapids.read_view``, ``ops``,
``trial``, ``progress``, ``Workload``, ...) never moved and warn nothing.

Example:
    >>> import warnings, fbrapids
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     from fbrapids.datagen import DAYS
    >>> from fbrapids.datasets.synthetic import generate
    >>> DAYS == generate.DAYS, str(caught[0].message).split(";")[0]
    (True, 'fbrapids.datagen moved to fbrapids.datasets.synthetic.generate')
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import FrameType, ModuleType

#: old module path -> new module path
MOVED = {
    "fbrapids.cli": "fbrapids.app.cli",
    "fbrapids.demo": "fbrapids.app.demo",
    "fbrapids.demo_distributed": "fbrapids.app.demo_distributed",
    "fbrapids.pipeline": "fbrapids.app.pipeline",
    "fbrapids.trials": "fbrapids.app.trials",
    "fbrapids.trial_training": "fbrapids.app.trial_training",
    "fbrapids.serving.demo_export": "fbrapids.app.demo_export",
    "fbrapids.datagen": "fbrapids.datasets.synthetic.generate",
    "fbrapids.workload": "fbrapids.datasets.synthetic.views",
    "fbrapids.workdir": "fbrapids.runs.workdir",
    "fbrapids.disk_budget": "fbrapids.runs.disk_budget",
    "fbrapids.data_identity": "fbrapids.runs.data_identity",
    "fbrapids.plan_checks": "fbrapids.runs.plan_checks",
    "fbrapids.data_cache": "fbrapids.runs.data_cache",
    "fbrapids.join_frames": "fbrapids.joins.hash_join",
    "fbrapids.atomic": "fbrapids.files.atomic",
    "fbrapids.manifest": "fbrapids.files.manifest",
    "fbrapids.iostats": "fbrapids.files.iostats",
    "fbrapids.backend": "fbrapids.frames.backend",
    "fbrapids.cluster": "fbrapids.frames.cluster",
    "fbrapids.partition_pass": "fbrapids.frames.partition_pass",
    "fbrapids.dask_tokens": "fbrapids.frames.dask_tokens",
    "fbrapids.import_hooks": "fbrapids.frames.import_hooks",
    "fbrapids.gpu_probe": "fbrapids.frames.gpu_probe",
    "fbrapids.progressbar": "fbrapids.ui.progressbar",
    "fbrapids.autobar": "fbrapids.ui.autobar",
    "fbrapids.display": "fbrapids.ui.display",
    "fbrapids.plot": "fbrapids.ui.plot",
    "fbrapids.frame_rows": "fbrapids.views.rows",
    "fbrapids.plan_graph": "fbrapids.features.plan_graph",
}


def _caller_stacklevel() -> int:
    """The stack level of the first frame outside this module and importlib (the import
    statement that named the old path), so the warning points at the user's line."""
    level = 1
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename == __file__ or "importlib" in frame.f_code.co_filename):
        level, frame = level + 1, frame.f_back
    return level


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.target}; the old path is deprecated (see the README's Layout)",
                      DeprecationWarning, stacklevel=_caller_stacklevel())
        module = importlib.import_module(self.target)
        self.spec = module.__spec__  # the import system sets the alias's spec on it next: put its own back
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the module is the new path's, already executed): only its own spec restored."""
        module.__spec__ = self.spec


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED` (and nothing else) as aliases of the new ones."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        return None if new is None else importlib.util.spec_from_loader(fullname, _AliasLoader(new))


def install() -> None:
    """Put one :class:`MovedFinder` on ``sys.meta_path`` (after the real finders)."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
