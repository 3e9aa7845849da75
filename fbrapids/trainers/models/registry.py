"""The registry of model classes an export or a checkpoint may name.

An export's ``serving.json`` names its model by a registry entry (``"WideAndDeep"``), never
by an importable path: loading builds only classes registered here, fbrapids' own models
(DLRM, WideAndDeep, DeepFM, DIN, DCNv2, LogisticRegression; DICM once :mod:`fbrapids.ams` is imported) plus the ones
a user registers in code with :func:`register_model`.  A model may also carry a short
name, the one the command line, :class:`~fbrapids.workloads.RunConfig` and the pipeline use
(``"dlrm"``, ``"wide_deep"``...): :func:`model_for` finds its class.  Each model registers
itself in its own file (``@register_model(short="dlrm")``); every list of models (the command
line's choices, ``RunConfig``'s check, the distributed demo's, the exportable ones) reads
:func:`short_names`.

Example:
    >>> from fbrapids.trainers.models import CTRModel, DLRM
    >>> model_class("DLRM") is DLRM, model_name(DLRM), model_for("dlrm") is DLRM
    (True, 'DLRM', True)
    >>> short_names()[:6]  # fbrapids' own, then any a user registered
    ('dlrm', 'wide_deep', 'deepfm', 'din', 'logreg', 'dcn')
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

from typing import TYPE_CHECKING, Callable, TypeVar, cast, overload

from fbrapids.errors import ArgumentError, ExportError, UnsafeFileError

if TYPE_CHECKING:  # (the registry itself imports no torch: the command line reads it before training)
    from fbrapids.trainers.models.base import CTRModel

_MODELS: dict[str, type] = {}
_SHORT: dict[str, str] = {}  # short name -> registry name


_Model = TypeVar("_Model", bound=type)


@overload
def register_model(cls: _Model, *, name: str | None = None, short: str | None = None) -> _Model: ...


@overload
def register_model(cls: None = None, *, name: str | None = None,
                   short: str | None = None) -> Callable[[_Model], _Model]: ...


def register_model(cls: type | None = None, *, name: str | None = None,
                   short: str | None = None) -> type | Callable[[_Model], _Model]:
    """Register a model class under ``name`` (default: its class name), and under ``short``
    when given (the name the command line uses); usable as a decorator (``@register_model``
    or ``@register_model(name="x")``).  Re-registering a name for another class is an error;
    returns the class."""

    def add(c: _Model) -> _Model:
        key = name or c.__name__
        if _MODELS.get(key, c) is not c:
            raise ArgumentError(f"register_model: {key!r} is already {_MODELS[key].__module__}.{_MODELS[key].__qualname__}")
        if short is not None and _SHORT.get(short, key) != key:
            raise ArgumentError(f"register_model: short name {short!r} is already {_SHORT[short]!r}")
        _MODELS[key] = c
        if short is not None:
            _SHORT[short] = key
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


def model_for(short: str) -> type[CTRModel]:
    """The class registered under the short name ``short``; an
    :class:`~fbrapids.errors.ArgumentError` listing the short names otherwise."""
    if short not in _SHORT:
        raise ArgumentError(f"unknown model {short!r}; expected one of {', '.join(_SHORT)}")
    return cast("type[CTRModel]", _MODELS[_SHORT[short]])


def short_names(having: str | None = None) -> tuple[str, ...]:
    """The short names, in registration order; ``having``: only those whose class has that
    attribute true (``"exportable"``, ``"trains_distributed"``: what the model says of itself)."""
    return tuple(s for s, k in _SHORT.items() if having is None or getattr(_MODELS[k], having, False))


def registered_models() -> dict[str, type]:
    """A copy of the registry."""
    return dict(_MODELS)


