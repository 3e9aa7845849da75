"""A record of the plans a run builds, for compiling their kernels ahead of a device.

With ``$FBRAPIDS_PLAN_RECORD`` naming a file, every :func:`~fbrapids.kernels.plan.build_plan`
call of the process (and of the processes it starts with the variable set) appends what
the plan was built from: the features, the input schema, ``fused`` and ``dictionary``.
``scripts/gpu_kernels.py`` runs the CPU twins of the device check's steps recording, then
builds each recorded plan for the GPU and compiles its CUDA modules into the kernel cache
(``make gpu-kernels``): the plans depend on the features and the schema, not on the device.

Records are pickles, length-prefixed, appended under an exclusive lock; features that do
not pickle (an operator defined inside a test function) are counted as skipped.

Example:
    >>> import os, tempfile
    >>> from fbrapids import ops
    >>> path = os.path.join(tempfile.mkdtemp(), "plans")
    >>> record({"h": ops.hour("ts")}, {"ts": "i64"}, True, True, path)
    >>> [sorted(r["schema"]) for r in read_records(path)]
    [['ts']]
"""

from __future__ import annotations

import fcntl
import logging
import os
import pickle
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping

if TYPE_CHECKING:  # (annotations only)
    from fbrapids.kernels.expr import Expr

ENV_VAR = "FBRAPIDS_PLAN_RECORD"

log = logging.getLogger(__name__)

#: records this process could not pickle
skipped = {"plans": 0}


def record(features: Mapping[str, Expr | str], schema: dict[str, str], fused: bool, dictionary: bool,
           path: str | os.PathLike | None = None) -> None:
    """Append one plan's inputs to ``path`` (default ``$FBRAPIDS_PLAN_RECORD``; unset: nothing)."""
    path = path if path is not None else os.environ.get(ENV_VAR)
    if not path:
        return
    try:
        blob = pickle.dumps({"features": dict(features), "schema": dict(schema), "fused": bool(fused),
                             "dictionary": bool(dictionary)})
    except Exception as exc:  # noqa: BLE001 - a local operator, a lambda: not recordable, counted
        skipped["plans"] += 1
        log.debug("plan not recorded: %s", exc)
        return
    with open(path, "ab") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.write(struct.pack("<Q", len(blob)) + blob)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def read_records(path: str | os.PathLike) -> Iterator[dict[str, object]]:
    """The records in ``path``, in order (a torn last record, from a killed process, is left out)."""
    data = Path(path).read_bytes()
    at = 0
    while at + 8 <= len(data):
        (n,) = struct.unpack_from("<Q", data, at)
        if at + 8 + n > len(data):
            return
        yield pickle.loads(data[at + 8 : at + 8 + n])
        at += 8 + n
