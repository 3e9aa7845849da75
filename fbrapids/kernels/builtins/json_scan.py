"""``json_scan``: one strict-JSON walk for up to four paths, their codes packed in an int64
(what ``json_pick`` reads; :mod:`fbrapids.views.json_fields` writes these calls).

Example:
    >>> OPERATOR.resolve(("str",), {"paths": ("a", "b.c")}).out_type
    'i64'
"""

from __future__ import annotations

from fbrapids.errors import OperatorError
from fbrapids.kernels.builtins._shared import H_JSON, JSON_SCAN_PATHS, builtin, json_path
from fbrapids.kernels.clit import c_string
from fbrapids.kernels.operator import Impl


def _resolve(t, p):
    paths = p.get("paths")
    if not isinstance(paths, tuple) or not 1 <= len(paths) <= JSON_SCAN_PATHS:
        raise OperatorError(f"json_scan: paths must be a tuple of 1 to {JSON_SCAN_PATHS} paths, got {paths!r}")
    for path in paths:
        json_path({"path": path}, "json_scan")
    lens = ", ".join(f"{len(q.encode())}" for q in paths)
    segs = ", ".join(f"{q.count('.') + 1}" for q in paths)
    return Impl("i64", "func", f"fbx_json_scan({{a0}}, {c_string(''.join(paths))}, pl{{id}}, ps{{id}}, {len(paths)}, {{out}})",
                prelude=f"const fbx_i64 pl{{id}}[{len(paths)}] = {{{lens}}}; const fbx_i64 ps{{id}}[{len(paths)}] = {{{segs}}};")


OPERATOR = builtin("json_scan", ("str",), "One strict-JSON walk for 1 to 4 dotted `paths` at once: their codes "
                   "packed in an int64, 64 / len(paths) bits each, (offset of the string value << 3) | status (0 "
                   "found, 1 malformed, 2 missing, 3 not a string, 4 too deep, 7 offset too large for the code), what "
                   "json_pick reads.", _resolve, headers=(H_JSON,), family="json")
