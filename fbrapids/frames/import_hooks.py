"""Run a function once a module is imported -- now if it already is, else right after its import.

``import fbrapids`` registers the ``.fbx`` accessor on dask and cudf frames this way, so
that it never imports dask.dataframe, cudf or dask_cudf itself (cudf alone costs seconds,
and on a machine with the RAPIDS wheels but no GPU the CPU backend must not load them).
The hook is a ``sys.meta_path`` finder that wraps the real loader of the watched module
only; it steps aside (restores the real loader) before the module's code runs.

Example:
    >>> import sys
    >>> seen = []
    >>> when_imported("json", lambda m: seen.append(m.__name__))  # imported already: runs now
    >>> seen
    ['json']
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from types import ModuleType
from typing import Callable, Sequence

log = logging.getLogger(__name__)

_pending: dict[str, list[Callable[[ModuleType], None]]] = {}
_lock = threading.RLock()


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` when module ``name`` is imported (at once if it is already)."""
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _pending.setdefault(name, []).append(callback)
            if not any(isinstance(f, _Finder) for f in sys.meta_path):
                sys.meta_path.insert(0, _Finder())
            return
    callback(module)


def pending() -> list[str]:
    """The watched modules not imported yet.

    >>> isinstance(pending(), list)
    True
    """
    with _lock:
        return sorted(_pending)


def _notify(name: str) -> None:
    with _lock:
        callbacks = _pending.pop(name, [])
    module = sys.modules.get(name)
    for callback in callbacks:
        if module is None:
            break
        try:
            callback(module)
        except Exception:  # noqa: BLE001 - a failing hook must not break the user's import
            log.warning("the import hook for %s failed", name, exc_info=True)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asks the finders after it, and wraps the loader of a watched module."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None):
        with _lock:
            if fullname not in _pending:
                return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _NotifyingLoader(spec.loader, fullname)
        return spec


class _NotifyingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, name: str) -> None:
        self._loader, self._name = loader, name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader  # the real loader from here on (resources, reloads)
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        _notify(self._name)
