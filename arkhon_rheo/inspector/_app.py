"""The inspector's ASGI app (Starlette): pages rendered on the server, a JSON feed for polling.

Imported only by `create_app`, once the ``inspector`` extra is known to be
installed. Reading needs the store only; deciding a paused session and
replaying one need the session's machine. Every request that changes
something or costs more than a read (deciding, replaying) is a ``POST`` and
needs the token; every ``GET`` only reads, a page of events at a time.

A session id may hold any character (a subgraph child's is
``parent/stage/1``): it goes into every URL percent-encoded whole
(`session_url`), ``/`` and ``%`` included, and the routes take the rest of
the path as the id, so each id comes back exactly as it is stored.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._errors import ArkhonError, SessionNotFound, StoreCorrupt
from .._redact import scrub_secrets
from ..core._seams import fingerprint, reading
from ..protocols import StateGraph
from ..system import AgentSystem
from ._data import LIVE, load_timeline, summarize, when
from ._graph import svg
from ._outcome import outcome
from ._paths_view import paths_json, paths_page, paths_url
from ._web import (
    LIST_SIZE,
    MAX_LIST_SIZE,
    BadInput,
    decision_input,
    favicon,
    jsontext,
    list_query,
    pretty,
    whole,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping
    from pathlib import Path

    from starlette.requests import Request

    from ..core import Keyring
    from ..protocols import Machine, SessionRecord, Store

__all__ = [
    "LIST_SIZE",
    "MAX_LIST_SIZE",
    "PAGE_SIZE",
    "TOKEN_COOKIE",
    "TOKEN_HEADER",
    "build_app",
    "session_url",
]

#: The header a script sends the token in (a form sends the ``token`` field).
TOKEN_HEADER = "x-arkhon-token"
#: The cookie a browser keeps the token in, once it has opened ``/?token=...``.
TOKEN_COOKIE = "arkhon_token"
#: Decisions a paused session takes.
_DECISIONS = ("approve", "abort", "edit")
#: Fields a human never edits (the supervisor writes them).
_NOT_EDITABLE = frozenset({"lifecycle", "session_id", "iteration"})
#: Events a session page shows at most (``?page=N``; the last page by default).
PAGE_SIZE = 100


def session_url(session_id: str) -> str:
    """The path of a session's page: its id percent-encoded whole, ``/`` and ``%`` included."""
    return "/sessions/" + quote(session_id, safe="")


