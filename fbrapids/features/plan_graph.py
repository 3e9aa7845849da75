"""A feature plan drawn as a layered graph (SVG), laid out by code.

Rows are the plan's layers (the frame's input columns on top, then one row per
meta-kernel layer); each operator is a box coloured by its kind (hash, cross, string,
list, JSON, lookup, scalar, custom) and outlined by its placement (device or host).  An
operator several features share is drawn once, with a dashed outline and the number of
features that use it: the common sub-expressions the planner computes once.

The layout is computed, never hand-placed: rows from the plan's layers, the order within
a row by the barycenter heuristic (each box moved towards the mean position of the boxes
it reads from, then of those reading from it, a few sweeps), evenly spaced, edges from
each argument's box to its consumer's.

Example:
    >>> import pandas as pd
    >>> from fbrapids import ops
    >>> from fbrapids.features import plan_for
    >>> plan = plan_for(pd.DataFrame({"q": ["a b"]}), {"t": ops.split("q", " "), "n": ops.length(ops.split("q", " "))})
    >>> g = plan_graph(plan)
    >>> [(n.label, n.row, n.shared) for n in g.nodes]
    [('q', 0, 2), ("split(q, sep=' ', buckets=None)", 1, 2), ("length(split(q, sep=' ', buckets=None))", 2, 1)]
    >>> svg = to_svg(g)
    >>> svg.count('class="node'), svg.count('class="edge"')
    (3, 2)
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.kernels import Expr, Plan

KIND_COLORS = {
    "input": "#eeeeee", "hash": "#f4b183", "cross": "#ffd966", "string": "#a9d18e", "list": "#9dc3e6",
    "json": "#c5a3d9", "lookup": "#f8cbad", "scalar": "#d9d9d9", "custom": "#ff9999",
}
PLACEMENT_STROKES = {"gpu": "#2e7d32", "cpu": "#1f4e79", "input": "#7f7f7f", "unplanned": "#999999"}
PLACEMENT_NAMES = {"gpu": "device (CUDA)", "cpu": "host (C/OpenMP)", "input": "frame column",
                   "unplanned": "placed when a frame is planned"}
BOX_W, BOX_H, GAP_X, GAP_Y, LEFT, TOP = 160, 38, 16, 46, 110, 30


@dataclass
class GraphNode:
    """One box: a frame column or an operator of the plan."""

    id: int
    label: str
    kind: str
    placement: str
    row: int
    args: tuple[int, ...] = ()
    features: list[str] = field(default_factory=list)
    type: str = ""

    @property
    def shared(self) -> int:
        """How many features use this value (more than one: a shared sub-expression)."""
        return len(self.features)


@dataclass
class Graph:
    """The boxes, the row names and, after :func:`layout`, each box's position."""

    nodes: list[GraphNode]
    rows: list[str]
    pos: dict[int, tuple[float, float]] = field(default_factory=dict)
    outputs: dict[str, int] = field(default_factory=dict)


def operator_kind(op: object) -> str:
    """An operator's family, for colouring: what it declares (``hash``, ``cross``,
    ``string``, ``list``, ``json``, ``lookup``, ``scalar`` for numbers and time; ``custom``
    for operators a user registered).

    Example:
        >>> from fbrapids.kernels import get_operator
        >>> operator_kind(get_operator("cross")), operator_kind(get_operator("hour"))
        ('cross', 'scalar')
    """
    family = str(getattr(op, "family", "custom"))
    return family if family in KIND_COLORS else "custom"


def plan_graph(plan: Plan) -> Graph:
    """The graph of a :class:`~fbrapids.kernels.plan.Plan` (input columns in row 0, layer
    ``i`` in row ``i + 1``), laid out."""
    row_of: dict[int, int] = {}
    rows = ["frame columns"]
    for layer in plan.layers:
        rows.append(f"layer {layer.index} [{layer.placement}]")
        for nid in layer.nodes:
            row_of[nid] = layer.index + 1
    nodes = []
    for n in plan.nodes:
        if n.op is None:
            nodes.append(GraphNode(n.id, str(n.expr), "input", "input", 0, (), list(n.features), n.type))
        else:
            nodes.append(GraphNode(n.id, str(n.expr), operator_kind(n.op), n.placement, row_of.get(n.id, n.depth),
                                   tuple(n.args), list(n.features), n.type))
    graph = Graph(nodes, rows, outputs=dict(plan.outputs))
    layout(graph)
    return graph


