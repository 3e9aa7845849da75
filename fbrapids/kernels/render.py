"""Render a plan's layers as meta-kernels: CUDA (``extern "C" __global__``) or host C
(OpenMP over blocks of rows).  One source text per target; the operators' device
functions and the per-row bodies are the same text for both, only the scaffold around
them (and ``fbx_target.h``'s macros) differ -- the way tinygrad's ``renderer/cstyle.py``
renders one IR for several targets.

Each layer kernel has the signature::

    kernel(fbx_i64 n, void** bufs, char* pool, fbx_u64 cap, fbx_u64* head, fbx_i32* err)

``bufs`` holds, in :class:`LayerABI` order, the layer's input column buffers, its output
buffers and its operators' parameter buffers.  Variable-length outputs follow the paper's
Algorithm 1: every row (thread) computes its sizes, the block prefix-sums them, ONE
atomic add on ``head`` reserves the block's 128-byte aligned share of ``pool``, and the
rows write at base + prefix.  A block that would pass ``cap`` sets
``FBX_ERR_POOL_OVERFLOW`` in ``err`` instead of writing; the host grows the pool and
runs the layer again.

Example:
    >>> from fbrapids import ops
    >>> from fbrapids.kernels.plan import build_plan
    >>> p = build_plan({"h": ops.hash_bucket("q", 10)}, {"q": "str"})
    >>> src = render_module(p, "host")
    >>> "fbx_layer_0" in src and "omp parallel for" in src
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from fbrapids.kernels import types as T
from fbrapids.kernels.columns import slots
from fbrapids.kernels.plan import Layer, Plan

CSRC = Path(__file__).parent / "csrc"
HOST_BLOCK = 256
CUDA_BLOCK = 128
PAR_MIN_BLOCKS = 16  # host kernels over fewer blocks (4096 rows) run single-threaded
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)


def _find_header(name: str, from_dir: Path) -> Path:
    for d in (from_dir, CSRC, CSRC / "ops"):
        p = d / name
        if p.exists():
            return p
    raise FileNotFoundError(f"kernel header {name!r} not found under {CSRC}")


def inline_headers(names: list[str]) -> str:
    """The text of the headers (and what they include), each once, includes resolved in place.

    Inlined so that NVRTC needs no include path and the cache key covers the headers.
    """
    seen: set[Path] = set()
    out: list[str] = []

    def add(path: Path) -> None:
        if path in seen:
            return
        seen.add(path)
        text = path.read_text()
        for dep in _INCLUDE.findall(text):
            add(_find_header(dep, path.parent))
        out.append(f"/* ---- {path.relative_to(CSRC)} ---- */\n" + _INCLUDE.sub("", text))

    add(CSRC / "fbx_target.h")
    for n in names:
        add(_find_header(n, CSRC))
    return "\n".join(out)


@dataclass
class OutSlots:
    node: int
    type: str
    first: int  # index of the first slot in bufs
    parts: list[int] = field(default_factory=list)  # pool part ids (var outputs)
    status: int | None = None
    buffers: list[int] = field(default_factory=list)


@dataclass
class LayerABI:
    """Where each buffer of a layer kernel sits in ``bufs``."""

    inputs: dict[int, int]  # node id -> first slot
    outputs: dict[int, OutSlots]
    nslots: int
    nparts: int


def layer_abi(plan: Plan, layer: Layer) -> LayerABI:
    """Slot layout: inputs (column slots), then per operator its outputs, status and buffers.

    Output slots: fixed ``[values, valid(u8/row)]``; str / list<int>
    ``[valid, pool offset, count]``; list<str> ``[valid, offA, countA, offB, countB]``.
    """
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
        if node.type in T.FIXED_TYPES:
            pos += 2
        elif node.type == "list<str>":
            pos += 5
            o.parts = [nparts, nparts + 1]
            nparts += 2
        else:
            pos += 3
            o.parts = [nparts]
            nparts += 1
        if node.impl.status:
            o.status = pos
            pos += 1
        for _ in node.impl.buffers:
            o.buffers.append(pos)
            pos += 1
        outputs[nid] = o
    return LayerABI(inputs, outputs, pos, nparts)


def _bind(plan: Plan, abi: LayerABI) -> list[str]:
    lines = []
    for nid, s in abi.inputs.items():
        t = plan.nodes[nid].type
        if t in T.FIXED_TYPES:
            lines.append(f"const {T.C_TYPE[t]}* in{nid}_d = (const {T.C_TYPE[t]}*)bufs[{s}]; "
                         f"const fbx_u8* in{nid}_v = (const fbx_u8*)bufs[{s + 1}];")
        elif t == "str":
            lines.append(f"const fbx_i64* in{nid}_o = (const fbx_i64*)bufs[{s}]; const char* in{nid}_b = (const char*)bufs[{s + 1}]; "
                         f"const fbx_u8* in{nid}_v = (const fbx_u8*)bufs[{s + 2}];")
        elif t == "list<str>":
            lines.append(f"const fbx_i64* in{nid}_o = (const fbx_i64*)bufs[{s}]; const fbx_i64* in{nid}_so = (const fbx_i64*)bufs[{s + 1}]; "
                         f"const char* in{nid}_b = (const char*)bufs[{s + 2}]; const fbx_u8* in{nid}_v = (const fbx_u8*)bufs[{s + 3}];")
        else:
            lines.append(f"const fbx_i64* in{nid}_o = (const fbx_i64*)bufs[{s}]; const fbx_i64* in{nid}_d = (const fbx_i64*)bufs[{s + 1}]; "
                         f"const fbx_u8* in{nid}_v = (const fbx_u8*)bufs[{s + 2}];")
    for nid, o in abi.outputs.items():
        s = o.first
        if o.type in T.FIXED_TYPES:
            ct = T.C_TYPE[o.type]
            lines.append(f"{ct}* o{nid}_d = ({ct}*)bufs[{s}]; fbx_u8* o{nid}_v = (fbx_u8*)bufs[{s + 1}];")
        else:
            lines.append(f"fbx_u8* o{nid}_v = (fbx_u8*)bufs[{s}]; fbx_i64* o{nid}_o = (fbx_i64*)bufs[{s + 1}]; "
                         f"fbx_i64* o{nid}_c = (fbx_i64*)bufs[{s + 2}];")
            if o.type == "list<str>":
                lines.append(f"fbx_i64* o{nid}_o2 = (fbx_i64*)bufs[{s + 3}]; fbx_i64* o{nid}_c2 = (fbx_i64*)bufs[{s + 4}];")
        if o.status is not None:
            lines.append(f"fbx_i8* o{nid}_st = (fbx_i8*)bufs[{o.status}];")
        for i, b in enumerate(o.buffers):
            lines.append(f"const void* pb{nid}_{i} = (const void*)bufs[{b}];")
    return lines


def _loads(plan: Plan, abi: LayerABI) -> list[str]:
    lines = []
    for nid in abi.inputs:
        t = plan.nodes[nid].type
        if t in T.FIXED_TYPES:
            val = f"const {T.C_TYPE[t]} a{nid} = in{nid}_d[r];"
        elif t == "str":
            val = f"const fbx_str a{nid} = fbx_mk_str(in{nid}_o, in{nid}_b, r);"
        elif t == "list<str>":
            val = f"const fbx_ls a{nid} = fbx_mk_ls(in{nid}_o, in{nid}_so, in{nid}_b, r);"
        else:
            val = f"const fbx_li a{nid} = fbx_mk_li(in{nid}_o, in{nid}_d, r);"
        lines.append(f"{val} const int v{nid} = fbx_valid(in{nid}_v, r); (void)a{nid}; (void)v{nid};")
    return lines


_PH = re.compile(r"\{(\w+)\}")


def _fill(template: str, mapping: dict[str, str]) -> str:
    return _PH.sub(lambda m: mapping.get(m.group(1), m.group(0)), template)


def _op_bodies(plan: Plan, abi: LayerABI) -> tuple[list[str], list[str]]:
    """Per-row C of phase 1 (scalars, sizes) and phase 2 (pool writes)."""
    p1, p2 = [], []
    for nid, o in abi.outputs.items():
        node = plan.nodes[nid]
        impl = node.impl
        m = {"id": str(nid), "err": "err"}
        for i, a in enumerate(node.args):
            m[f"a{i}"], m[f"v{i}"] = f"a{a}", f"v{a}"
        for i in range(len(impl.buffers)):
            m[f"b{i}"] = f"pb{nid}_{i}"
        valid = "1" if impl.null_rule == "handles" or not node.args else " && ".join(f"v{a}" for a in node.args)
        pre = _fill(impl.prelude, m)
        tag = f"/* op {nid}: {node.op.name} -> {node.type} */"
        if impl.kind == "expr":
            ct = T.C_TYPE[node.type]
            p1.append(f"{tag} {{ const int vv = {valid}; o{nid}_v[r] = (fbx_u8)vv; "
                      f"o{nid}_d[r] = vv ? ({ct})({_fill(impl.template, m)}) : ({ct})0; }}")
        elif impl.kind == "func":
            ct = T.C_TYPE[node.type]
            call = _fill(impl.template, {**m, "out": "&oo"})
            p1.append(f"{tag} {{ int vv = {valid}; {ct} oo = 0; if (vv) {{ {pre} vv = {call}; }} "
                      f"o{nid}_d[r] = oo; o{nid}_v[r] = (fbx_u8)vv; }}")
        elif node.type == "list<str>":
            pa, pb = o.parts
            st1 = {**m, "status": f"&o{nid}_st[r]" if impl.status else "NULL"}
            call1 = _fill(impl.template, {**st1, "ends": "NULL", "bytes": "NULL", "nbytes": "&nb"})
            p1.append(f"{tag} {{ int vv = {valid}; fbx_i64 cc = 0, nb = 0; if (vv) {{ {pre} cc = {call1}; "
                      f"if (cc < 0) {{ vv = 0; cc = 0; nb = 0; }} }} o{nid}_v[r] = (fbx_u8)vv; o{nid}_c[r] = cc; "
                      f"o{nid}_c2[r] = nb; sz[{pa}][t] = (fbx_u64)cc * 8; sz[{pb}][t] = (fbx_u64)nb; }}")
            call2 = _fill(impl.template, {**m, "status": "NULL", "ends": "(fbx_i64*)(pool + offa)",
                                          "bytes": "(pool + offb)", "nbytes": "&nb"})
            p2.append(f"{tag} if (o{nid}_c[r] > 0) {{ const fbx_u64 offa = base + sz[{pa}][t], offb = base + sz[{pb}][t]; "
                      f"fbx_i64 nb = 0; o{nid}_o[r] = (fbx_i64)offa; o{nid}_o2[r] = (fbx_i64)offb; {pre} (void)({call2}); }}")
        else:
            (pa,) = o.parts
            es = 1 if node.type == "str" else 8
            dst = "(pool + off)" if node.type == "str" else "(fbx_i64*)(pool + off)"
            call1 = _fill(impl.template, {**m, "status": f"&o{nid}_st[r]" if impl.status else "NULL", "out": "NULL"})
            p1.append(f"{tag} {{ int vv = {valid}; fbx_i64 cc = 0; if (vv) {{ {pre} cc = {call1}; "
                      f"if (cc < 0) {{ vv = 0; cc = 0; }} }} o{nid}_v[r] = (fbx_u8)vv; o{nid}_c[r] = cc; "
                      f"sz[{pa}][t] = (fbx_u64)cc * {es}; }}")
            call2 = _fill(impl.template, {**m, "status": "NULL", "out": dst})
            p2.append(f"{tag} if (o{nid}_c[r] > 0) {{ const fbx_u64 off = base + sz[{pa}][t]; "
                      f"o{nid}_o[r] = (fbx_i64)off; {pre} (void)({call2}); }}")
    return p1, p2


def kernel_name(layer: Layer) -> str:
    return f"fbx_layer_{layer.index}"


def _indent(lines: list[str], n: int) -> str:
    return "\n".join(" " * n + ln for ln in lines)


def render_layer_host(plan: Plan, layer: Layer) -> str:
    """One layer as host C: an OpenMP loop over blocks of HOST_BLOCK rows (a block plays a
    CUDA thread block; its rows run one after another, so the block's prefix sum is a loop)."""
    abi = layer_abi(plan, layer)
    p1, p2 = _op_bodies(plan, abi)
    loads = _loads(plan, abi)
    np_ = max(abi.nparts, 1)
    phase2 = ""
    if abi.nparts:
        phase2 = f"""
    fbx_u64 tot = 0;
    for (int p = 0; p < {abi.nparts}; ++p) {{
      tot = (tot + 7) & ~(fbx_u64)7;
      for (fbx_i64 t = 0; t < r1 - r0; ++t) {{ const fbx_u64 s = sz[p][t]; sz[p][t] = tot; tot += s; }}
    }}
    if (tot == 0) continue;
    const fbx_u64 base = FBX_ATOMIC_ADD_U64(head, (tot + 127) & ~(fbx_u64)127);  /* one atomic per block */
    if (base + tot > cap) {{ FBX_ATOMIC_OR_I32(err, FBX_ERR_POOL_OVERFLOW); continue; }}
    for (fbx_i64 r = r0; r < r1; ++r) {{
      const fbx_i64 t = r - r0; (void)t;
{_indent(loads, 6)}
{_indent(p2, 6)}
    }}"""
    return f"""
/* layer {layer.index}: {', '.join(plan.nodes[i].op.name for i in layer.nodes)} */
FBX_KERNEL void {kernel_name(layer)}(fbx_i64 n, void** bufs, char* pool, fbx_u64 cap, fbx_u64* head, fbx_i32* err) {{
{_indent(_bind(plan, abi), 2)}
  const fbx_i64 nblocks = (n + {HOST_BLOCK} - 1) / {HOST_BLOCK};
  (void)pool; (void)cap; (void)head; (void)err;
  #pragma omp parallel for schedule(dynamic, 4) if (nblocks >= FBX_PAR_MIN_BLOCKS)
  for (fbx_i64 blk = 0; blk < nblocks; ++blk) {{
    const fbx_i64 r0 = blk * {HOST_BLOCK}, r1 = (r0 + {HOST_BLOCK} < n) ? r0 + {HOST_BLOCK} : n;
    fbx_u64 sz[{np_}][{HOST_BLOCK}];
    (void)sz;
    for (fbx_i64 r = r0; r < r1; ++r) {{
      const fbx_i64 t = r - r0; (void)t;
{_indent(loads, 6)}
{_indent(p1, 6)}
    }}{phase2}
  }}
}}
"""


def render_layer_cuda(plan: Plan, layer: Layer) -> str:
    """One layer as a CUDA kernel: a thread per row, CUDA_BLOCK threads per block, a
    shared-memory (Hillis-Steele) prefix sum of the rows' sizes, one atomicAdd per block."""
    abi = layer_abi(plan, layer)
    p1, p2 = _op_bodies(plan, abi)
    loads = _loads(plan, abi)
    np_ = max(abi.nparts, 1)
    phase2 = ""
    if abi.nparts:
        phase2 = f"""
  fbx_u64 my[{np_}];
  for (int p = 0; p < {abi.nparts}; ++p) my[p] = sz[p][t];
  __syncthreads();
  for (int d = 1; d < {CUDA_BLOCK}; d <<= 1) {{  /* inclusive scan of each part's sizes */
    fbx_u64 x[{np_}];
    for (int p = 0; p < {abi.nparts}; ++p) x[p] = t >= d ? sz[p][t - d] : 0;
    __syncthreads();
    for (int p = 0; p < {abi.nparts}; ++p) sz[p][t] += x[p];
    __syncthreads();
  }}
  if (t == 0) {{
    fbx_u64 tot = 0;
    for (int p = 0; p < {abi.nparts}; ++p) {{ tot = (tot + 7) & ~(fbx_u64)7; s_start[p] = tot; tot += sz[p][{CUDA_BLOCK} - 1]; }}
    s_tot = tot;
    s_base = tot ? (fbx_u64)FBX_ATOMIC_ADD_U64(head, (tot + 127) & ~(fbx_u64)127) : 0;  /* one atomic per block */
    if (tot && s_base + tot > cap) FBX_ATOMIC_OR_I32(err, FBX_ERR_POOL_OVERFLOW);
  }}
  __syncthreads();
  if (s_tot == 0 || s_base + s_tot > cap || r >= n) return;
  for (int p = 0; p < {abi.nparts}; ++p) sz[p][t] = s_start[p] + sz[p][t] - my[p];  /* exclusive */
  const fbx_u64 base = s_base;
  {{
{_indent(loads, 4)}
{_indent(p2, 4)}
  }}"""
    return f"""
/* layer {layer.index}: {', '.join(plan.nodes[i].op.name for i in layer.nodes)} */
FBX_KERNEL void {kernel_name(layer)}(fbx_i64 n, void** bufs, char* pool, fbx_u64 cap, fbx_u64* head, fbx_i32* err) {{
{_indent(_bind(plan, abi), 2)}
  __shared__ fbx_u64 sz[{np_}][{CUDA_BLOCK}];
  __shared__ fbx_u64 s_start[{np_}];
  __shared__ fbx_u64 s_base, s_tot;
  (void)pool; (void)cap; (void)head; (void)err; (void)s_start; (void)s_base; (void)s_tot;
  const int t = threadIdx.x;
  const fbx_i64 r = (fbx_i64)blockIdx.x * {CUDA_BLOCK} + t;
  for (int p = 0; p < {np_}; ++p) sz[p][t] = 0;
  if (r < n) {{
{_indent(loads, 4)}
{_indent(p1, 4)}
  }}{phase2}
}}
"""


def render_module(plan: Plan, target: str, layers: list[Layer] | None = None) -> str:
    """The whole source for ``target`` (``"host"`` or ``"cuda"``): headers, user operator
    C, then one kernel per layer (by default the layers placed on that target)."""
    if target not in ("host", "cuda"):
        raise ValueError(f"target must be 'host' or 'cuda', got {target!r}")
    if layers is None:
        want = "gpu" if target == "cuda" else "cpu"
        layers = [l for l in plan.layers if l.placement == want]
    headers: list[str] = []
    sources: list[str] = []
    for l in layers:
        for nid in l.nodes:
            node = plan.nodes[nid]
            for h in node.impl.headers + node.op.headers:
                if h not in headers:
                    headers.append(h)
            if node.op.source and node.op.source not in sources:
                sources.append(node.op.source)
    render = render_layer_cuda if target == "cuda" else render_layer_host
    body = "".join(render(plan, l) for l in layers)
    return (f"/* fbrapids meta-kernels ({target}); generated, do not edit */\n"
            "/* below this many blocks a host kernel runs in one thread: waking the team costs more */\n"
            f"#define FBX_PAR_MIN_BLOCKS {PAR_MIN_BLOCKS}\n"
            + inline_headers(["ops/fbx_views.h"] + headers) + "\n" + "\n".join(sources) + body)
