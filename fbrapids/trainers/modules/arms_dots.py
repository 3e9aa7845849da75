"""DLRM's dot interactions of a trial's arms in one C pass (``csrc/arms_dots.c``).

The arms' batched forward (:meth:`fbrapids.trainers.models.DLRM.batched_logits`) has each
arm's bottom-MLP output ``x`` ``[M, B, d]``, its pooled bags ``[M, B, F, d]`` and its bias
vector ``[M, d]``.  Through :class:`~fbrapids.trainers.modules.interaction.DotInteraction`
they are concatenated twice (bags and bias, then x) and multiplied as ``bmm(T, T^T)``, whose
tiny per-sample matrices run far below a CPU's rate, computing every dot twice.  Here each
sample's dots are computed once where its fields lie, sixteen samples side by side in vector
lanes, and the backward gives each field's gradient directly: :func:`arms_dots` is
``DotInteraction(x, cat([bags, bias]))`` for every arm, to float rounding (each dot summed in
column order).  The loops run sixteen samples a vector on a machine with AVX-512, two vectors
of eight elsewhere (:func:`loop_forms`); the sums and their order are the same.

Example:
    >>> from fbrapids.trainers.modules.interaction import DotInteraction
    >>> g = torch.Generator().manual_seed(0)
    >>> x, bags, bias = torch.randn(2, 3, 4, generator=g), torch.randn(2, 3, 5, 4, generator=g), torch.randn(2, 4, generator=g)
    >>> z = arms_dots(x, bags, bias)
    >>> ref = DotInteraction(7)(x.reshape(6, 4), torch.cat([bags, bias[:, None, None].expand(2, 3, 1, 4)], 2).reshape(6, 6, 4))
    >>> z.shape, torch.allclose(z.reshape(6, -1), ref, atol=1e-5)
    (torch.Size([2, 3, 25]), True)
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from pathlib import Path
from typing import Iterator

import torch

from fbrapids.errors import ArgumentError
from fbrapids.kernels import load_source

CSRC = Path(__file__).with_name("csrc") / "arms_dots.c"
#: the most fields (x, the bags, the bias) and columns the C pass takes (``csrc/arms_dots.c``)
MAX_FIELDS, MAX_DIM = 128, 256


def source() -> str:
    """The C source of the pass, as :func:`~fbrapids.kernels.load_source` compiles it."""
    return CSRC.read_text()


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    lib = load_source(source())
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.fbx_arms_dots.restype = i32
    lib.fbx_arms_dots.argtypes = [p, p, p, i64, i64, i64, i64, i32, p, i32]
    lib.fbx_arms_dots_backward.restype = i32
    lib.fbx_arms_dots_backward.argtypes = [p, p, p, i64, i64, i64, i64, i32, p, i32, p, p, p, i32]
    lib.fbx_arms_dots_form.restype = i32
    lib.fbx_arms_dots_form.argtypes = [i32]
    lib.fbx_arms_dots_machine_form.restype = i32
    lib.fbx_arms_dots_machine_form.argtypes = []
    return lib


#: the forms of the C loops: sixteen samples a 512-bit vector (AVX-512), or two vectors of eight
LOOP_FORMS = ("sixteen", "eight")


def loop_forms() -> tuple[str, ...]:
    """The forms of the C loops this machine can run, its own first: ``("sixteen", "eight")``
    with AVX-512, ``("eight",)`` without (gcc keeps vectors wider than the registers in memory
    and moves them in pieces: the sixteen-lane form is compiled for AVX-512 only).

    Example:
        >>> loop_forms()[-1]
        'eight'
    """
    return LOOP_FORMS if _lib().fbx_arms_dots_machine_form() else LOOP_FORMS[1:]


@contextlib.contextmanager
def loop_form(form: str) -> Iterator[None]:
    """Run the C loops in ``form`` (one of :func:`loop_forms`) inside the block: for a test
    that the forms give the same bits.  Not thread-safe (nothing else may run the dots
    meanwhile); the machine's own form after.

    Example:
        >>> x, bags = torch.ones(1, 20, 16), torch.ones(1, 20, 3, 16)
        >>> outs = []
        >>> for form in loop_forms():
        ...     with loop_form(form):
        ...         outs.append(arms_dots(x, bags, None))
        >>> all(torch.equal(o, outs[0]) for o in outs), float(outs[0][0, 0, -1])
        (True, 16.0)
    """
    if form not in loop_forms():
        raise ArgumentError(f"loop_form: {form!r} is not one of this machine's forms {loop_forms()}")
    lib = _lib()
    lib.fbx_arms_dots_form(1 if form == LOOP_FORMS[0] else 0)
    try:
        yield
    finally:
        lib.fbx_arms_dots_form(-1)


def fits(x: torch.Tensor, bags: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether :func:`arms_dots` takes these: float32 on the CPU, within its limits.

    Example:
        >>> fits(torch.zeros(1, 2, 4), torch.zeros(1, 2, 3, 4), None), fits(torch.zeros(1, 2, 4).double(), torch.zeros(1, 2, 3, 4), None)
        (True, False)
    """
    ts = [x, bags] + ([bias] if bias is not None else [])
    n = 1 + bags.shape[2] + (bias is not None)
    return (all(t.dtype == torch.float32 and t.device.type == "cpu" for t in ts)
            and x.shape[2] <= MAX_DIM and n <= MAX_FIELDS)


