"""The registered data sets: a :class:`Dataset` is a public or generated log's preprocessing
(its features as :mod:`fbrapids.ops` expressions) and, when it has one, its whole
:class:`~fbrapids.workloads.Workload` for a folder of its files.  A workload names one with
``features.dataset = "criteo"`` (TOML) to extract its features too.

The rule for adding one: a module builds its :class:`Dataset` and calls
:func:`register_dataset` at import.  The built-in ones live in ``fbrapids/datasets/`` and
``fbrapids/datasets/__init__.py`` imports them; the package root hands this registry a loader
that imports ``fbrapids.datasets`` the first time a name is looked up, so this floor never
imports the floor above it.  A user's own data set registers when its module is imported.

Example:
    >>> from fbrapids import ops
    >>> toy = register_dataset(Dataset("doctest_toy", lambda: {"u_h": ops.hash_bucket("u", 8)}), replace=True)
    >>> sorted(dataset("doctest_toy").features())
    ['u_h']
    >>> dataset("no_such_set")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fbrapids.errors.WorkloadError: no data set 'no_such_set' is registered; known: [...]
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

from fbrapids.errors import WorkloadError

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.ops import ExprLike
    from fbrapids.workloads.spec import Workload

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Dataset:
    """A data set: ``name`` (what ``features.dataset`` names), ``features`` (a function
    returning its features, name -> :mod:`fbrapids.ops` expression), and ``workload`` (a
    function from a folder of its files to its whole :class:`~fbrapids.workloads.Workload`;
    None when only its features are declared and a workload file says the rest)."""

    name: str
    features: Callable[[], Mapping[str, ExprLike]]
    workload: Callable[[str | os.PathLike[str]], Workload] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise WorkloadError(f"a data set's name must be an identifier, got {self.name!r}")
        if not callable(self.features):
            raise WorkloadError(f"data set {self.name!r}: features must be a function returning "
                                f"name -> expression, got {self.features!r}")


_REGISTERED: dict[str, Dataset] = {}
_LOADERS: list[Callable[[], object]] = []


def register_dataset(data_set: Dataset, replace: bool = False) -> Dataset:
    """Register ``data_set`` under its name and return it; a second one of the same name is
    a :class:`~fbrapids.errors.WorkloadError` unless ``replace``."""
    if not isinstance(data_set, Dataset):
        raise WorkloadError(f"register_dataset takes a Dataset, got {type(data_set).__name__}")
    if data_set.name in _REGISTERED and not replace and _REGISTERED[data_set.name] is not data_set:
        raise WorkloadError(f"a data set named {data_set.name!r} is already registered (replace=True to replace it)")
    _REGISTERED[data_set.name] = data_set
    return data_set


def add_dataset_loader(loader: Callable[[], object]) -> None:
    """Run ``loader`` (it imports modules that register data sets) before the first lookup of
    a name not yet registered: how the package root lends the built-in data sets to this floor."""
    _LOADERS.append(loader)


def _load_pending() -> None:
    while _LOADERS:
        _LOADERS.pop(0)()


def registered_datasets() -> list[str]:
    """The names of every registered data set (the built-in ones loaded first), sorted."""
    _load_pending()
    return sorted(_REGISTERED)


def dataset(name: str) -> Dataset:
    """The data set registered as ``name``; an unknown name is a
    :class:`~fbrapids.errors.WorkloadError` listing the known ones."""
    if not isinstance(name, str) or name not in _REGISTERED:
        _load_pending()
    if not isinstance(name, str) or name not in _REGISTERED:
        raise WorkloadError(f"no data set {name!r} is registered; known: {sorted(_REGISTERED)}")
    return _REGISTERED[name]
