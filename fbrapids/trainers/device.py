"""The one device rule of training and serving.

:func:`resolve_device` decides where models, stores and batches live, in this order:

1. an explicit argument (``fit(..., device="cuda:1")``, ``StoreConfig(device=...)``);
2. ``$FBRAPIDS_DEVICE`` (``cpu``, ``cuda``, ``cuda:1`` ...);
3. ``cuda`` when the fbrapids backend (:func:`fbrapids.frames.backend.resolve_name`: the
   argument-free choice, so ``FBRAPIDS_BACKEND=cpu`` keeps training on the CPU) is the GPU
   and torch sees a CUDA device;
4. the CPU.

A model trains where its parameters are (:func:`module_device`); ``model.to(device)``
also moves the cache tier of every tiered store the model owns.

Example:
    >>> resolve_device("cpu")
    device(type='cpu')
    >>> import os; os.environ["FBRAPIDS_DEVICE"] = "cpu"; resolve_device()
    device(type='cpu')
    >>> del os.environ["FBRAPIDS_DEVICE"]
"""

from __future__ import annotations

import os

import torch
from torch import nn

from fbrapids.errors import BackendUnavailableError
from fbrapids.frames.backend import resolve_name

ENV_VAR = "FBRAPIDS_DEVICE"


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """The torch device by the rule above.

    Raises:
        BackendUnavailableError: a CUDA device was asked for (argument or environment)
            where torch has none.
    """
    source = "argument"
    if device is None:
        device, source = os.environ.get(ENV_VAR) or None, f"${ENV_VAR}"
    if device is None:
        if resolve_name() == "gpu" and torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailableError(f"device {str(dev)!r} (from the {source}) asked for, but this torch "
                                      f"({torch.__version__}) sees no CUDA device; use cpu or unset {ENV_VAR}")
    return dev


def module_device(module: nn.Module) -> torch.device:
    """Where ``module`` computes: its first parameter's (or buffer's) device, else the CPU.

    Example:
        >>> module_device(torch.nn.Linear(2, 1))
        device(type='cpu')
    """
    for t in module.parameters():
        return t.device
    for b in module.buffers():
        return b.device
    return torch.device("cpu")


def place_model(model: nn.Module, device: str | torch.device | None = None) -> torch.device:
    """Put ``model`` (with its stores' cache tiers) where the rule says; returns the device.

    With ``device=None``, a model its owner already put on an accelerator stays there;
    otherwise it moves to :func:`resolve_device` ``(device)``.

    Example:
        >>> place_model(torch.nn.Linear(2, 1), "cpu")
        device(type='cpu')
    """
    here = module_device(model)
    if device is None and here.type != "cpu":
        return here
    target = resolve_device(device)
    if target != here or device is not None:
        model.to(target)
    return module_device(model) if any(True for _ in model.parameters()) else target