class _Inspector:
    """The app's state: the open system, the machines by name, the token."""

    def __init__(
        self,
        store_path: Path | str,
        machines: Mapping[str, Machine[Any]],
        token: str,
        protect: bool,
        keyring: Keyring | None = None,
    ) -> None:
        self.keyring = keyring
        self.store_path = store_path
        self.machines = dict(machines)
        self.token = token
        self.protect_reads = protect
        self.system: AgentSystem | None = None
        self.templates = Environment(
            loader=PackageLoader("arkhon_rheo.inspector", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.templates.filters["pretty"] = pretty
        self.templates.filters["jsontext"] = jsontext
        self.templates.filters["session_url"] = session_url
        self.templates.filters["when"] = when
        self.templates.filters["paths_url"] = paths_url

    @property
    def store(self) -> Store:
        store = self.system.store if self.system is not None else None
        assert store is not None, "the app's lifespan has not started"
        return store

    def machine_for(self, record: SessionRecord) -> tuple[Machine[Any] | None, str]:
        """The session's machine if one was given and fits it; else why not."""
        machine = self.machines.get(record.machine)
        if machine is None:
            return None, (
                f"no machine named {record.machine!r} was given to the inspector "
                f"(start it with --machine MODULE:ATTR)"
            )
        try:
            found = reading(record.session_id, record.fingerprint, fingerprint(machine)).found
        except StoreCorrupt as exc:
            return None, str(exc)
        if found:
            return None, f"the machine given differs from the session's: {'; '.join(found)}"
        return machine, ""

    # -- tokens ---------------------------------------------------------------

    def _presented(self, request: Request, form: Mapping[str, Any] | None = None) -> str:
        if form is not None and isinstance(form.get("token"), str):
            return str(form["token"])
        return request.headers.get(TOKEN_HEADER, "")

    def valid(self, token: str) -> bool:
        return bool(token) and secrets.compare_digest(token.encode(), self.token.encode())

    def browser_token(self, request: Request) -> str:
        """The token the browser holds (its cookie), if it is the right one; else ``""``."""
        held = request.cookies.get(TOKEN_COOKIE, "")
        return held if self.valid(held) else ""

    def may_read(self, request: Request) -> bool:
        if not self.protect_reads:
            return True
        return bool(self.browser_token(request)) or self.valid(self._presented(request))

    # -- rendering -------------------------------------------------------------

    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        html = self.templates.get_template(name).render(
            token=self.browser_token(request),
            machines=sorted(self.machines),
            store_path=scrub_secrets(str(self.store_path)),  # a URL's password masked
            **context,
        )
        return HTMLResponse(html, status_code=status)

    def refused(self, request: Request, message: str, status: int) -> Response:
        return self.page(request, "error.html", status=status, title="Refused", message=message)

    # -- views -----------------------------------------------------------------

    async def sessions(self, request: Request) -> Response:
        if not self.may_read(request):
            return self._token_needed(request)
        if "token" in request.query_params:
            return self._take_token(request)
        try:
            page = whole(request, "page", 1, None)
            limit = whole(request, "limit", LIST_SIZE, MAX_LIST_SIZE)
        except BadInput as exc:
            return self.refused(request, str(exc), 400)
        records = await self.store.sessions()
        counts: dict[str, int] = {}
        machines: set[str] = set()
        for record in records:
            counts[record.status] = counts.get(record.status, 0) + 1
            machines.add(record.machine)
        wanted = request.query_params.get("status", "")
        if wanted:
            records = tuple(record for record in records if record.status == wanted)
        pages = max(1, -(-len(records) // limit))
        if page > pages:
            message = f"no page {page} of {len(records)} session(s) at {limit} a page: {pages}"
            return self.refused(request, message + " page(s)", 404)
        ordered = sorted(records, key=lambda r: (r.updated_at, r.session_id), reverse=True)
        shown = [summarize(record) for record in ordered[(page - 1) * limit : page * limit]]
        return self.page(
            request,
            "sessions.html",
            rows=shown,
            counts=counts,
            wanted=wanted,
            total=len(records),
            first=(page - 1) * limit + 1,
            page=page,
            pages=pages,
            limit=limit,
            query=list_query(wanted, limit),
            stored_machines=sorted(machines),
            title="Sessions",
        )

    async def paths(self, request: Request) -> Response:
        """``/paths``: a machine's moves summed over its stored sessions, by outcome."""
        if not self.may_read(request):
            return self._token_needed(request)
        return await paths_page(self, request)

    async def paths_json(self, request: Request) -> Response:
        if not self.may_read(request):
            return JSONResponse({"error": "a token is needed"}, status_code=403)
        return await paths_json(self, request)

    async def sessions_json(self, request: Request) -> Response:
        if not self.may_read(request):
            return JSONResponse({"error": "a token is needed"}, status_code=403)
        records = await self.store.sessions()
        return JSONResponse({"sessions": [summarize(record).as_json() for record in records]})

    async def session_json(self, request: Request) -> Response:
        if not self.may_read(request):
            return JSONResponse({"error": "a token is needed"}, status_code=403)
        try:
            record = await self.store.record(request.path_params["session_id"])
        except SessionNotFound as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        return JSONResponse(summarize(record).as_json())

    async def session(self, request: Request) -> Response:
        if not self.may_read(request):
            return self._token_needed(request)
        session_id = request.path_params["session_id"]
        if "at" in request.query_params:
            return await self._state_page(request, session_id, request.query_params["at"])
        page: int | None = None
        if "page" in request.query_params:
            text = request.query_params["page"]
            if not text.isdecimal() or int(text) < 1:
                message = f"page must be a whole number from 1, got {text!r}"
                return self.refused(request, message, 400)
            page = int(text)
        return await self._session_page(request, session_id, page=page)

    async def _state_page(self, request: Request, session_id: str, text: str) -> Response:
        """``?at=SEQ``: the whole state after event ``SEQ`` (0: before the first)."""
        try:
            record = await self.store.record(session_id)
        except SessionNotFound as exc:
            return self.refused(request, str(exc), 404)
        if not text.isdecimal():
            message = f"at must be an event number from 0 (the start), got {text!r}"
            return self.refused(request, message, 400)
        machine, _ = self.machine_for(record)
        try:
            timeline = await load_timeline(self.store, session_id, machine, self.keyring)
        except ArkhonError:  # a stored state the machine cannot decode: the stored data
            timeline = await load_timeline(self.store, session_id)
        seqs = [0, *(step.event.seq for step in timeline.steps)]
        seq = int(text)
        if seq not in seqs:
            message = f"session {session_id!r} has no event {seq}: it has {len(seqs) - 1} event(s)"
            return self.refused(request, message, 404)
        index = seqs.index(seq)
        return self.page(
            request,
            "state.html",
            title=f"Session {session_id} at event {seq}",
            url=session_url(session_id),
            record=summarize(record),
            seq=seq,
            last=seqs[-1],
            page=max(0, index - 1) // PAGE_SIZE + 1,
            exact=timeline.exact,
            state=timeline.states[index],
        )

    async def _session_page(
        self,
        request: Request,
        session_id: str,
        *,
        status: int = 200,
        error: str = "",
        submitted: Mapping[str, str] | None = None,
        replay: Any = None,
        page: int | None = None,
    ) -> Response:
        try:
            record = await self.store.record(session_id)
        except SessionNotFound as exc:
            return self.refused(request, str(exc), 404)
        machine, why = self.machine_for(record)
        try:
            timeline = await load_timeline(self.store, session_id, machine, self.keyring)
        except ArkhonError as exc:  # a stored state the machine cannot decode
            why = f"the machine could not fold this session ({exc}); showing the stored data"
            machine = None
            timeline = await load_timeline(self.store, session_id)
        events = [step.event for step in timeline.steps]
        if machine is not None:
            graph = machine.graph(events)
        else:
            states = (record.fingerprint or {}).get("states", ())
            graph = StateGraph.from_events(events, states=states)
        editable = [
            (name, text) for name, text in timeline.state.items() if name not in _NOT_EDITABLE
        ]
        pages = max(1, -(-len(timeline.steps) // PAGE_SIZE))
        where = {step.event.seq: i // PAGE_SIZE + 1 for i, step in enumerate(timeline.steps)}
        if page is None:
            divergence = getattr(replay, "divergence", None)
            page = where.get(divergence.seq, pages) if divergence is not None else pages
        elif page > pages:
            message = f"no page {page} of session {session_id!r}: it has {pages} page(s)"
            return self.refused(request, message, 404)
        shown = timeline.steps[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
        return self.page(
            request,
            "session.html",
            status=status,
            title=f"Session {session_id}",
            url=session_url(session_id),
            record=summarize(record),
            timeline=timeline,
            steps=shown,
            page=page,
            pages=pages,
            page_of=where,
            graph=graph,
            graph_svg=svg(graph),
            machine=machine,
            why=why,
            waits=timeline.waits,
            outcome=outcome(record.status, timeline.steps, timeline.waits),
            editable=editable,
            error=error,
            submitted=dict(submitted or {}),
            replay=replay,
            live=record.status in LIVE,
            done=request.query_params.get("done", ""),
        )

    async def decide(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        form = dict(await request.form())
        if not self.valid(self._presented(request, form)):
            return self.refused(request, "this change needs the inspector's token", 403)
        fields = {k: str(v) for k, v in form.items() if isinstance(v, str)}
        decision = fields.get("decision", "")
        if decision == "resume":  # the old word for approve, still taken
            decision = "approve"
        try:
            record = await self.store.record(session_id)
        except SessionNotFound as exc:
            return self.refused(request, str(exc), 404)
        machine, why = self.machine_for(record)
        if machine is None:
            return await self._session_page(request, session_id, status=409, error=why)
        if decision not in _DECISIONS:
            error = f"decision must be one of {', '.join(_DECISIONS)}, got {decision!r}"
            return await self._session_page(request, session_id, status=422, error=error)
        try:
            value, edit = decision_input(fields, decision)
            edit = await self._changed(session_id, machine, edit)
            assert self.system is not None
            stored = self.system.stored(machine, session_id)
            if decision == "approve":
                await stored.approve(value)
            elif decision == "abort":
                await stored.abort()
            else:
                await stored.edit(edit or {})
        except (ArkhonError, BadInput) as exc:
            message = f"{type(exc).__name__}: {exc}" if isinstance(exc, ArkhonError) else str(exc)
            return await self._session_page(
                request, session_id, status=422, error=message, submitted=fields
            )
        return RedirectResponse(f"{session_url(session_id)}?done={decision}", status_code=303)

    async def _changed(
        self, session_id: str, machine: Machine[Any], edit: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Only the edited fields whose value differs from the stored one."""
        if edit is None:
            return None
        timeline = await load_timeline(self.store, session_id, machine, self.keyring)
        current = {name: json.loads(text) for name, text in timeline.state.items()}
        changed = {name: value for name, value in edit.items() if current.get(name) != value}
        if not changed:
            raise BadInput("the edit changes nothing: change a field's value first")
        return changed

    async def replay(self, request: Request) -> Response:
        """``POST``: fold the whole log (re-execute it with ``reexecute=1``); needs the token."""
        session_id = request.path_params["session_id"]
        form = dict(await request.form())
        if not self.valid(self._presented(request, form)):
            return self.refused(request, "a replay needs the inspector's token", 403)
        reexecute = form.get("reexecute") == "1"
        try:
            record = await self.store.record(session_id)
        except SessionNotFound as exc:
            return self.refused(request, str(exc), 404)
        machine, why = self.machine_for(record)
        if machine is None:
            return await self._session_page(
                request, session_id, status=409, error=f"replay needs the machine: {why}"
            )
        assert self.system is not None
        try:
            report = await self.system.stored(machine, session_id).replay(reexecute=reexecute)
        except ArkhonError as exc:
            return await self._session_page(
                request, session_id, status=422, error=f"{type(exc).__name__}: {exc}"
            )
        return await self._session_page(request, session_id, replay=report)

    # -- the token in a browser ------------------------------------------------

    def _take_token(self, request: Request) -> Response:
        """``/?token=...``: keep a right token in a cookie, then show the page without it."""
        token = request.query_params["token"]
        if not self.valid(token):
            return self.refused(request, "that token is not this inspector's", 403)
        # The path as it came, re-encoded: ``/sessions/%2541`` again, never ``/sessions/%41``.
        response = RedirectResponse(quote(request.scope["path"], safe="/"), status_code=303)
        response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
        return response

    def _token_needed(self, request: Request) -> Response:
        if "token" in request.query_params and self.valid(request.query_params["token"]):
            return self._take_token(request)
        return self.refused(
            request,
            "this inspector serves other addresses than this machine's, so every page needs "
            "its token: open the address it printed at start (…/?token=…)",
            403,
        )


def build_app(
    store_path: Path | str,
    machines: Mapping[str, Machine[Any]],
    token: str,
    *,
    protect_reads: bool,
    allowed_hosts: list[str],
    secrets: Keyring | None = None,
) -> Starlette:
    """The inspector's Starlette app; its lifespan opens the store through an `AgentSystem`."""
    inspector = _Inspector(store_path, machines, token, protect_reads, secrets)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AgentSystem(path=store_path, secrets=secrets) as system:
            inspector.system = system
            try:
                yield
            finally:
                inspector.system = None

    app = Starlette(
        routes=[
            Route("/", inspector.sessions),
            # Browsers ask for /favicon.ico whatever the page links: both answer the SVG.
            Route("/favicon.ico", favicon),
            Route("/favicon.svg", favicon),
            Route("/api/sessions", inspector.sessions_json),
            Route("/paths", inspector.paths),
            Route("/api/paths", inspector.paths_json),
            # ``:path``: an id is the rest of the path, ``/`` included (sent as %2F, seen as /).
            Route("/api/sessions/{session_id:path}", inspector.session_json),
            Route("/sessions/{session_id:path}/decide", inspector.decide, methods=["POST"]),
            Route("/sessions/{session_id:path}/replay", inspector.replay, methods=["POST"]),
            Route("/sessions/{session_id:path}", inspector.session, methods=["GET"]),
            Mount("/static", StaticFiles(packages=[("arkhon_rheo.inspector", "static")])),
        ],
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)],
        lifespan=lifespan,
    )
    app.state.token = token
    app.state.inspector = inspector
    return app
