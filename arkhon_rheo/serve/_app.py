"""`a2a_app`: agents served over A2A (JSON-RPC over HTTP, server-sent events), an ASGI app.

Built on Starlette over anyio with the official SDK's types (``a2a-sdk``, the
``a2a`` extra), so it runs on asyncio and on trio alike (the SDK's own
server parts are asyncio-only).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError
from .._log import get_logger
from ..protocols import Machine
from ._served import Served

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from ..system import AgentSystem
    from ._agent import Agent

__all__ = ["CARD_PATH", "MAX_BODY", "a2a_app", "agents_of"]

_log = get_logger("arkhon_rheo.serve")

#: Where each agent's card is, under the agent's path.
CARD_PATH = "/.well-known/agent-card.json"
#: The largest request body accepted, in bytes.
MAX_BODY = 1 << 20
#: JSON-RPC's own error codes.
_PARSE, _INVALID, _NOT_FOUND, _INTERNAL = -32700, -32600, -32601, -32603
_STREAMING = ("SendStreamingMessage", "SubscribeToTask")


def require_sdk() -> None:
    """Raise `ConfigurationError` saying what to install, without the ``a2a`` extra."""
    try:
        import a2a.types  # noqa: F401
        import starlette  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            f"serving over A2A needs the a2a-sdk and Starlette ({exc.name} is missing): "
            "install the extra with pip install 'arkhon-rheo[a2a]'"
        ) from None


def agents_of(agents: object) -> list[Served]:
    """The agents to serve, each with its path: one at the root, several under their names."""
    if isinstance(agents, Machine | Served):
        items: list[object] = [agents]
    elif isinstance(agents, Sequence) and not isinstance(agents, str):
        items = list(agents)
    else:
        raise ConfigurationError(
            f"agents must be a Machine, a Served or a list of them: {agents!r}"
        )
    if not items:
        raise ConfigurationError("there is no agent to serve")
    served: list[Served] = []
    for item in items:
        if isinstance(item, Machine):
            item = Served(item)
        if not isinstance(item, Served):
            raise ConfigurationError(f"an agent to serve is a Machine or a Served, got {item!r}")
        path = (
            item.path if item.path is not None else ("" if len(items) == 1 else item.machine.name)
        )
        path = "/" + path.strip("/") if path.strip("/") else ""
        served.append(Served(item.machine, item.description, path))
    paths = [each.path for each in served]
    if len(set(paths)) != len(paths):
        raise ConfigurationError(f"two agents are served at one path: {paths}")
    if len(served) > 1 and "" in paths:
        raise ConfigurationError("with several agents, each needs a path of its own (not the root)")
    return served


def a2a_app(
    system: AgentSystem,
    agents: Machine[Any] | Served | Sequence[Machine[Any] | Served],
    *,
    token: str | None = None,
    allowed_hosts: Sequence[str] | None = None,
    max_body: int = MAX_BODY,
    reply_timeout: float = 300.0,
) -> Starlette:
    """An ASGI app serving ``agents`` over A2A, asking their sessions in ``system``.

    Mount it in your Starlette or FastAPI service (it shares your running
    `AgentSystem`), or serve it with ``arkhon-rheo serve``. One agent is
    served at the app's root; several each under its own path
    (``/<machine name>`` unless `Served.path` says otherwise). Each has its
    card at ``<path>/.well-known/agent-card.json`` and answers JSON-RPC
    ``POST``s at ``<path>/``: ``SendMessage``, ``SendStreamingMessage``
    (server-sent events), ``GetTask``, ``SubscribeToTask`` and ``CancelTask``
    (A2A 1.0). See the how-to "Serving agents over A2A" for the mapping.

    Args:
        system: The running agent system (with a store: tasks are read from it).
        agents: The agents: their machines, or `Served` for a description or path.
        token: If given, every JSON-RPC request needs it (``Authorization:
            Bearer TOKEN``); the cards stay readable, and say so.
        allowed_hosts: The ``Host`` headers answered (``None``: any).
        max_body: The largest request body accepted, in bytes.
        reply_timeout: The longest a ``SendMessage`` waits for its turn, in
            seconds; past it, the task is answered as it is (``working``), for
            the client to follow with ``GetTask``.

    Raises:
        ConfigurationError: Without the ``a2a`` extra, or for a bad argument.
    """
    require_sdk()
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.routing import Route

    from ._agent import Agent

    if system.store is None:
        raise ConfigurationError("serving over A2A needs an AgentSystem with a store")
    if token is not None and (not isinstance(token, str) or not token):
        raise ConfigurationError("token must be a non-empty string")
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1024:
        raise ConfigurationError(f"max_body must be an integer of at least 1024, got {max_body!r}")
    if not reply_timeout > 0:
        raise ConfigurationError(f"reply_timeout must be positive, got {reply_timeout!r}")
    served = agents_of(agents)
    routes = []
    for each in served:
        agent = Agent(system, each, reply_timeout)
        routes.append(Route(f"{each.path}{CARD_PATH}", _card_route(agent, token), methods=["GET"]))
        endpoint = _rpc_route(agent, token, max_body)
        routes.append(Route(f"{each.path}/", endpoint, methods=["POST"]))
        if each.path:
            routes.append(Route(each.path, endpoint, methods=["POST"]))
    if len(served) > 1:
        routes.append(Route("/", _index_route(served), methods=["GET"]))
    middleware = []
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    return Starlette(routes=routes, middleware=middleware)


# -- the agent card -------------------------------------------------------------------


def card(agent: Agent, base_url: str, secured: bool) -> dict[str, Any]:
    """The agent's card as JSON data: its name, description, skills and what it can do."""
    from a2a.types import a2a_pb2 as pb
    from google.protobuf import json_format

    import arkhon_rheo

    machine = agent.machine
    built = pb.AgentCard(
        name=machine.name,
        description=agent.served.description or f"the {machine.name} agent, served by arkhon-rheo",
        version=arkhon_rheo.__version__,
        capabilities=pb.AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
    )
    built.supported_interfaces.append(
        pb.AgentInterface(url=base_url, protocol_binding="JSONRPC", protocol_version="1.0")
    )
    for spec in _tool_specs(machine):
        built.skills.append(
            pb.AgentSkill(
                id=spec.name,
                name=spec.name,
                description=spec.description or spec.name,
                tags=["tool"],
            )
        )
    if not built.skills:
        built.skills.append(
            pb.AgentSkill(
                id=machine.name, name=machine.name, description=built.description, tags=["agent"]
            )
        )
    if secured:
        scheme = pb.SecurityScheme(
            http_auth_security_scheme=pb.HTTPAuthSecurityScheme(scheme="Bearer")
        )
        built.security_schemes["bearer"].CopyFrom(scheme)
        requirement = built.security_requirements.add()
        requirement.schemes["bearer"].SetInParent()
    data: dict[str, Any] = json_format.MessageToDict(built)
    return data


