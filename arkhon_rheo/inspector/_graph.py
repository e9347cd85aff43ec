"""A `StateGraph` (a machine's graph, and the path a session took through it) as inline SVG.

No JavaScript library draws it: the page must work offline, so the server
lays the states out in columns by their distance from the initial state and
writes the SVG itself. Moves the session took are drawn thick, with how many
times; moves it never took, thin and grey. The graph itself, and its Mermaid
text, come from `arkhon_rheo.protocols.StateGraph`.

Edge labels never overlap one another or a state: each is placed at the first
of a list of spots along its edge (the middle first, then further along it,
on the side it bends to, then the other) that is free, and slid clear if none
is; the drawing grows to hold every label. Drawn with ``flows`` (the paths
across many sessions), each edge's label holds one count per outcome group,
and its width grows with the sessions that took it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from ..protocols import GraphEdge, StateGraph

__all__ = ["svg"]

_W, _H, _GAP_X, _GAP_Y, _PAD = 150, 44, 80, 36, 24
#: A label's size: the width of one character of its 12px bold text (a wide
#: font's, so the box holds the text drawn), and its height.
_CHAR, _LINE = 8.6, 16.0
#: The room kept clear around a label.
_MARGIN = 2.0

Box = tuple[float, float, float, float]
Point = tuple[float, float]


@dataclass(frozen=True, slots=True)
class _Label:
    """A label's text, as parts (text, CSS class), and its hover title."""

    parts: tuple[tuple[str, str], ...]
    title: str = ""

    @property
    def width(self) -> float:
        return _CHAR * sum(len(text) for text, _ in self.parts) + 6


def svg(
    graph: StateGraph,
    *,
    flows: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
    stopped: Mapping[str, int] | None = None,
    tone: str = "",
) -> str:
    """``graph`` as an inline SVG element (the path taken highlighted).

    Args:
        graph: The graph, with the moves a session took.
        flows: Instead of the session's counts: per move, how many times the
            sessions of each outcome group took it (the paths view).
        stopped: Per state, how many sessions stopped there without finishing.
        tone: The outcome group the counts are of, if one (colours the moves).

    Returns:
        The ``<svg>`` element's text.
    """
    columns = _columns(graph)
    where: dict[str, tuple[float, float]] = {}
    for col, names in enumerate(columns):
        for row, name in enumerate(names):
            where[name] = (_PAD + col * (_W + _GAP_X), _PAD + row * (_H + _GAP_Y))
    width = _PAD * 2 + len(columns) * (_W + _GAP_X) - _GAP_X
    height = _PAD * 2 + max(len(names) for names in columns) * (_H + _GAP_Y) - _GAP_Y
    nodes = [
        (x - _MARGIN, y - _MARGIN, x + _W + _MARGIN, y + _H + _MARGIN) for x, y in where.values()
    ]
    placed: list[Box] = []
    heaviest = max((sum(counts.values()) for counts in (flows or {}).values()), default=0)
    drawn = [
        _edge(edge, where, nodes, placed, flows, heaviest, tone)
        for edge in _by_weight(graph.edges, flows)
    ]
    stops = stopped or {}
    parts = [
        _node(graph, name, *where[name], shown=flows is None, stopped=stops.get(name, 0))
        for name in graph.states
    ]
    left, top, right, bottom = _extent([(0.0, 0.0, width, height), *placed])
    classes = f"graph tone-{tone}" if tone else "graph"
    return "".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="{classes}" '
            f'role="img" aria-label="state graph" width="{right - left:.0f}" '
            f'height="{bottom - top:.0f}" viewBox="{left:.0f} {top:.0f} {right - left:.0f} '
            f'{bottom - top:.0f}">',
            _DEFS.replace("</defs>", _flow_marker(tone) + "</defs>")
            if flows is not None
            else _DEFS,
            *drawn,
            *parts,
            "</svg>",
        ]
    )


_DEFS = (
    "<defs>"
    '<marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
    'markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" '
    'fill="#9aa3ad"/></marker>'
    '<marker id="arrow-taken" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
    'markerHeight="6" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" '
    'fill="#2563eb"/></marker></defs>'
)