def arms_dots(x: torch.Tensor, bags: torch.Tensor, bias: torch.Tensor | None,
              self_interaction: bool = False) -> torch.Tensor:
    """Each arm's ``[x, dots]`` ``[M, B, d + pairs]``: ``x`` ``[M, B, d]``, ``bags``
    ``[M, B, F, d]``, ``bias`` ``[M, d]`` (or None), the fields ``[x, bags..., bias]`` of
    every sample; differentiable in all three."""
    m, b, d = x.shape
    if bags.shape[:2] != (m, b) or bags.shape[3] != d or (bias is not None and bias.shape != (m, d)):
        raise ArgumentError(f"arms_dots: x {tuple(x.shape)}, bags {tuple(bags.shape)}, bias "
                            f"{None if bias is None else tuple(bias.shape)} do not fit together")
    if not fits(x, bags, bias):
        raise ArgumentError(f"arms_dots: float32 CPU tensors of at most {MAX_FIELDS} fields and {MAX_DIM} columns")
    return _ArmsDots.apply(x, bags, bias, self_interaction)


def _check(code: int, n: int, d: int) -> None:
    if code == -1:
        raise ArgumentError(f"arms_dots: {n} fields of {d} columns is past the C pass's limits")
    if code:
        raise MemoryError(f"arms_dots: no memory for the scratch of {n} fields of {d} columns")


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


class _ArmsDots(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, bags: torch.Tensor, bias: torch.Tensor | None,  # type: ignore[override]
                self_interaction: bool) -> torch.Tensor:
        x, bags = x.detach().contiguous(), bags.detach().contiguous()
        bias = None if bias is None else bias.detach().contiguous()
        m, b, d = x.shape
        nf = bags.shape[2]
        n = 1 + nf + (bias is not None)
        out = torch.empty(m, b, d + n * (n - 1) // 2 + (n if self_interaction else 0))
        _check(_lib().fbx_arms_dots(x.data_ptr(), bags.data_ptr(), _ptr(bias), m, b, nf, d, int(self_interaction),
                                    out.data_ptr(), torch.get_num_threads()), n, d)
        ctx.save_for_backward(x, bags, bias)
        ctx.self_interaction = self_interaction
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        x, bags, bias = ctx.saved_tensors
        # laid out by column ([M, width, B] transposed, as arms_linear's input gradient is): read so
        by_column = not grad.is_contiguous() and grad.transpose(1, 2).is_contiguous()
        grad = grad.transpose(1, 2) if by_column else grad.contiguous()
        m, b, d = x.shape
        nf = bags.shape[2]
        gx, gbags = torch.empty_like(x), torch.empty_like(bags)
        gbias_rows = None if bias is None else torch.empty(m, b, d)
        _check(_lib().fbx_arms_dots_backward(x.data_ptr(), bags.data_ptr(), _ptr(bias), m, b, nf, d,
                                             int(ctx.self_interaction), grad.data_ptr(), int(by_column),
                                             gx.data_ptr(),
                                             gbags.data_ptr(), _ptr(gbias_rows), torch.get_num_threads()),
               1 + nf + (bias is not None), d)
        return gx, gbags, None if gbias_rows is None else gbias_rows.sum(1), None