def _tool_specs(machine: Machine[Any]) -> list[Any]:
    """The tools the machine offers: its ``"tools"`` resource's, or its stages' tool runner's.

    None if it cannot say before it is opened (an MCP toolbox, say).
    """
    runners = [machine.resources.get("tools")] if machine.resources else []
    runners += [
        getattr(getattr(stage, "config", None), "runner", None) for stage in machine.stages.values()
    ]
    for runner in runners:
        specs = getattr(runner, "specs", None)
        try:
            found = specs() if callable(specs) else specs
        except Exception:  # a toolbox that must be opened first (MCP): look on
            continue
        if isinstance(found, Sequence) and found:
            return list(found)
    return []


def _base_url(request: Request, path: str) -> str:
    root = request.scope.get("root_path", "")
    return f"{request.url.scheme}://{request.url.netloc}{root}{path}/"


def _card_route(agent: Agent, token: str | None) -> Callable[[Request], Awaitable[Response]]:
    from starlette.responses import JSONResponse

    async def endpoint(request: Request) -> Response:
        return JSONResponse(
            card(agent, _base_url(request, agent.served.path or ""), token is not None)
        )

    return endpoint


def _index_route(served: list[Served]) -> Callable[[Request], Awaitable[Response]]:
    from starlette.responses import JSONResponse

    async def endpoint(request: Request) -> Response:
        return JSONResponse(
            {
                "agents": [
                    {
                        "name": each.machine.name,
                        "card": _base_url(request, each.path or "")[:-1] + CARD_PATH,
                    }
                    for each in served
                ]
            }
        )

    return endpoint


