"""The registry of model classes an export or a checkpoint may name.

An export's ``serving.json`` names its model by a registry entry (``"WideAndDeep"``), never
by an importable path: loading builds only classes registered here, fbrapids' own models
(DLRM, WideAndDeep, DeepFM, DIN; DICM once :mod:`fbrapids.ams` is imported) plus the ones
a user registers in code with :func:`register_model`.

Example:
    >>> from fbrapids.trainers.models import CTRModel, DLRM
    >>> model_class("DLRM") is DLRM, model_name(DLRM)
    (True, 'DLRM')
    >>> @register_model
    ... class MyModel(DLRM):
    ...     pass
    >>> model_class("MyModel") is MyModel
    True
    >>> model_class("subprocess:run")
    Traceback (most recent call last):
    ...
    fbrapids.errors.UnsafeFileError: model 'subprocess:run' is not a registered model (registered: ...); ...
"""

from __future__ import annotations

from typing import Any

from fbrapids.errors import ArgumentError, ExportError, UnsafeFileError

_MODELS: dict[str, type] = {}


def register_model(cls: type | None = None, *, name: str | None = None) -> Any:
    """Register a model class under ``name`` (default: its class name); usable as a decorator
    (``@register_model`` or ``@register_model(name="x")``).  Re-registering a name for
    another class is an error; returns the class."""

    def add(c: type) -> type:
        key = name or c.__name__
        if _MODELS.get(key, c) is not c:
            raise ArgumentError(f"register_model: {key!r} is already {_MODELS[key].__module__}.{_MODELS[key].__qualname__}")
        _MODELS[key] = c
        return c

    return add(cls) if cls is not None else add


def model_class(name: str) -> type:
    """The registered class named ``name``; :class:`~fbrapids.errors.UnsafeFileError` otherwise."""
    try:
        return _MODELS[name]
    except (KeyError, TypeError):
        raise UnsafeFileError(f"model {name!r} is not a registered model (registered: {', '.join(sorted(_MODELS))}); "
                              "register a custom model with fbrapids.trainers.models.register_model") from None


def model_name(cls: type) -> str:
    """The registry name of ``cls``; a ``ValueError`` if it is not registered."""
    for k, c in _MODELS.items():
        if c is cls:
            return k
    raise ExportError(f"{cls.__module__}.{cls.__qualname__} is not a registered model: register it with "
                     "fbrapids.trainers.models.register_model before exporting")


def registered_models() -> dict[str, type]:
    """A copy of the registry."""
    return dict(_MODELS)


