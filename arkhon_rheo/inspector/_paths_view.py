"""The paths-across-sessions page (``/paths?machine=NAME``) and its JSON (``/api/paths``).

``/paths`` lists the machines of the store's sessions; ``/paths?machine=NAME``
draws that machine's graph with every move's count per outcome group, summed
over all its stored sessions (`gather_paths`), and the tables beside it:
per group, the sessions, their average number of events and the states they
stopped in; per move, how many times each group took it. ``&outcome=GROUP``
draws one group's counts alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlencode

from starlette.responses import JSONResponse, Response

from ._graph import svg
from ._outcome import GROUPS
from ._paths import gather_paths

if TYPE_CHECKING:
    from collections.abc import Mapping

    from starlette.requests import Request

    from ..protocols import Machine, Store
    from ._paths import Paths

__all__ = ["paths_json", "paths_page", "paths_url"]


class _Pages(Protocol):
    """What the view needs of the inspector."""

    @property
    def store(self) -> Store: ...

    machines: dict[str, Machine[Any]]

    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> Response: ...

    def refused(self, request: Request, message: str, status: int) -> Response: ...


def paths_url(machine: str, outcome: str = "") -> str:
    """The address of a machine's paths page (of one outcome group, if given)."""
    query = {"machine": machine, **({"outcome": outcome} if outcome else {})}
    return "/paths?" + urlencode(query)


def _stopped(paths: Paths, outcome: str) -> dict[str, int]:
    """Per state, the sessions that stopped there without finishing (of ``outcome``)."""
    groups = [outcome] if outcome else [group for group in GROUPS if group != "finished"]
    counts: dict[str, int] = {}
    for group in groups:
        if group == "finished":
            continue
        for state, n in paths.stopped[group].items():
            counts[state] = counts.get(state, 0) + n
    return counts


async def _machines(store: Store) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in await store.sessions():
        counts[record.machine] = counts.get(record.machine, 0) + 1
    return dict(sorted(counts.items()))


async def paths_page(inspector: _Pages, request: Request) -> Response:
    """``/paths``: the machines, or one machine's paths across its sessions."""
    name = request.query_params.get("machine", "")
    if not name:
        return inspector.page(
            request,
            "paths.html",
            title="Paths across sessions",
            machine_name="",
            stored=await _machines(inspector.store),
            paths_url=paths_url,
        )
    outcome = request.query_params.get("outcome", "")
    if outcome and outcome not in GROUPS:
        message = f"outcome must be one of {', '.join(GROUPS)}, got {outcome!r}"
        return inspector.refused(request, message, 400)
    paths = await gather_paths(inspector.store, name)
    if not paths.total:
        message = (
            f"no session of machine {name!r} is stored: open /paths for the machines there are"
        )
        return inspector.refused(request, message, 404)
    machine = inspector.machines.get(name)
    graph = paths.graph(machine)
    flows: Mapping[tuple[str, str], Mapping[str, int]] = paths.moves
    if outcome:
        flows = {move: {outcome: counts[outcome]} for move, counts in paths.moves.items()}
    moves = sorted(paths.moves.items(), key=lambda item: -sum(item[1].values()))
    return inspector.page(
        request,
        "paths.html",
        title=f"Paths across sessions of {name}",
        machine_name=name,
        machine=machine,
        paths=paths,
        groups=GROUPS,
        outcome=outcome,
        moves=moves,
        graph_svg=svg(graph, flows=flows, stopped=_stopped(paths, outcome), tone=outcome),
        paths_url=paths_url,
    )


async def paths_json(inspector: _Pages, request: Request) -> Response:
    """``/api/paths?machine=NAME``: the counts as JSON data."""
    name = request.query_params.get("machine", "")
    if not name:
        return JSONResponse({"machines": await _machines(inspector.store)})
    paths = await gather_paths(inspector.store, name)
    if not paths.total:
        return JSONResponse({"error": f"no session of machine {name!r}"}, status_code=404)
    return JSONResponse(paths.as_json())