#: The colour of each outcome group's moves (the page's palette).
_TONES = {"finished": "#067647", "failed": "#b42318", "stuck": "#b54708"}


def _flow_marker(tone: str) -> str:
    """The arrowhead of the paths view: one size however thick its move is drawn."""
    return (
        '<marker id="arrow-flow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="11" '
        'markerHeight="11" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
        f'<path d="M0,0L10,5L0,10z" fill="{_TONES.get(tone, "#2563eb")}"/></marker>'
    )


def _by_weight(
    edges: Iterable[GraphEdge], flows: Mapping[tuple[str, str], Mapping[str, int]] | None
) -> list[GraphEdge]:
    """The edges, the most taken first (their labels get the best spots), else in order."""

    def weight(edge: GraphEdge) -> int:
        if flows is not None:
            return sum(flows.get((edge.source, edge.target), {}).values())
        return edge.taken

    return sorted(edges, key=weight, reverse=True)


def _extent(boxes: Sequence[Box]) -> Box:
    """The box holding every one of ``boxes``, with a small border."""
    return (
        min(box[0] for box in boxes) - 4,
        min(box[1] for box in boxes) - 4,
        max(box[2] for box in boxes) + 4,
        max(box[3] for box in boxes) + 4,
    )


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


def _node(graph: StateGraph, name: str, x: float, y: float, *, shown: bool, stopped: int) -> str:
    visits = graph.visits.get(name, 0) if shown else 0
    classes = ["state"]
    if visits or (not shown and name in graph.visits):
        classes.append("visited")
    if name in graph.terminal:
        classes.append("terminal")
    if name == graph.initial:
        classes.append("initial")
    label = escape(name) + (f" \u00d7{visits}" if visits else "")
    middle = y + _H / 2 + (0 if stopped else 5)
    stop = (
        f'<text class="stopped" x="{x + _W / 2}" y="{y + _H - 6}" text-anchor="middle">'
        f"{stopped} stopped here</text>"
        if stopped
        else ""
    )
    return (
        f'<g class="{" ".join(classes)}" data-state="{escape(name)}">'
        f'<rect x="{x}" y="{y}" width="{_W}" height="{_H}" rx="10"/>'
        f'<text x="{x + _W / 2}" y="{middle}" text-anchor="middle">{label}</text>{stop}</g>'
    )


def _label(
    edge: GraphEdge, flows: Mapping[tuple[str, str], Mapping[str, int]] | None
) -> _Label | None:
    """What an edge's label says: the session's count, or each outcome group's."""
    if flows is None:
        return _Label(((f"{edge.taken}\u00d7", ""),)) if edge.taken else None
    counts = [(group, n) for group, n in flows.get((edge.source, edge.target), {}).items() if n]
    if not counts:
        return None
    parts: list[tuple[str, str]] = []
    for index, (group, n) in enumerate(counts):
        parts.append((f"{' ' if index else ''}{n}", f"n-{group}"))
    title = ", ".join(f"{group}: {n}" for group, n in counts)
    return _Label(tuple(parts), f"{edge.source} \u2192 {edge.target}: {title}")


