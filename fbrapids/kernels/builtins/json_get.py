"""``json_get``: the string at a dotted path of a strict JSON document."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import H_JSON, ExprLike, builtin, call, json_path
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import Impl


def json_get(x: ExprLike, path: str) -> Call:
    """The string at the dotted ``path`` of a strict JSON document (RFC 8259, the whole
    text one value; WORKLOAD.md section 3). Null rule: null when the input is null, does
    not parse, lacks the path, or holds a non-string there.

    Example:
        >>> str(json_get("ctx", "device.os"))
        "json_get(ctx, path='device.os')"
    """
    return call("json_get", x, path=path)


def _resolve(t, p):
    path = json_path(p, "json_get")
    return Impl("str", "var", f"fbx_json_get({{a0}}, {path}, {{status}}, {{out}}, {{scratch}})",
                status=bool(p.get("with_status", False)))


OPERATOR = builtin("json_get", ("str",), "The string at a dotted `path` of a strict JSON document (WORKLOAD.md "
                   "section 3).", _resolve,
                   null_rule="null when the input is null, malformed, lacks the path, or holds a non-string there",
                   headers=(H_JSON,), family="json", builder=json_get)
