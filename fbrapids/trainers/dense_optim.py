"""The dense optimizer ``fit`` uses by default: Adam, as ``torch.optim.Adam(fused=True)``
computes it, bit for bit, without ``torch.optim``'s machinery.

Every ``torch.optim`` optimizer imports ``torch._dynamo`` when it is built and when it
steps (its constructor and ``step`` are wrapped to keep the compiler out): a one-time cost
of 1 to 4 seconds a process, about a tenth of a 200,000-row demo.  :class:`FusedAdam`
calls the same fused kernel (``torch._fused_adam_``, one call per step for every parameter
of a device and dtype) directly, keeps its state under the same names, and reads and
writes ``torch.optim.Adam``'s ``state_dict`` format, so a checkpoint written with either
resumes with the other.

Example:
    >>> import sys, torch
    >>> p = torch.nn.Parameter(torch.ones(3)); q = torch.nn.Parameter(torch.ones(3))
    >>> mine, theirs = FusedAdam([p], lr=0.1), torch.optim.Adam([q], lr=0.1, fused=True)
    >>> for _ in range(3):
    ...     p.grad, q.grad = torch.tensor([1.0, -2.0, 3.0]), torch.tensor([1.0, -2.0, 3.0])
    ...     mine.step(); theirs.step()
    >>> torch.equal(p, q), mine.state_dict()["state"][0]["step"].item()
    (True, 3.0)
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from typing import Any, Callable, Iterable

import torch

from fbrapids.errors import ArgumentError


class FusedAdam(torch.optim.Optimizer):
    """Adam (``lr``, ``betas``, ``eps``, ``weight_decay`` as ``torch.optim.Adam``'s, L2 added
    to the gradient), one fused kernel call per device and dtype per step; see the module
    docstring.  ``param_groups``, ``state``, ``zero_grad``, ``step``, ``state_dict`` and
    ``load_state_dict`` as ``torch.optim.Adam``'s.  A ``torch.optim.Optimizer`` by type (a
    scheduler or a type check takes it) whose constructor does not run the base class's,
    the part that imports the compiler."""

    def __init__(self, params: Iterable[torch.nn.Parameter] | Iterable[dict[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ArgumentError(f"FusedAdam: invalid lr {lr}, betas {betas}, eps {eps} or weight_decay {weight_decay}")
        self.defaults: dict[str, Any] = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                         "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
                                         "differentiable": False, "fused": True, "decoupled_weight_decay": False}
        given: list[Any] = list(params)
        if not given:
            raise ArgumentError("FusedAdam got an empty parameter list")
        groups: list[dict[str, Any]] = given if isinstance(given[0], dict) else [{"params": given}]
        self.param_groups: list[dict[str, Any]] = [{**self.defaults, **g, "params": list(g["params"])}
                                                   for g in groups]
        self.state: defaultdict[torch.Tensor, Any] = defaultdict(dict)
        for hooks in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks", "_optimizer_state_dict_pre_hooks",
                      "_optimizer_state_dict_post_hooks", "_optimizer_load_state_dict_pre_hooks",
                      "_optimizer_load_state_dict_post_hooks"):
            setattr(self, hooks, OrderedDict())  # the base class's (left empty: no hooks are run)

    def zero_grad(self, set_to_none: bool = True) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        """One Adam step of every parameter with a gradient (``closure`` is not supported)."""
        if closure is not None:
            raise ArgumentError("FusedAdam.step takes no closure")
        for group in self.param_groups:
            by_kind: dict[tuple[torch.device, torch.dtype], list[list[torch.Tensor]]] = {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                lists = by_kind.setdefault((p.device, p.dtype), [[], [], [], [], []])
                for k, t in enumerate((p, p.grad, st["exp_avg"], st["exp_avg_sq"], st["step"])):
                    lists[k].append(t)
            beta1, beta2 = group["betas"]
            for params, grads, avgs, sqs, steps in by_kind.values():
                torch._foreach_add_(steps, 1)
                torch._fused_adam_(params, grads, avgs, sqs, [], steps, amsgrad=False, lr=group["lr"], beta1=beta1,
                                   beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"], maximize=False,
                                   grad_scale=None, found_inf=None)

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        """``torch.optim.Adam``'s format: per-parameter state by position, the groups' settings."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            ids = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        state = {index[id(p)]: dict(st) for p, st in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:  # type: ignore[override]
        """Restore a :meth:`state_dict` (or ``torch.optim.Adam``'s) for the same parameters."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(g["params"]) != len(mine["params"]) for g, mine in zip(groups, self.param_groups)):
            raise ArgumentError("FusedAdam.load_state_dict: the saved groups do not match these parameters")
        by_index = {i: p for g, mine in zip(groups, self.param_groups) for i, p in zip(g["params"], mine["params"])}
        for g, mine in zip(groups, self.param_groups):
            mine.update({k: (tuple(v) if k == "betas" else v) for k, v in g.items() if k != "params"})
        self.state = defaultdict(dict)
        for i, st in state_dict["state"].items():
            p = by_index[int(i)]
            self.state[p] = {k: v.to(device=p.device, dtype=torch.float32 if k == "step" else p.dtype, copy=True)
                             for k, v in st.items()}  # copies: never shared with the dict read


def default_optimizer(params: list[torch.nn.Parameter], lr: float = 1e-3) -> torch.optim.Optimizer:
    """``fit``'s dense optimizer: ``Adam(lr=1e-3)`` as one fused kernel over all dense
    parameters (one call per step instead of a dozen small ops per tensor), :class:`FusedAdam`;
    the plain ``torch.optim.Adam`` where the parameters are on a device without the fused kernel.

    Example:
        >>> import torch
        >>> type(default_optimizer([torch.nn.Parameter(torch.zeros(2))])).__name__
        'FusedAdam'
    """
    if all(p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float64, torch.float16,
                                                             torch.bfloat16) for p in params):
        return FusedAdam(params, lr=lr)
    return torch.optim.Adam(params, lr=lr)
