"""A `StateGraph` (a machine's graph, and the path a session took through it) as inline SVG.

No JavaScript library draws it: the page must work offline, so the server
lays the states out in columns by their distance from the initial state and
writes the SVG itself. Moves the session took are drawn thick, with how many
times; moves it never took, thin and grey. The graph itself, and its Mermaid
text, come from `arkhon_rheo.protocols.StateGraph`.
"""

from __future__ import annotations

import math
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..protocols import GraphEdge, StateGraph

__all__ = ["svg"]

_W, _H, _GAP_X, _GAP_Y, _PAD = 150, 44, 80, 36, 24


def svg(graph: StateGraph) -> str:
    """``graph`` as an inline SVG element (the path taken highlighted)."""
    columns = _columns(graph)
    where: dict[str, tuple[float, float]] = {}
    for col, names in enumerate(columns):
        for row, name in enumerate(names):
            where[name] = (_PAD + col * (_W + _GAP_X), _PAD + row * (_H + _GAP_Y))
    width = _PAD * 2 + len(columns) * (_W + _GAP_X) - _GAP_X
    height = _PAD * 2 + max(len(names) for names in columns) * (_H + _GAP_Y) - _GAP_Y
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" role="img" '
        f'aria-label="state graph" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        "<defs>"
        '<marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" '
        'fill="#9aa3ad"/></marker>'
        '<marker id="arrow-taken" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" '
        'fill="#2563eb"/></marker></defs>',
    ]
    parts.extend(_edge(edge, where) for edge in graph.edges)
    parts.extend(_node(graph, name, *where[name]) for name in graph.states)
    parts.append("</svg>")
    return "".join(parts)


def _columns(graph: StateGraph) -> list[list[str]]:
    """The states by column: their distance from the initial state (unreachable ones last)."""
    depth: dict[str, int] = {}
    if graph.initial is not None:
        depth[graph.initial] = 0
        frontier = [graph.initial]
        while frontier:
            nxt: list[str] = []
            for src in frontier:
                for edge in graph.edges:
                    if edge.source == src and edge.target not in depth:
                        depth[edge.target] = depth[src] + 1
                        nxt.append(edge.target)
            frontier = nxt
    last = max(depth.values(), default=-1)
    for name in graph.states:  # unreachable states go in a last column
        depth.setdefault(name, last + 1)
    columns: list[list[str]] = [[] for _ in range(max(depth.values(), default=0) + 1)]
    for name in graph.states:
        columns[depth[name]].append(name)
    return [names for names in columns if names] or [[]]


def _node(graph: StateGraph, name: str, x: float, y: float) -> str:
    visits = graph.visits.get(name, 0)
    classes = ["state"]
    if visits:
        classes.append("visited")
    if name in graph.terminal:
        classes.append("terminal")
    if name == graph.initial:
        classes.append("initial")
    label = escape(name) + (f" \u00d7{visits}" if visits else "")
    return (
        f'<g class="{" ".join(classes)}" data-state="{escape(name)}">'
        f'<rect x="{x}" y="{y}" width="{_W}" height="{_H}" rx="10"/>'
        f'<text x="{x + _W / 2}" y="{y + _H / 2 + 5}" text-anchor="middle">{label}</text></g>'
    )


def _edge(edge: GraphEdge, where: Mapping[str, tuple[float, float]]) -> str:
    src, dst, count = edge.source, edge.target, edge.taken
    cls = "move taken" if count else "move"
    marker = "arrow-taken" if count else "arrow"
    (x1, y1), (x2, y2) = where[src], where[dst]
    if src == dst:  # a loop over the node's top edge
        path = (
            f"M{x1 + _W * 0.35},{y1} C{x1 + _W * 0.3},{y1 - 30} "
            f"{x1 + _W * 0.7},{y1 - 30} {x1 + _W * 0.65},{y1}"
        )
        lx, ly = x1 + _W / 2, y1 - 24
    else:
        (ax, ay), (bx, by) = _border(x1, y1, x2, y2), _border(x2, y2, x1, y1)
        # Bend each edge a little, so a move and its way back do not overlap.
        mx, my = (ax + bx) / 2, (ay + by) / 2
        length = math.hypot(bx - ax, by - ay) or 1.0
        nx, ny = -(by - ay) / length * 18, (bx - ax) / length * 18
        path = f"M{ax:.1f},{ay:.1f} Q{mx + nx:.1f},{my + ny:.1f} {bx:.1f},{by:.1f}"
        # The label sits just outside the curve's middle, on its bent side.
        lx, ly = mx + nx * 1.4, my + ny * 1.4 + 4
    label = (
        f'<text class="count" x="{lx:.1f}" y="{ly:.1f}" text-anchor="middle">{count}\u00d7</text>'
        if count
        else ""
    )
    return (
        f'<g class="{cls}" data-move="{escape(src)}->{escape(dst)}">'
        f'<path d="{path}" fill="none" marker-end="url(#{marker})"/>{label}</g>'
    )


def _border(x: float, y: float, tx: float, ty: float) -> tuple[float, float]:
    """Where the line from the centre of the box at (x, y) towards (tx, ty) leaves it."""
    cx, cy, ox, oy = x + _W / 2, y + _H / 2, tx + _W / 2, ty + _H / 2
    dx, dy = ox - cx, oy - cy
    if dx == 0 and dy == 0:
        return cx, cy
    scale = min(
        (_W / 2) / abs(dx) if dx else math.inf,
        (_H / 2) / abs(dy) if dy else math.inf,
    )
    return cx + dx * scale, cy + dy * scale