def _edge(
    edge: GraphEdge,
    where: Mapping[str, tuple[float, float]],
    nodes: list[Box],
    placed: list[Box],
    flows: Mapping[tuple[str, str], Mapping[str, int]] | None,
    heaviest: int,
    tone: str,
) -> str:
    src, dst = edge.source, edge.target
    total = edge.taken if flows is None else sum(flows.get((src, dst), {}).values())
    cls = "move taken" if total else "move"
    marker = "arrow-taken" if total else "arrow"
    style = ""
    if flows is not None and total:
        marker = "arrow-flow"
        style = f' style="stroke-width:{1.5 + 6 * math.sqrt(total / max(heaviest, 1)):.1f}"'
    (x1, y1), (x2, y2) = where[src], where[dst]
    if src == dst:  # a loop over the node's top edge
        path = (
            f"M{x1 + _W * 0.35},{y1} C{x1 + _W * 0.3},{y1 - 30} "
            f"{x1 + _W * 0.7},{y1 - 30} {x1 + _W * 0.65},{y1}"
        )
        spots: list[tuple[Point, Point]] = [((x1 + _W / 2, y1 - 24), (0.0, -1.0))]
    else:
        (ax, ay), (bx, by) = _border(x1, y1, x2, y2), _border(x2, y2, x1, y1)
        # Bend each edge a little, so a move and its way back do not overlap.
        mx, my = (ax + bx) / 2, (ay + by) / 2
        length = math.hypot(bx - ax, by - ay) or 1.0
        ux, uy = -(by - ay) / length, (bx - ax) / length
        cx, cy = mx + ux * 18, my + uy * 18
        path = f"M{ax:.1f},{ay:.1f} Q{cx:.1f},{cy:.1f} {bx:.1f},{by:.1f}"
        spots = _spots((ax, ay), (cx, cy), (bx, by), (ux, uy))
    label = _label(edge, flows)
    text = ""
    if label is not None:
        box = _place(label.width, spots, [*nodes, *placed])
        placed.append(box)
        text = _text(label, box)
    return (
        f'<g class="{cls}" data-move="{escape(src)}->{escape(dst)}">'
        f'<path d="{path}" fill="none" marker-end="url(#{marker})"{style}/>{text}</g>'
    )


def _text(label: _Label, box: Box) -> str:
    """The label's ``<text>``, centred in ``box``."""
    x, y = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2 + 4
    spans = "".join(
        f'<tspan class="{cls}">{escape(part)}</tspan>' if cls else escape(part)
        for part, cls in label.parts
    )
    title = f"<title>{escape(label.title)}</title>" if label.title else ""
    return f'<text class="count" x="{x:.1f}" y="{y:.1f}" text-anchor="middle">{title}{spans}</text>'


def _spots(a: Point, c: Point, b: Point, normal: Point) -> list[tuple[Point, Point]]:
    """Where a label may go along the curve from ``a`` to ``b`` bent by ``c``.

    Each spot is a point on the curve and the way out from it, the bent side first.
    """
    spots: list[tuple[Point, Point]] = []
    ux, uy = normal
    for side in (1.0, -1.0):
        for t in (0.5, 0.38, 0.62, 0.27, 0.73, 0.18, 0.82):
            s = 1 - t
            px = s * s * a[0] + 2 * s * t * c[0] + t * t * b[0]
            py = s * s * a[1] + 2 * s * t * c[1] + t * t * b[1]
            spots.append(((px, py), (ux * side, uy * side)))
    return spots


def _place(width: float, spots: Sequence[tuple[Point, Point]], taken: Sequence[Box]) -> Box:
    """A label's box: at the first free spot, else the least covered one slid clear."""
    half_w, half_h = width / 2, _LINE / 2
    best: Box | None = None
    least = math.inf
    for (px, py), (ux, uy) in spots:
        # Just off the curve: as far out as the box reaches towards it.
        reach = abs(ux) * half_w + abs(uy) * half_h + 3
        x, y = px + ux * reach, py + uy * reach
        box = (x - half_w, y - half_h, x + half_w, y + half_h)
        covered = sum(_overlap(box, other) for other in taken)
        if covered == 0:
            return box
        if covered < least:
            best, least = box, covered
    assert best is not None
    for step in range(1, 200):  # slide it up or down, a little further each time
        for sign in (-1, 1):
            dy = sign * step * (half_h / 2)
            moved = (best[0], best[1] + dy, best[2], best[3] + dy)
            if not any(_overlap(moved, other) for other in taken):
                return moved
    return best


def _overlap(one: Box, other: Box) -> float:
    """The area two boxes share, each kept ``_MARGIN`` clear."""
    w = min(one[2], other[2]) - max(one[0], other[0]) + _MARGIN
    h = min(one[3], other[3]) - max(one[1], other[1]) + _MARGIN
    return w * h if w > 0 and h > 0 else 0.0


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
