"""The kernel buffer ABI, in one place: error codes, the key-length limit, the slot layout
of a layer kernel's ``bufs`` and the order of each column's buffers in it.

Every layer kernel has the signature::

    kernel(fbx_i64 n, void** bufs, char* pool, fbx_u64 cap, fbx_u64* head, fbx_i32* err)

``bufs`` holds, in :class:`LayerABI` order, the layer's input columns (each as the slots
of :func:`input_slots`), then per operator its output slots (:func:`output_slots`), its
per-row status slot (when it has one) and its parameter buffers.

Input slots (pointers to the first row; the runtime adds the column's offset):

* fixed width: ``data, valid, valid_bit``
* ``str``: ``offsets, bytes, valid, valid_bit``
* ``list<i64|u64>``: ``offsets, data, valid, valid_bit``
* ``list<str>``: ``offsets, str_offsets, bytes, valid, valid_bit``

``valid`` is an LSB-first validity bitmap (Arrow's, or cudf's uint32 words: the same bits)
or NULL when the column has no nulls; ``valid_bit`` is not a pointer but the bit index of
row 0 in it (a sliced cudf column starts mid-word).  ``offsets`` / ``str_offsets`` are
int64 on the host; on the device they are whatever width the cudf column has (see
:class:`InputLayout`), and the renderer emits the matching C type.

Output slots: fixed ``[data, valid(u8 per row)]``; ``str`` / ``list<int>`` ``[valid, off,
cnt]`` (pool offset and element count per row); ``list<str>`` ``[valid, off, cnt, off2,
cnt2]``.

Example:
    >>> input_slots("str"), output_slots("list<str>")
    (('offsets', 'bytes', 'valid', 'valid_bit'), ('valid', 'off', 'cnt', 'off2', 'cnt2'))
    >>> "#define FBX_ERR_POOL_OVERFLOW 1" in c_defines()
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from fbrapids.errors import KernelRuntimeError
from fbrapids.kernels import types as T

if TYPE_CHECKING:  # (annotations only: the plan imports this module)
    from fbrapids.kernels.plan import Layer, Plan

#: error bits of a kernel's error word
ERR_POOL_OVERFLOW = 1  #: a block's pool share passed ``cap``: grow the pool, run the layer again
#: a key too long to hash (no built-in sets it: cross / n-gram keys longer than
#: :data:`KEY_MAX` are hashed piece by piece, see ``fbx_fps`` in farmhash.h)
ERR_KEY_TOO_LONG = 2
#: longest concatenated key (cross / n-gram text) assembled in one buffer, in bytes; longer
#: ones stream through the hasher (same fingerprint)
KEY_MAX = 4096
#: pool regions are reserved in multiples of this many bytes (one reservation per block)
POOL_ALIGN = 128
#: threads per block of a CUDA layer kernel
CUDA_BLOCK = 128
#: static shared memory one CUDA block may use (sm_50 .. sm_90: 48 KiB without an opt-in)
CUDA_SHARED_LIMIT = 48 * 1024
#: pool parts (a ``str`` / ``list<int>`` output takes one, a ``list<str>`` two) one CUDA layer
#: kernel may have: each takes ``CUDA_BLOCK`` 8-byte sizes of shared memory (1 KiB), so 48 parts
#: pass ptxas' limit; the planner splits a wider layer into several kernels (32 KiB leaves room)
CUDA_MAX_PARTS = 32

_C_CONSTANTS = {"FBX_ERR_POOL_OVERFLOW": ERR_POOL_OVERFLOW, "FBX_ERR_KEY_TOO_LONG": ERR_KEY_TOO_LONG,
                "FBX_KEY_MAX": KEY_MAX, "FBX_POOL_ALIGN": POOL_ALIGN}


def c_defines() -> str:
    """The ABI constants as C ``#define`` lines (rendered ahead of every kernel source)."""
    return "\n".join(["/* ---- fbrapids.kernels.abi (generated) ---- */", "#ifndef FBX_ABI_H", "#define FBX_ABI_H"]
                     + [f"#define {k} {v}" for k, v in _C_CONSTANTS.items()] + ["#endif"]) + "\n"


_INPUT = {"fixed": ("data", "valid", "valid_bit"), "str": ("offsets", "bytes", "valid", "valid_bit"),
          "list<int>": ("offsets", "data", "valid", "valid_bit"),
          "list<str>": ("offsets", "str_offsets", "bytes", "valid", "valid_bit")}
_OUTPUT = {"fixed": ("data", "valid"), "var": ("valid", "off", "cnt"),
           "list<str>": ("valid", "off", "cnt", "off2", "cnt2")}


