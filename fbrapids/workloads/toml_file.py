"""A :class:`~fbrapids.workloads.Workload` read from a TOML file.

The file's layout (every error names the field and the file)::

    name = "taobao"
    root = "../shared/data"         # view paths are under it (relative: to this file's folder)
    label = "clk"
    time = "ts"                     # optional
    time_form = "s"                 # optional: s | ms | us | ns | datetime | iso8601 | "%y%m%d%H" ...
    group = "userid"                # optional: GAUC's groups
    item_view = "ad"                # optional: the served candidates' view

    [split]
    rule = "files"                  # at | last_day | fraction | files
    files = ["taobao_tiny_test.csv"]

    [[views]]                       # the first view is the log
    name = "log"
    path = "taobao_tiny_train.csv"
    options = { columns = ["clk", "userid", "adgroup_id"] }   # read_view's keyword arguments
    clean = { fill = { pid = "" } }                           # .fbx.clean's

    [[joins]]
    view = "user"
    on = "userid"
    how = "left"
    fill = { age_level = -1 }

    [features]
    sparse = ["userid", "adgroup_id", "pid_h"]
    dense = ["price_log"]

    # dataset = "criteo"            # optional: a registered data set's features extracted too
    [features.extract]              # name = an fbrapids.ops expression, as text
    pid_h = 'ops.hash_bucket("pid", 1024)'

    [sequences.hist]                # for DIN
    target = "cate_id"
    expression = 'ops.history("userid", "cate_id", "ts", last_n=20)'

Example:
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "w.toml"
    >>> _ = p.write_text('label = "click"\\nsplit = {rule = "fraction", fraction = 0.2}\\n'
    ...                  '[[views]]\\nname = "log"\\npath = "log.csv"\\n[features]\\nsparse = ["user"]\\n')
    >>> w = load_workload(p)
    >>> w.label, w.sparse, w.root == str(p.parent)
    ('click', ('user',), True)
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from fbrapids.errors import WorkloadError
from fbrapids.workloads.dataset_registry import dataset
from fbrapids.workloads.expressions import parse_expression
from fbrapids.workloads.spec import Join, SequenceFeature, Split, View, Workload

if TYPE_CHECKING:  # (annotations only)
    from fbrapids.ops import ExprLike

#: the fields a workload file may hold (docs/workloads.md lists each; a test checks it)
TOP = {"name", "root", "label", "time", "time_form", "group", "item_view", "split", "views", "joins", "features",
       "sequences"}
FEATURES = {"sparse", "dense", "extract", "dataset"}  #: the fields of ``[features]``
SEQUENCE = {"target", "expression"}  #: the fields of ``[sequences.NAME]``


def _table(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise WorkloadError(f"{where} must be a table, got {value!r}")
    return dict(value)


def _build(cls: type, data: Mapping[str, Any], where: str) -> Any:
    import dataclasses

    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise WorkloadError(f"{where}: unknown field(s) {unknown}; known: {sorted(known)}")
    try:
        return cls(**data)
    except WorkloadError as e:
        raise WorkloadError(f"{where}: {e}") from None
    except TypeError as e:
        raise WorkloadError(f"{where}: {e}") from None


def _dataset_features(name: str, source: str) -> dict[str, ExprLike]:
    """The features of the data set registered as ``name`` (:mod:`fbrapids.workloads.dataset_registry`:
    a public log's preprocessing, e.g. ``"criteo"``)."""
    try:
        return dict(dataset(name).features())
    except WorkloadError as e:
        raise WorkloadError(f"{source}: features.dataset: {e}") from None


def workload_from_dict(data: Mapping[str, Any], source: str = "<dict>", root: str | os.PathLike | None = None) -> Workload:
    """A :class:`Workload` from the parsed TOML ``data`` (module docstring); ``source`` names
    it in errors; ``root``: relative view paths (and a relative ``root`` field) are under it."""
    data = dict(data)
    unknown = sorted(set(data) - TOP)
    if unknown:
        raise WorkloadError(f"{source}: unknown field(s) {unknown}; known: {sorted(TOP)}")
    for req in ("label", "views"):
        if req not in data:
            raise WorkloadError(f"{source}: {req} is missing")
    if not isinstance(data["views"], list):
        raise WorkloadError(f"{source}: views must be an array of tables ([[views]])")
    views = [_build(View, _table(v, f"{source}: views[{i}]"), f"{source}: views[{i}]")
             for i, v in enumerate(data["views"])]
    joins = [_build(Join, _table(j, f"{source}: joins[{i}]"), f"{source}: joins[{i}]")
             for i, j in enumerate(data.get("joins", []))]
    split = _build(Split, _table(data.get("split", {}), f"{source}: split"), f"{source}: split")
    feats = _table(data.get("features", {}), f"{source}: features")
    extra = sorted(set(feats) - FEATURES)
    if extra:
        raise WorkloadError(f"{source}: features: unknown field(s) {extra}; known: {sorted(FEATURES)}")
    extract = _dataset_features(feats["dataset"], source) if "dataset" in feats else {}
    extract.update({n: parse_expression(t, where=f"{source}: features.extract.{n}")
                    for n, t in _table(feats.get("extract", {}), f"{source}: features.extract").items()})
    seqs = {}
    for n, s in _table(data.get("sequences", {}), f"{source}: sequences").items():
        s = _table(s, f"{source}: sequences.{n}")
        extra = sorted(set(s) - SEQUENCE)
        if extra:
            raise WorkloadError(f"{source}: sequences.{n}: unknown field(s) {extra}; known: {sorted(SEQUENCE)}")
        if "target" not in s:
            raise WorkloadError(f"{source}: sequences.{n}: target is missing")
        expr = s.get("expression")
        seqs[n] = SequenceFeature(s["target"], None if expr is None
                                  else parse_expression(expr, where=f"{source}: sequences.{n}.expression"))
    base = Path(root) if root is not None else None
    r = data.get("root")
    if r is not None:
        r = str(Path(r) if Path(r).is_absolute() or base is None else base / r)
    elif base is not None:
        r = str(base)
    try:
        return Workload(views=tuple(views), label=data["label"], split=split, time=data.get("time"), group=data.get("group"),
                        time_form=data.get("time_form"), item_view=data.get("item_view"),
                        joins=tuple(joins), features=extract, sparse=feats.get("sparse", ()), dense=feats.get("dense", ()),
                        sequences=seqs, root=r, name=str(data.get("name", Path(source).stem)), source=source)
    except WorkloadError as e:
        raise WorkloadError(f"{source}: {e}") if source not in str(e) else e from None


def load_workload(path: str | os.PathLike, root: str | os.PathLike | None = None) -> Workload:
    """The workload a TOML file declares (module docstring); relative paths in it are under
    its folder, or under ``root`` when given (the ``root`` field is then ignored).

    Raises:
        WorkloadError: the file is missing, not TOML, or declares a bad workload (naming
            the field and the file).
    """
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(f"workload file {str(p)!r} not found")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise WorkloadError(f"{p}: not valid TOML ({e})") from e
    if root is not None:
        data.pop("root", None)
        return workload_from_dict(data, source=str(p), root=root)
    return workload_from_dict(data, source=str(p), root=p.resolve().parent)
