"""Planning: features -> a DAG of operator nodes (common sub-expressions merged), typed,
layered by depth, and placed.

Example:
    >>> from fbrapids import ops
    >>> p = build_plan({"a": ops.hour("ts"), "b": ops.cross(ops.hour("ts"), "ts", buckets=10)}, {"ts": "i64"})
    >>> [len(layer.nodes) for layer in p.layers], p.num_ops  # hour is computed once
    ([1, 1], 2)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Mapping

from fbrapids.errors import FeatureError, OperatorError, OperatorTypeError
from fbrapids.kernels import plan_record
from fbrapids.kernels.abi import CUDA_MAX_PARTS, pool_parts
from fbrapids.kernels.expr import Call, Col, Expr, as_expr
from fbrapids.kernels.operator import Impl, Operator
from fbrapids.kernels.registry import get_operator

#: fraction of free device memory an operator's resident footprint may take on the GPU
DEVICE_BUDGET_FRACTION = 0.5


@dataclass
class Node:
    """One value in the plan: a frame column (``op is None``) or an operator's output."""

    id: int
    type: str
    expr: Expr
    op: Operator | None = None
    impl: Impl | None = None
    args: tuple[int, ...] = ()
    depth: int = 0
    placement: str = "cpu"
    reason: str = ""
    features: list[str] = field(default_factory=list)
    #: index of the node's flag in a layer kernel's skip array when it may run on the
    #: dictionary path (computed once per distinct input value; see :func:`dictionary_capable`)
    dict_slot: int | None = None

    @property
    def label(self) -> str:
        return str(self.expr)

    def operator(self) -> Operator:
        """The operator whose output the node is (an operator's node, not a column's)."""
        if self.op is None:
            raise OperatorError(f"{self.what} is an input column: it has no operator")
        return self.op

    def implementation(self) -> Impl:
        """The operator's implementation resolved for the node's argument types."""
        if self.impl is None:
            raise OperatorError(f"{self.what} is an input column: it has no implementation")
        return self.impl

    def column(self) -> str:
        """The input column's name (a column's node, not an operator's)."""
        if not isinstance(self.expr, Col):
            raise OperatorError(f"{self.what} is an operator's output, not an input column")
        return self.expr.name

    @property
    def what(self) -> str:
        """``column 'x'`` or ``sub-expression f(x)``: the node as an error message names it."""
        return _describe(self.expr)


@dataclass
class Layer:
    """Operators that depend only on earlier layers: one meta-kernel per placement."""

    index: int
    nodes: list[int]
    placement: str = "cpu"


