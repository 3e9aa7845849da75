"""Render a plan's layers as meta-kernels: CUDA (``extern "C" __global__``) or host C
(OpenMP over blocks of rows).  One source text per target; the operators' device
functions and the per-row bodies are the same text for both, only the scaffold around
them (and ``fbx_target.h``'s macros) differ -- the way tinygrad's ``renderer/cstyle.py``
renders one IR for several targets.

Each layer kernel takes ``(n, bufs, pool, cap, head, err)``; :mod:`fbrapids.kernels.abi`
owns the slot layout of ``bufs``, the error bits and the key limit.  Variable-length
outputs follow the paper's Algorithm 1: every row (thread) computes its sizes, the block
prefix-sums them, ONE atomic add on ``head`` reserves the block's 128-byte aligned share of
``pool``, and the rows write at base + prefix.  A block that would pass ``cap`` sets
``FBX_ERR_POOL_OVERFLOW`` in ``err`` instead of writing; the host grows the pool and runs
the layer again.

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

from fbrapids.errors import OperatorError
from fbrapids.kernels import types as T
from fbrapids.kernels.abi import (
    CUDA_BLOCK,
    CUDA_MAX_PARTS,
    HOST_LAYOUT,
    InputLayout,
    LayerABI,
    cuda_shared_bytes,
    input_slots,
    layer_abi,
    output_slots,
)
from fbrapids.kernels.headers import inline_headers
from fbrapids.kernels.plan import Layer, Plan

HOST_BLOCK = 256
PAR_MIN_BLOCKS = 16  # host kernels over fewer blocks (4096 rows) run single-threaded
HOST_OPS_PER_LOOP = 8  # operators per row loop of a host block (phase 1)

#: C declaration of each input slot: (variable suffix, C type); offsets take the layout's width
_IN_DECL = {"data": ("_d", None), "valid": ("_v", "const fbx_u8*"), "bytes": ("_b", "const char*"),
            "offsets": ("_o", "offsets"), "str_offsets": ("_so", "str_offsets")}
_OUT_DECL = {"data": "_d", "valid": "_v", "off": "_o", "cnt": "_c", "off2": "_o2", "cnt2": "_c2"}


def _bind(plan: Plan, abi: LayerABI, layouts: dict[int, InputLayout]) -> list[str]:
    lines = []
    for nid, first in abi.inputs.items():
        t = plan.nodes[nid].type
        lay = layouts.get(nid, HOST_LAYOUT)
        parts = []
        for i, name in enumerate(input_slots(t)):
            if name == "valid_bit":
                parts.append(f"const fbx_i64 in{nid}_vb = (fbx_i64)(fbx_u64)bufs[{first + i}];")
                continue
            suffix, ct = _IN_DECL[name]
            if ct is None:  # values: the column's type, or int64 list elements
                ct = f"const {T.C_TYPE[t]}*" if t in T.FIXED_TYPES else "const fbx_i64*"
            elif ct in ("offsets", "str_offsets"):
                ct = f"const {lay.c_type(ct)}*"
            parts.append(f"{ct} in{nid}{suffix} = ({ct})bufs[{first + i}];")
        lines.append(" ".join(parts))
    for nid, o in abi.outputs.items():
        parts = []
        for i, name in enumerate(output_slots(o.type)):
            ct = T.C_TYPE[o.type] if name == "data" else "fbx_u8" if name == "valid" else "fbx_i64"
            parts.append(f"{ct}* o{nid}{_OUT_DECL[name]} = ({ct}*)bufs[{o.first + i}];")
        lines.append(" ".join(parts))
        if o.status is not None:
            lines.append(f"fbx_i8* o{nid}_st = (fbx_i8*)bufs[{o.status}];")
        for i, b in enumerate(o.buffers):
            lines.append(f"const void* pb{nid}_{i} = (const void*)bufs[{b}];")
    if abi.skip is not None:  # operators the runtime computes once per distinct value instead
        lines.append(f"const fbx_u8* skip = (const fbx_u8*)bufs[{abi.skip}]; (void)skip;")
        for nid in abi.outputs:
            slot = plan.nodes[nid].dict_slot
            if slot is not None:
                lines.append(f"const int sk{nid} = skip != NULL && skip[{slot}];")
    return lines


def _loads(plan: Plan, abi: LayerABI, layouts: dict[int, InputLayout]) -> list[str]:
    lines = []
    for nid in abi.inputs:
        t = plan.nodes[nid].type
        lay = layouts.get(nid, HOST_LAYOUT)
        rng = f"(fbx_i64)in{nid}_o[r], (fbx_i64)in{nid}_o[r + 1]"
        if t in T.FIXED_TYPES:
            val = f"const {T.C_TYPE[t]} a{nid} = in{nid}_d[r];"
        elif t == "str":
            val = f"const fbx_str a{nid} = fbx_str_at(in{nid}_b, {rng});"
        elif t == "list<str>":
            so = (f"NULL, (const fbx_i32*)in{nid}_so" if lay.str_offsets == 4
                  else f"(const fbx_i64*)in{nid}_so, NULL")
            val = f"const fbx_ls a{nid} = fbx_ls_at({so}, in{nid}_b, {rng});"
        else:
            val = f"const fbx_li a{nid} = fbx_li_at(in{nid}_d, {rng});"
        lines.append(f"{val} const int v{nid} = fbx_valid(in{nid}_v, in{nid}_vb + r); (void)a{nid}; (void)v{nid};")
    return lines


_PH = re.compile(r"\{(\w+)\}")


def _fill(template: str, mapping: dict[str, str]) -> str:
    return _PH.sub(lambda m: mapping.get(m.group(1), m.group(0)), template)


def _op_bodies(plan: Plan, abi: LayerABI) -> tuple[list[str], list[str]]:
    """Per-row C of phase 1 (scalars, sizes) and phase 2 (pool writes)."""
    p1, p2 = [], []
    for nid, o in abi.outputs.items():
        node = plan.nodes[nid]
        impl = node.implementation()
        m = {"id": str(nid), "err": "err"}
        for i, a in enumerate(node.args):
            m[f"a{i}"], m[f"v{i}"] = f"a{a}", f"v{a}"
        for i in range(len(impl.buffers)):
            m[f"b{i}"] = f"pb{nid}_{i}"
        valid = "1" if impl.null_rule == "handles" or not node.args else " && ".join(f"v{a}" for a in node.args)
        pre = _fill(impl.prelude, m)
        tag = f"/* op {nid}: {node.operator().name} -> {node.type} */"
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
            # {scratch}: a row's int64 the size phase may leave for the write phase (in the
            # offset slot, which the write phase reads before it puts the row's offset there)
            call1 = _fill(impl.template, {**m, "status": f"&o{nid}_st[r]" if impl.status else "NULL", "out": "NULL",
                                          "scratch": f"&o{nid}_o[r]"})
            p1.append(f"{tag} {{ int vv = {valid}; fbx_i64 cc = 0; if (vv) {{ {pre} cc = {call1}; "
                      f"if (cc < 0) {{ vv = 0; cc = 0; }} }} o{nid}_v[r] = (fbx_u8)vv; o{nid}_c[r] = cc; "
                      f"sz[{pa}][t] = (fbx_u64)cc * {es}; }}")
            call2 = _fill(impl.template, {**m, "status": "NULL", "out": dst, "scratch": "&scr"})
            scr = f"fbx_i64 scr = o{nid}_o[r]; " if "{scratch}" in impl.template else ""
            p2.append(f"{tag} if (o{nid}_c[r] > 0) {{ const fbx_u64 off = base + sz[{pa}][t]; "
                      f"{scr}o{nid}_o[r] = (fbx_i64)off; {pre} (void)({call2}); }}")
        if node.dict_slot is not None:  # on the dictionary path: no values, no pool bytes
            zero = "" if not T.is_var(node.type) else (
                f"o{nid}_c[r] = 0; " + "".join(f"sz[{part}][t] = 0; " for part in o.parts)
                + (f"o{nid}_c2[r] = 0; " if node.type == "list<str>" else ""))
            p1[-1] = f"if (sk{nid}) {{ {zero}}} else {p1[-1]}"
    return p1, p2


def kernel_name(layer: Layer) -> str:
    return f"fbx_layer_{layer.index}"


def _indent(lines: list[str], n: int) -> str:
    return "\n".join(" " * n + ln for ln in lines)


def _op_major_phase1(plan: Plan, abi: LayerABI, loads: list[str], p1: list[str]) -> str:
    """Phase 1 of a host block: one loop over the block's rows per group of HOST_OPS_PER_LOOP
    operators, each loop loading only its operators' inputs.  Operators of one layer are
    independent, so the results are those of one row loop over every operator; but one row
    loop over hundreds of operators writes as many output streams per row, each on its own
    page (TLB misses bound it: the fused synthetic plan ran no faster than one launch per
    operator), while a loop over a few operators streams a few buffers.  Groups, rather than
    a loop per operator, keep gcc's compile time of a 1,000-operator layer where it was."""
    by_input = dict(zip(abi.inputs, loads))
    ops = list(zip(abi.outputs, p1))
    loops = []
    for g in range(0, len(ops), HOST_OPS_PER_LOOP):
        group = ops[g: g + HOST_OPS_PER_LOOP]
        args = list(dict.fromkeys(a for nid, _ in group for a in plan.nodes[nid].args))
        mine = [by_input[a] for a in args] if all(a in by_input for a in args) else loads
        loops.append(f"for (fbx_i64 r = r0; r < r1; ++r) {{\n  const fbx_i64 t = r - r0; (void)t;\n"
                     f"{_indent(mine, 2)}\n{_indent([body for _, body in group], 2)}\n}}")
    return _indent("\n".join(loops).splitlines(), 4)


