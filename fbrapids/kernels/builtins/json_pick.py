"""``json_pick``: the string ``json_scan`` found for one of its paths
(:mod:`fbrapids.views.json_fields` writes these calls).

Example:
    >>> OPERATOR.resolve(("str", "i64"), {"group": 2, "index": 1, "path": "b.c"}).out_type
    'str'
"""

from __future__ import annotations

from fbrapids.errors import OperatorError
from fbrapids.kernels import params as P
from fbrapids.kernels.builtins._shared import COUNT, H_JSON, JSON_SCAN_PATHS, builtin, json_path
from fbrapids.kernels.operator import Impl


def _resolve(t, p):
    group, index = int(p["group"]), int(p["index"])
    if not index < group <= JSON_SCAN_PATHS:
        raise OperatorError(f"json_pick: needs 0 <= index < group <= {JSON_SCAN_PATHS}, got index {index}, group {group}")
    path = json_path(p, "json_pick")
    return Impl("str", "var", f"fbx_json_pick({{a0}}, {{a1}}, {index}, {group}, {path}, {{status}}, {{out}}, {{scratch}})",
                status=bool(p.get("with_status", False)))


OPERATOR = builtin("json_pick", ("str", "int"), "The string json_scan (the second input, over the same document, of "
                   "`group` paths) found for its path number `index`, which is `path` (walked again only when its "
                   "offset did not fit).", _resolve,
                   null_rule="null when either input is null, or json_scan's status for the path is not 0",
                   headers=(H_JSON,), family="json", params={"group": P.integer(lo=1), "index": COUNT})