def expr_graph(features: Mapping[str, Expr]) -> Graph:
    """The graph of feature expressions before any frame is known (a ``FeatureSet``):
    each distinct sub-expression once, rows by depth (columns on top), placement decided
    only when a frame is planned.

    Example:
        >>> from fbrapids import ops
        >>> g = expr_graph({"a": ops.hash("x"), "b": ops.cross(ops.hash("x"), "y")})
        >>> [(n.label, n.row, n.shared) for n in g.nodes]
        [('x', 0, 2), ('hash(x)', 1, 2), ('y', 0, 1), ("cross(hash(x), y, buckets=1048576, cap=None, sep='_')", 2, 1)]
    """
    from fbrapids.kernels import get_operator

    ids: dict[tuple, GraphNode] = {}

    def visit(e: Expr, feature: str) -> GraphNode:
        args = tuple(visit(a, feature).id for a in getattr(e, "args", ()))  # every value a feature reads
        node = ids.get(e.key)
        if node is None:
            if hasattr(e, "op") and isinstance(e.op, str):
                row = 1 + max((ids_by_id[a].row for a in args), default=0)
                node = GraphNode(len(ids), str(e), operator_kind(get_operator(e.op)), "unplanned", row, args)
            else:
                node = GraphNode(len(ids), str(e), "input", "input", 0)
            ids[e.key] = node
            ids_by_id[node.id] = node
        if feature not in node.features:
            node.features.append(feature)
        return node

    ids_by_id: dict[int, GraphNode] = {}
    outputs = {name: visit(e, name).id for name, e in features.items()}
    nodes = list(ids.values())
    depth = max((n.row for n in nodes), default=0)
    graph = Graph(nodes, ["frame columns"] + [f"depth {d}" for d in range(1, depth + 1)], outputs=outputs)
    layout(graph)
    return graph


def layout(graph: Graph, sweeps: int = 4) -> Graph:
    """Positions for every box: rows top to bottom, barycenter order within a row."""
    by_row: dict[int, list[GraphNode]] = {}
    for n in graph.nodes:
        by_row.setdefault(n.row, []).append(n)
    order = {r: [n.id for n in ns] for r, ns in sorted(by_row.items())}
    children: dict[int, list[int]] = {n.id: [] for n in graph.nodes}
    for n in graph.nodes:
        for a in n.args:
            children.setdefault(a, []).append(n.id)
    parents = {n.id: list(n.args) for n in graph.nodes}
    rank = {nid: i for ids in order.values() for i, nid in enumerate(ids)}

    def reorder(r: int, neighbours: dict[int, list[int]]) -> None:
        def key(nid: int) -> tuple[float, int]:
            near = [rank[m] for m in neighbours.get(nid, []) if m in rank]
            return (sum(near) / len(near) if near else rank[nid], rank[nid])

        order[r] = sorted(order[r], key=key)
        rank.update({nid: i for i, nid in enumerate(order[r])})

    rows = sorted(order)
    for _ in range(sweeps):
        for r in rows[1:]:
            reorder(r, parents)
        for r in reversed(rows[:-1]):
            reorder(r, children)
    widest = max((len(ids) for ids in order.values()), default=1)
    for r, ids in order.items():
        offset = (widest - len(ids)) * (BOX_W + GAP_X) / 2
        for i, nid in enumerate(ids):
            graph.pos[nid] = (LEFT + offset + i * (BOX_W + GAP_X), TOP + r * (BOX_H + GAP_Y))
    return graph


def _short(text: str, limit: int = 26) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def to_svg(graph: Graph) -> str:
    """The graph as a standalone SVG document (boxes, edges, row names and a legend)."""
    if not graph.pos:
        layout(graph)
    xs = [x for x, _ in graph.pos.values()] or [LEFT]
    n_rows = max((n.row for n in graph.nodes), default=0) + 1
    width = max(xs) + BOX_W + 20
    legend_y = TOP + n_rows * (BOX_H + GAP_Y)
    kinds = sorted({n.kind for n in graph.nodes})
    placements = sorted({n.placement for n in graph.nodes})
    height = legend_y + 22 * (1 + max(len(kinds), len(placements)))
    width = max(width, 560)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="11">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#888"/></marker></defs>']
    out += _svg_row_names(graph, n_rows) + _svg_edges(graph) + _svg_nodes(graph)
    out += _svg_legend(kinds, placements, legend_y)
    out.append("</svg>")
    return "\n".join(out)


def _svg_row_names(graph: Graph, n_rows: int) -> list[str]:
    """The SVG texts naming each row of the layout (``row r`` where the graph names none)."""
    out = []
    for r in range(n_rows):
        name = graph.rows[r] if r < len(graph.rows) else f"row {r}"
        y = TOP + r * (BOX_H + GAP_Y) + BOX_H / 2 + 4
        out.append(f'<text class="row" x="8" y="{y:.0f}" fill="#444">{html.escape(name)}</text>')
    return out