def render_layer_host(plan: Plan, layer: Layer, layouts: dict[int, InputLayout] | None = None) -> str:
    """One layer as host C: an OpenMP loop over blocks of HOST_BLOCK rows (a block plays a
    CUDA thread block; its rows run one after another, so the block's prefix sum is a loop).
    Within a block, phase 1 runs operator by operator (:func:`_op_major_phase1`)."""
    layouts = layouts or {}
    abi = layer_abi(plan, layer)
    p1, p2 = _op_bodies(plan, abi)
    loads = _loads(plan, abi, layouts)
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
/* layer {layer.index}: {', '.join(plan.nodes[i].operator().name for i in layer.nodes)} */
FBX_KERNEL void {kernel_name(layer)}(fbx_i64 n, void** bufs, char* pool, fbx_u64 cap, fbx_u64* head, fbx_i32* err) {{
{_indent(_bind(plan, abi, layouts), 2)}
  const fbx_i64 nblocks = (n + {HOST_BLOCK} - 1) / {HOST_BLOCK};
  (void)pool; (void)cap; (void)head; (void)err;
  #pragma omp parallel for schedule(dynamic, 4) if (nblocks >= FBX_PAR_MIN_BLOCKS)
  for (fbx_i64 blk = 0; blk < nblocks; ++blk) {{
    const fbx_i64 r0 = blk * {HOST_BLOCK}, r1 = (r0 + {HOST_BLOCK} < n) ? r0 + {HOST_BLOCK} : n;
    fbx_u64 sz[{np_}][{HOST_BLOCK}];
    (void)sz;
{_op_major_phase1(plan, abi, loads, p1)}{phase2}
  }}
}}
"""


def render_layer_cuda(plan: Plan, layer: Layer, layouts: dict[int, InputLayout] | None = None) -> str:
    """One layer as a CUDA kernel: a thread per row, CUDA_BLOCK threads per block, a
    shared-memory (Hillis-Steele) prefix sum of the rows' sizes, one atomicAdd per block."""
    layouts = layouts or {}
    abi = layer_abi(plan, layer)
    if abi.nparts > CUDA_MAX_PARTS:  # the planner splits such layers (plan.py): a plan made by hand
        raise OperatorError(f"layer {layer.index} has {abi.nparts} pool parts; a CUDA layer kernel takes at most "
                            f"{CUDA_MAX_PARTS} ({cuda_shared_bytes(abi.nparts):,} B of shared memory)")
    p1, p2 = _op_bodies(plan, abi)
    loads = _loads(plan, abi, layouts)
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
/* layer {layer.index}: {', '.join(plan.nodes[i].operator().name for i in layer.nodes)} */
FBX_KERNEL void {kernel_name(layer)}(fbx_i64 n, void** bufs, char* pool, fbx_u64 cap, fbx_u64* head, fbx_i32* err) {{
{_indent(_bind(plan, abi, layouts), 2)}
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


def render_module(plan: Plan, target: str, layers: list[Layer] | None = None,
                  layouts: dict[int, InputLayout] | None = None) -> str:
    """The whole source for ``target`` (``"host"`` or ``"cuda"``): headers, user operator
    C, then one kernel per layer (by default the layers placed on that target).

    ``layouts`` gives the offset widths of input nodes whose offsets are not int64 (cudf
    columns on the device); by default every input has the host layout.
    """
    if target not in ("host", "cuda"):
        raise OperatorError(f"target must be 'host' or 'cuda', got {target!r}")
    if layers is None:
        want = "gpu" if target == "cuda" else "cpu"
        layers = [l for l in plan.layers if l.placement == want]
    headers: list[str] = []
    sources: list[str] = []
    for l in layers:
        for nid in l.nodes:
            node = plan.nodes[nid]
            op = node.operator()
            for h in node.implementation().headers + op.headers:
                if h not in headers:
                    headers.append(h)
            if op.source and op.source not in sources:
                sources.append(op.source)
    render = render_layer_cuda if target == "cuda" else render_layer_host
    body = "".join(render(plan, l, layouts) for l in layers)
    return (f"/* fbrapids meta-kernels ({target}); generated, do not edit */\n"
            "/* below this many blocks a host kernel runs in one thread: waking the team costs more */\n"
            f"#define FBX_PAR_MIN_BLOCKS {PAR_MIN_BLOCKS}\n"
            + inline_headers(["ops/fbx_views.h"] + headers) + "\n" + "\n".join(sources) + body)