@dataclass
class Plan:
    """A typed, layered operator DAG for one input schema."""

    nodes: list[Node]
    layers: list[Layer]
    outputs: dict[str, int]
    schema: dict[str, str]
    backend: str
    fused: bool
    #: operators may run once per distinct value (:mod:`fbrapids.kernels.dictionary`); False
    #: for the plans that run those operators over the distinct values themselves
    dictionary: bool = True

    @property
    def dictionary_nodes(self) -> list[Node]:
        """The operators that may run on the dictionary path, in skip-slot order."""
        return [n for n in self.nodes if n.dict_slot is not None]

    @property
    def num_ops(self) -> int:
        return sum(1 for n in self.nodes if n.op is not None)

    @property
    def key(self) -> str:
        h = hashlib.sha256()
        for n in self.nodes:
            h.update(repr((n.id, n.type, n.expr.key, n.placement)).encode())
            if n.op is not None:  # the code itself: an operator redefined under its name is another plan
                i = n.implementation()
                h.update(repr((i.out_type, i.kind, i.template, i.prelude, i.null_rule, i.headers, n.op.source,
                               n.op.headers)).encode())
        h.update(repr((sorted(self.outputs.items()), self.fused, self.backend, self.dictionary,
                       [(l.nodes, l.placement) for l in self.layers])).encode())
        return h.hexdigest()[:24]

    def nullable_outputs(self, nullable_columns: set[str] | frozenset[str]) -> dict[str, bool]:
        """Whether each output may hold nulls, given the input columns that may: decided by
        dtypes, never by the rows, so a result's dtype is the same on every partition and
        equals a dask frame's meta.  An operator that handles nulls itself may give null
        (``json_get``) unless it declares ``never_null`` (``fill_null``, ``lookup``); any
        other gives null where an input is null.

        Example:
            >>> from fbrapids import ops
            >>> p = build_plan({"h": ops.hour("ts"), "f": ops.fill_null("ts", 0)}, {"ts": "i64"})
            >>> p.nullable_outputs({"ts"}), p.nullable_outputs(set())
            ({'h': True, 'f': False}, {'h': False, 'f': False})
        """
        may: dict[int, bool] = {}
        for n in self.nodes:  # arguments come before their users
            if n.op is None:
                may[n.id] = n.column() in nullable_columns
            elif n.implementation().never_null:
                may[n.id] = False
            else:
                may[n.id] = n.implementation().null_rule == "handles" or any(may[a] for a in n.args)
        return {name: may[nid] for name, nid in self.outputs.items()}

    def input_columns(self) -> list[str]:
        return [n.column() for n in self.nodes if n.op is None]

    def layer_plan(self, layer: Layer) -> "Plan":
        """One layer as a plan of its own: its arguments become input columns named
        ``n<id>``, its operators' outputs are named ``n<id>`` too (ids of this plan).

        The CUDA runtime runs a CPU-placed layer this way, through the host runtime's
        public ``run``.

        Example:
            >>> from fbrapids import ops
            >>> p = build_plan({"a": ops.cross(ops.hour("ts"), "ts", buckets=10)}, {"ts": "i64"})
            >>> sub = p.layer_plan(p.layers[1])
            >>> sub.input_columns(), list(sub.outputs)
            (['n0', 'n1'], ['n2'])
        """
        args = sorted({a for nid in layer.nodes for a in self.nodes[nid].args})
        new_id = {old: i for i, old in enumerate(args)}
        nodes = [Node(i, self.nodes[old].type, Col(f"n{old}"), placement=layer.placement, reason="layer input")
                 for i, old in enumerate(args)]
        for nid in layer.nodes:
            n = self.nodes[nid]
            new_id[nid] = len(nodes)
            nodes.append(Node(len(nodes), n.type, n.expr, op=n.op, impl=n.impl,
                              args=tuple(new_id[a] for a in n.args), depth=1, placement=layer.placement,
                              reason=n.reason, features=list(n.features)))
        sub_layer = Layer(0, [new_id[nid] for nid in layer.nodes], layer.placement)
        return Plan(nodes, [sub_layer], {f"n{nid}": new_id[nid] for nid in layer.nodes},
                    {f"n{old}": self.nodes[old].type for old in args}, self.backend, self.fused)

    def node_plan(self, nid: int) -> "Plan":
        """One operator as a plan of its own, on the row path: its arguments are input
        columns ``a0``, ``a1``, ... and its output is ``out``.  The dictionary path runs
        this plan over an operator's distinct input values.

        Example:
            >>> from fbrapids import ops
            >>> p = build_plan({"c": ops.cross("u", "v", buckets=8)}, {"u": "i64", "v": "str"})
            >>> sub = p.node_plan(2)
            >>> sub.input_columns(), list(sub.outputs), sub.dictionary_nodes
            (['a0', 'a1'], ['out'], [])
        """
        n = self.nodes[nid]
        nodes = [Node(i, self.nodes[a].type, Col(f"a{i}"), placement=n.placement, reason="operator input")
                 for i, a in enumerate(n.args)]
        nodes.append(Node(len(nodes), n.type, n.expr, op=n.op, impl=n.impl, args=tuple(range(len(n.args))),
                          depth=1, placement=n.placement, reason=n.reason, features=list(n.features)))
        layer = Layer(0, [len(nodes) - 1], n.placement)
        return Plan(nodes, [layer], {"out": len(nodes) - 1}, {f"a{i}": self.nodes[a].type for i, a in enumerate(n.args)},
                    self.backend, self.fused, dictionary=False)


def _describe(e: Expr) -> str:
    return f"column {e.name!r}" if isinstance(e, Col) else f"sub-expression {e}"