# -- JSON-RPC -------------------------------------------------------------------------


def _error(code: int, message: str, request_id: Any = None, status: int = 200) -> Response:
    from starlette.responses import JSONResponse

    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status)


def _a2a_error(exc: Any, request_id: Any) -> dict[str, Any]:
    from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP

    code = JSON_RPC_ERROR_CODE_MAP.get(type(exc), _INTERNAL)
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": exc.message}}


async def _body(request: Request, limit: int) -> bytes | None:
    """The request's body, or ``None`` past ``limit`` bytes (read no further)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _authorized(request: Request, token: str | None) -> bool:
    if token is None:
        return True
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        value.strip().encode(), token.encode()
    )


def _rpc_route(
    agent: Agent, token: str | None, max_body: int
) -> Callable[[Request], Awaitable[Response]]:
    from a2a.types import a2a_pb2 as pb
    from google.protobuf import json_format
    from starlette.responses import JSONResponse, StreamingResponse

    methods: dict[str, tuple[Any, Any]] = {
        "SendMessage": (pb.SendMessageRequest, agent.send),
        "SendStreamingMessage": (pb.SendMessageRequest, agent.stream),
        "GetTask": (pb.GetTaskRequest, agent.get),
        "SubscribeToTask": (pb.SubscribeToTaskRequest, agent.subscribe),
        "CancelTask": (pb.CancelTaskRequest, agent.cancel),
    }

    async def endpoint(request: Request) -> Response:
        if not _authorized(request, token):
            return _error(
                _INVALID, "unauthorized: send the token as 'Authorization: Bearer ...'", status=401
            )
        body = await _body(request, max_body)
        if body is None:
            return _error(_INVALID, f"the request is larger than {max_body} bytes", status=413)
        try:
            envelope = json.loads(body)
        except ValueError:
            return _error(_PARSE, "the request is not JSON")
        if not isinstance(envelope, dict):
            return _error(_INVALID, "a request is one JSON-RPC object (batches are not served)")
        request_id = envelope.get("id")
        method = envelope.get("method")
        if envelope.get("jsonrpc") != "2.0" or not isinstance(method, str):
            return _error(_INVALID, "not a JSON-RPC 2.0 request", _plain_id(request_id))
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return _error(_INVALID, "a request needs an id (a string or an integer)")
        if method not in methods:
            known = ", ".join(methods)
            return _error(
                _NOT_FOUND, f"no method {method!r} here; these are served: {known}", request_id
            )
        kind, call = methods[method]
        params = envelope.get("params", {})
        try:
            parsed = json_format.ParseDict(params, kind(), ignore_unknown_fields=False)
        except (json_format.ParseError, TypeError, ValueError, AttributeError) as exc:
            return _error(-32602, f"invalid params for {method}: {exc}", request_id)
        if method in _STREAMING:
            events = _sse(call(parsed), request_id)
            return StreamingResponse(
                events, media_type="text/event-stream", headers={"Cache-Control": "no-store"}
            )
        try:
            result = await call(parsed)
        except Exception as exc:
            return JSONResponse(_failure(exc, request_id, method))
        data = json_format.MessageToDict(result)
        return JSONResponse({"jsonrpc": "2.0", "id": request_id, "result": data})

    return endpoint


def _plain_id(request_id: Any) -> Any:
    return (
        request_id
        if isinstance(request_id, str | int) and not isinstance(request_id, bool)
        else None
    )


def _failure(exc: Exception, request_id: Any, method: str) -> dict[str, Any]:
    from a2a.utils import errors as a2a_errors

    from ._agent import protocol_error

    error = protocol_error(exc)
    if error is None:
        _log.error("a2a request failed", method=method, error=type(exc).__name__, detail=str(exc))
        error = a2a_errors.InternalError("internal error: the server's log says more")
    return _a2a_error(error, request_id)


async def _sse(events: AsyncIterator[Any], request_id: Any) -> AsyncIterator[bytes]:
    from google.protobuf import json_format

    try:
        async for event in events:
            data = {"jsonrpc": "2.0", "id": request_id, "result": json_format.MessageToDict(event)}
            yield f"data: {json.dumps(data)}\n\n".encode()
    except Exception as exc:
        yield f"data: {json.dumps(_failure(exc, request_id, 'stream'))}\n\n".encode()