def _svg_edges(graph: Graph) -> list[str]:
    """The SVG curves from each node's arguments to it (bottom of a box to the top of the next)."""
    out, pos = [], graph.pos
    for n in graph.nodes:
        x2, y2 = pos[n.id]
        for a in n.args:
            x1, y1 = pos[a]
            sx, sy, ex, ey = x1 + BOX_W / 2, y1 + BOX_H, x2 + BOX_W / 2, y2
            mid = (sy + ey) / 2
            out.append(f'<path class="edge" d="M {sx:.1f} {sy:.1f} C {sx:.1f} {mid:.1f}, {ex:.1f} {mid:.1f}, '
                       f'{ex:.1f} {ey:.1f}" fill="none" stroke="#888" stroke-width="1.2" marker-end="url(#arrow)"/>')
    return out


def _svg_nodes(graph: Graph) -> list[str]:
    """The SVG box of each node: filled by kind, outlined by placement (dashed when shared),
    its label, type, sharing and the features it outputs, and a tooltip."""
    outputs_of: dict[int, list[str]] = {}
    for name, nid in graph.outputs.items():
        outputs_of.setdefault(nid, []).append(name)
    out = []
    for n in graph.nodes:
        x, y = graph.pos[n.id]
        fill = KIND_COLORS.get(n.kind, KIND_COLORS["custom"])
        stroke = PLACEMENT_STROKES.get(n.placement, "#000")
        dash = ' stroke-dasharray="5 3"' if n.shared > 1 and n.kind != "input" else ""
        cls = "node shared" if n.shared > 1 and n.kind != "input" else "node"
        tip = f"#{n.id} {n.label} -> {n.type} [{PLACEMENT_NAMES.get(n.placement, n.placement)}]"
        if n.features:
            tip += "; used by " + ", ".join(n.features)
        out.append(f'<g class="{cls}" data-kind="{n.kind}" data-placement="{n.placement}"><title>{html.escape(tip)}'
                   f'</title><rect x="{x:.1f}" y="{y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}" '
                   f'stroke="{stroke}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{x + 6:.1f}" y="{y + 15:.1f}">{html.escape(_short(n.label))}</text>')
        sub = n.type + (f"  · shared by {n.shared}" if n.shared > 1 and n.kind != "input" else "")
        if n.id in outputs_of:
            sub += "  → " + ", ".join(outputs_of[n.id])
        out.append(f'<text x="{x + 6:.1f}" y="{y + 30:.1f}" fill="#555" font-size="9">{html.escape(_short(sub, 40))}'
                   '</text></g>')
    return out


def _svg_legend(kinds: list[str], placements: list[str], y: float) -> list[str]:
    """The SVG legend at height ``y``: a swatch per operator kind (fill) and per placement (outline)."""
    out = [f'<text x="8" y="{y:.0f}" font-weight="bold">kind</text>']
    for i, k in enumerate(kinds):
        yy = y + 8 + 20 * i
        out.append(f'<rect class="legend" x="60" y="{yy:.0f}" width="14" height="14" fill="{KIND_COLORS.get(k, "#fff")}" '
                   f'stroke="#555"/><text x="80" y="{yy + 11:.0f}">{html.escape(k)}</text>')
    for i, p in enumerate(placements):
        yy = y + 8 + 20 * i
        out.append(f'<rect class="legend" x="260" y="{yy:.0f}" width="14" height="14" fill="#fff" stroke-width="2" '
                   f'stroke="{PLACEMENT_STROKES.get(p, "#000")}"/><text x="280" y="{yy + 11:.0f}">'
                   f'{html.escape(PLACEMENT_NAMES.get(p, p))}</text>')
    out.append(f'<text x="260" y="{y:.0f}" font-weight="bold">placement (outline; dashed: shared)</text>')
    return out


def graph_html(graph: Graph, title: str, text: str = "") -> str:
    """A notebook block: a title, the graph (scrolls sideways when wide) and, folded, ``text``."""
    details = f"<details><summary>as text</summary><pre>{html.escape(text)}</pre></details>" if text else ""
    return (f'<div class="fbrapids-graph"><p><b>{html.escape(title)}</b></p>'
            f'<div style="overflow-x:auto">{to_svg(graph)}</div>{details}</div>')


class Explanation(str):
    """``explain``'s text (a ``str``: printing and slicing are unchanged) that a notebook
    shows as the plan's layered graph above that text."""

    plan: Plan | None = None

    def __new__(cls, text: str, plan: Plan | None = None) -> "Explanation":
        obj = super().__new__(cls, text)
        obj.plan = plan
        return obj

    def _repr_html_(self) -> str:
        head = self.split("\n", 1)[0]
        if self.plan is None:
            return f"<pre>{html.escape(str(self))}</pre>"
        return graph_html(plan_graph(self.plan), head, str(self))