def build_plan(features: Mapping[str, Expr | str], schema: dict[str, str], backend: str = "cpu", fused: bool = True,
               device_budget: int | None = None, dictionary: bool = True) -> Plan:
    """Plan ``features`` (name -> expression) over a frame with ``schema`` (column -> type).

    Args:
        features: output name -> expression (a column name is an expression too).
        schema: input column name -> kernel type name (see :mod:`fbrapids.kernels.types`).
        backend: ``"cpu"`` or ``"gpu"`` (placement only matters on the GPU).
        fused: one kernel per layer (True) or one kernel per operator (False, the baseline).
        device_budget: bytes an operator may keep resident on the device; above it the
            operator is placed on the CPU and its result copied over.
        dictionary: let the operators :func:`dictionary_capable` allows run once per
            distinct input value where a partition's values repeat (decided per run).

    Raises:
        FeatureError: naming the feature, the operator and the column at fault.
    """
    nodes: list[Node] = []
    index: dict[tuple, int] = {}

    def mark(nid: int, feature: str) -> None:
        node = nodes[nid]
        if feature not in node.features:
            node.features.append(feature)
            for a in node.args:
                mark(a, feature)

    def visit(e: Expr, feature: str) -> int:
        if e.key in index:
            mark(index[e.key], feature)
            return index[e.key]
        if isinstance(e, Col):
            if e.name not in schema:
                raise FeatureError(f"feature {feature!r}: column {e.name!r} is not in the frame "
                                   f"(columns: {', '.join(schema)})")
            if schema[e.name] is None:
                raise FeatureError(f"feature {feature!r}: column {e.name!r} has a dtype the kernels cannot read")
            node = Node(len(nodes), schema[e.name], e, features=[feature])
        elif isinstance(e, Call):
            args = tuple(visit(a, feature) for a in e.args)
            try:
                op = get_operator(e.op)
                in_types = tuple(nodes[a].type for a in args)
                impl = op.resolve(in_types, e.param_dict())
            except (OperatorTypeError, OperatorError) as exc:  # named with the inputs: the columns at fault
                cols = ", ".join(f"input {i} is {_describe(a)} of type {nodes[args[i]].type}" for i, a in enumerate(e.args))
                raise FeatureError(f"feature {feature!r}: {exc} ({cols})") from exc
            depth = 1 + max((nodes[a].depth for a in args), default=0)
            node = Node(len(nodes), impl.out_type, e, op=op, impl=impl, args=args, depth=depth, features=[feature])
        else:
            raise FeatureError(f"feature {feature!r}: not an expression: {e!r}")
        nodes.append(node)
        index[e.key] = node.id
        return node.id

    outputs = {}
    for name, e in features.items():
        try:
            expr = as_expr(e)
        except TypeError as exc:
            raise FeatureError(f"feature {name!r}: {exc}") from exc
        outputs[name] = visit(expr, name)

    _place(nodes, backend, device_budget)
    if dictionary:
        slot = 0
        for n in nodes:
            if dictionary_capable(n, nodes):
                n.dict_slot, slot = slot, slot + 1
    layers = _layer(nodes, fused)
    plan_record.record(features, schema, fused, dictionary)  # with $FBRAPIDS_PLAN_RECORD set only
    return Plan(nodes, layers, outputs, dict(schema), backend, fused, dictionary)


def dictionary_capable(node: Node, nodes: list[Node]) -> bool:
    """Whether ``node`` may run on the dictionary path: its operator declares one
    (:class:`~fbrapids.kernels.operator.DictionaryPath`: ``hash``, ``hash_bucket``,
    ``lookup`` and ``cross`` of scalar inputs, ``split`` of a string, ``ngrams`` of a token
    list) and its inputs' types are ones it takes there.  Each is a pure function of its
    inputs' values, so computing it once per distinct value and scattering the results
    gives the row path's output bit for bit.

    Example:
        >>> from fbrapids import ops
        >>> p = build_plan({"a": ops.hash_bucket("u", 8), "b": ops.log1p("u")}, {"u": "i64"})
        >>> [n.op.name for n in p.dictionary_nodes]
        ['hash_bucket']
    """
    if node.op is None or node.op.dictionary is None:
        return False
    return node.op.dictionary.allows([nodes[a].type for a in node.args])


def _place(nodes: list[Node], backend: str, device_budget: int | None) -> None:
    for n in nodes:
        if n.op is None:
            n.placement, n.reason = backend, "input column"
        elif backend != "gpu":
            n.placement, n.reason = "cpu", "CPU backend"
        elif device_budget is not None and n.implementation().footprint > device_budget:
            n.placement = "cpu"
            n.reason = (f"footprint {n.implementation().footprint:,} B > device budget {device_budget:,} B "
                        f"({DEVICE_BUDGET_FRACTION:.0%} of free device memory): runs on the host, result copied to the device")
        else:
            footprint = n.implementation().footprint
            fp = f"footprint {footprint:,} B fits" if footprint else "no resident footprint"
            n.placement, n.reason = "gpu", fp


def _layer(nodes: list[Node], fused: bool) -> list[Layer]:
    ops = [n for n in nodes if n.op is not None]
    layers: list[Layer] = []
    if not fused:
        for n in sorted(ops, key=lambda n: (n.depth, n.id)):
            layers.append(Layer(len(layers), [n.id], n.placement))
        return layers
    for d in sorted({n.depth for n in ops}):
        for placement in ("gpu", "cpu"):
            ids = [n.id for n in ops if n.depth == d and n.placement == placement]
            for chunk in (_by_parts(ids, nodes) if placement == "gpu" else [ids] if ids else []):
                layers.append(Layer(len(layers), chunk, placement))
    return layers


def _by_parts(ids: list[int], nodes: list[Node], limit: int = CUDA_MAX_PARTS) -> list[list[int]]:
    """Operators of one depth cut into runs of at most ``limit`` pool parts: one CUDA kernel
    each (a kernel's shared memory grows by 1 KiB per part and ptxas refuses 48 KiB)."""
    runs: list[list[int]] = []
    parts = 0
    for i in ids:
        p = pool_parts(nodes[i].type)
        if not runs or parts + p > limit:
            runs.append([])
            parts = 0
        runs[-1].append(i)
        parts += p
    return runs
