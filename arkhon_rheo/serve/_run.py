"""`serve_a2a`: agents served over A2A on a port, with an agent system of their own.

What ``arkhon-rheo serve`` runs. It listens on the loopback address unless
told otherwise (with a token then), as the inspector does, and with the same
code. At start, and then every ``recover_every`` seconds, it resumes the
sessions of its agents whose driving process died (a replica killed
mid-turn): their tasks go on here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from .._errors import ConfigurationError
from .._log import get_logger
from ..inspector._seams import check_address, listen, serve_asgi
from ..system import AgentSystem
from ._app import a2a_app, agents_of, require_sdk

if TYPE_CHECKING:
    import os
    from collections.abc import Sequence

    from ..core import Keyring
    from ..protocols import Machine
    from ._served import Served

__all__ = ["serve_a2a"]

_log = get_logger("arkhon_rheo.serve")

#: The Host headers a loopback-bound server answers (guards against DNS rebinding).
_LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]


async def serve_a2a(
    agents: Machine[Any] | Served | Sequence[Machine[Any] | Served],
    *,
    store: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    allow_remote: bool = False,
    secrets: Keyring | None = None,
    recover_every: float = 30.0,
    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``agents`` over A2A on ``host``:``port`` until cancelled (asyncio or trio).

    Args:
        agents: The agents (see `a2a_app`).
        store: The SQLite file, or a ``postgresql://`` URL, their sessions live in.
        host: The address to listen on (loopback by default).
        port: The port (0: any free one).
        token: If given, every JSON-RPC request needs it as a bearer token.
        allow_remote: Allow an address other machines can reach (needs ``token``).
        secrets: The keyring of sessions with `Sensitive` fields.
        recover_every: Seconds between two looks for sessions whose driver died
            (each look reads every session's record: mind it on a large store).
        task_status: Reports the served URL, once listening.

    Raises:
        ConfigurationError: Without the ``a2a`` extra; for an address other
            machines can reach without ``allow_remote`` and a token; a port
            that cannot be listened on; or anything `a2a_app` refuses.
    """
    require_sdk()
    remote = check_address(
        host, port, token=token, allow_remote=allow_remote, what="agents over A2A"
    )
    if not recover_every > 0:
        raise ConfigurationError(f"recover_every must be positive, got {recover_every!r}")
    served = agents_of(agents)
    machines = [each.machine for each in served]
    async with AgentSystem(store=str(store), machines=machines, secrets=secrets) as system:
        for machine in machines:
            await system.recover(machine)  # the tasks a dead replica was driving go on here
        app = a2a_app(
            system, served, token=token, allowed_hosts=None if remote else _LOOPBACK_HOSTS
        )
        sock = listen(host, port)
        bound = sock.getsockname()[1]
        shown = f"[{host.strip('[]')}]" if ":" in host else host
        url = f"http://{shown}:{bound}/"

        def listening() -> None:
            print(f"arkhon-rheo serve: A2A on {url}", flush=True)
            paths = [each.path or "/" for each in served]
            _log.info("a2a listening", host=host, port=bound, agents=paths)
            task_status.started(url)

        async with anyio.create_task_group() as group:
            group.start_soon(_recovering, system, machines, recover_every)
            await serve_asgi(app, sock, listening)


async def _recovering(system: AgentSystem, machines: list[Machine[Any]], every: float) -> None:
    """Resume, every ``every`` seconds, the sessions whose driving process died."""
    while True:
        await anyio.sleep(every)
        for machine in machines:
            try:
                await system.recover(machine)
            except Exception as exc:
                _log.warning("a2a recover failed", machine=machine.name, error=str(exc))