def pool_parts(type_name: str) -> int:
    """The pool parts an output of this type takes in a layer kernel (0 for fixed width).

    Example:
        >>> pool_parts("f64"), pool_parts("str"), pool_parts("list<str>")
        (0, 1, 2)
    """
    return 2 if type_name == "list<str>" else 1 if T.is_var(type_name) else 0


def cuda_shared_bytes(nparts: int) -> int:
    """Static shared memory of a CUDA layer kernel with ``nparts`` pool parts (``sz``,
    ``s_start``, ``s_base``, ``s_tot``; see :func:`fbrapids.kernels.render.render_layer_cuda`).

    Example:
        >>> cuda_shared_bytes(CUDA_MAX_PARTS) <= CUDA_SHARED_LIMIT < cuda_shared_bytes(48)
        True
    """
    n = max(nparts, 1)
    return 8 * (n * CUDA_BLOCK + n + 2)


def _shape(type_name: str) -> str:
    if type_name in T.FIXED_TYPES:
        return "fixed"
    if type_name in ("list<i64>", "list<u64>"):
        return "list<int>"
    return type_name


def input_slots(type_name: str) -> tuple[str, ...]:
    """The names of an input column's slots, in order (buffers of :class:`HostColumn`)."""
    return _INPUT[_shape(type_name)]


def output_slots(type_name: str) -> tuple[str, ...]:
    """The names of an operator output's slots, in order."""
    shape = _shape(type_name)
    return _OUTPUT["fixed" if shape == "fixed" else "list<str>" if shape == "list<str>" else "var"]


def slots(type_name: str) -> int:
    """How many slots an input column of this type takes in a kernel's buffer list."""
    return len(input_slots(type_name))


@dataclass(frozen=True)
class InputLayout:
    """Offset widths (4 or 8 bytes) of an input column's offset buffers on the device.

    The host always hands int64 offsets; cudf strings have int32 or int64 offsets and
    cudf lists int32 ones, so a device plan is rendered per input layout.
    """

    offsets: int = 8
    str_offsets: int = 8

    def c_type(self, which: str) -> str:
        return "fbx_i32" if getattr(self, which) == 4 else "fbx_i64"


HOST_LAYOUT = InputLayout()


@dataclass
class OutSlots:
    """Where one operator's output, status and parameter buffers sit in ``bufs``."""

    node: int
    type: str
    first: int  #: index of the first output slot
    parts: list[int] = field(default_factory=list)  #: pool part ids (variable-length outputs)
    status: int | None = None
    buffers: list[int] = field(default_factory=list)

    def slot(self, name: str) -> int:
        return self.first + output_slots(self.type).index(name)


@dataclass
class LayerABI:
    """Where each buffer of a layer kernel sits in ``bufs``."""

    inputs: dict[int, int]  #: node id -> first slot
    outputs: dict[int, OutSlots]
    nslots: int
    nparts: int
    skip: int | None = None  #: the skip array's slot (None: no operator of the layer may be skipped)


def layer_abi(plan: Plan, layer: Layer) -> LayerABI:
    """The slot layout of one layer (a :class:`~fbrapids.kernels.plan.Layer` of a
    :class:`~fbrapids.kernels.plan.Plan`; this module sits below them and takes them as
    they come): inputs, then per operator its outputs, status and parameter buffers."""
    pos = 0
    inputs: dict[int, int] = {}
    for nid in layer.nodes:
        for a in plan.nodes[nid].args:
            if a not in inputs:
                inputs[a] = pos
                pos += slots(plan.nodes[a].type)
    outputs: dict[int, OutSlots] = {}
    nparts = 0
    for nid in layer.nodes:
        node = plan.nodes[nid]
        o = OutSlots(nid, node.type, pos)
        pos += len(output_slots(node.type))
        o.parts = list(range(nparts, nparts + pool_parts(node.type)))
        nparts += len(o.parts)
        impl = node.implementation()
        if impl.status:
            o.status = pos
            pos += 1
        for _ in impl.buffers:
            o.buffers.append(pos)
            pos += 1
        outputs[nid] = o
    skip = None
    if any(getattr(plan.nodes[nid], "dict_slot", None) is not None for nid in layer.nodes):
        skip, pos = pos, pos + 1
    return LayerABI(inputs, outputs, pos, nparts, skip)


def check_error(err: int, layer_index: int, features: Iterable[str]) -> bool:
    """Act on a layer's error word: raise for a data error, True for a pool overflow.

    Example:
        >>> check_error(0, 0, []), check_error(ERR_POOL_OVERFLOW, 0, [])
        (False, True)
    """
    if err & ERR_KEY_TOO_LONG:
        raise KernelRuntimeError(f"layer {layer_index}: a cross / n-gram key is longer than {KEY_MAX} bytes "
                                 f"(features: {', '.join(sorted(set(features)))})")
    return bool(err & ERR_POOL_OVERFLOW)
