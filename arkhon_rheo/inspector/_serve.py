"""`create_app` and `serve`: the inspector as an ASGI app, and on a local port.

Both need the ``inspector`` extra (Starlette, Jinja2, python-multipart and
Hypercorn, which serves on asyncio and on trio alike); without it they raise
`ConfigurationError` saying what to install. Importing this module needs
nothing beyond the library.
"""

from __future__ import annotations

import importlib
import ipaddress
import os
import socket
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from secrets import token_urlsafe
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import ConfigurationError
from .._log import get_logger
from ..protocols import Machine

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from starlette.applications import Starlette

    from ..core import Keyring

__all__ = ["create_app", "serve"]

_log = get_logger("arkhon_rheo.inspector")

#: The Host headers a loopback-bound inspector answers (guards against DNS rebinding).
_LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
#: Seconds open requests get to finish once the server is asked to stop.
_GRACE = 2.0


def _require_extra() -> None:
    missing = []
    for module in ("starlette", "jinja2", "python_multipart", "hypercorn"):
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ConfigurationError(
            f"the inspector needs {', '.join(missing)}: install the extra with "
            f"pip install 'arkhon-rheo[inspector]'"
        )


def _machines_by_name(
    machines: Mapping[str, Machine[Any]] | Iterable[Machine[Any]],
) -> dict[str, Machine[Any]]:
    if isinstance(machines, Mapping):
        items = list(machines.items())
    else:
        items = []
        for machine in machines:
            if not isinstance(machine, Machine):
                raise ConfigurationError(f"machines must be Machine objects, got {machine!r}")
            items.append((machine.name, machine))
    found: dict[str, Machine[Any]] = {}
    for name, machine in items:
        if not isinstance(machine, Machine):
            raise ConfigurationError(f"machine {name!r} is not a Machine: {machine!r}")
        if name in found and found[name] is not machine:
            raise ConfigurationError(
                f"two machines are named {name!r}: give each machine of the store once"
            )
        found[name] = machine
    return found


def _store_file(store_path: str | os.PathLike[str]) -> Path | str:
    if str(store_path).lower().startswith(("postgresql://", "postgres://")):
        return str(store_path)  # its store registers its password as a secret: never shown
    path = Path(store_path)
    if not path.is_file():
        raise ConfigurationError(
            f"no store file at {str(path)!r}: pass the SQLite file your AgentSystem writes "
            f"(./arkhon-rheo.db by default)"
        )
    return path


def create_app(
    store_path: str | os.PathLike[str],
    *,
    machines: Mapping[str, Machine[Any]] | Iterable[Machine[Any]] = (),
    token: str | None = None,
    protect_reads: bool = False,
    allowed_hosts: Iterable[str] | None = None,
    secrets: Keyring | None = None,
) -> Starlette:
    """The inspector as an ASGI app over the store at ``store_path`` (a file, or a URL).

    The app's lifespan opens the store through an `AgentSystem` of its own: a
    session resumed from the page runs in that system, as long as the app
    does. Every ``POST`` (decisions, re-executed replays) needs ``token``, in
    the ``X-Arkhon-Token`` header or the ``token`` form field; a browser that
    opens ``/?token=TOKEN`` keeps it in a same-site cookie, and its forms
    carry it. The token is ``app.state.token``.

    Args:
        store_path: The SQLite file sessions are stored in, or a ``postgresql://`` URL.
        machines: The machines of the store's sessions, by name (or a list of
            them, named by ``Machine.name``): deciding a paused session and
            replaying one need its machine; the other views need the store only.
        token: The token changes need; ``None`` makes a random one.
        protect_reads: Make every page need the token too (for an inspector
            reachable from other machines).
        allowed_hosts: The ``Host`` headers answered; by default the loopback
            names only, so a web page elsewhere cannot reach the inspector
            through a DNS name that points at 127.0.0.1.
        secrets: The keyring of sessions with `Sensitive` fields, to fold,
            decide and replay them with their machine; their values are shown
            as ``[SENSITIVE]`` all the same.

    Returns:
        The Starlette app.

    Raises:
        ConfigurationError: If the extra is not installed, the store file does
            not exist, a machine is not a `Machine`, two share a name, or the
            token is empty.
    """
    _require_extra()
    path = _store_file(store_path)
    by_name = _machines_by_name(machines)
    if token is None:
        token = token_urlsafe(24)
    if not isinstance(token, str) or not token:
        raise ConfigurationError(f"token must be a non-empty string, got {token!r}")
    from ._app import build_app

    hosts = list(allowed_hosts) if allowed_hosts is not None else list(_LOOPBACK_HOSTS)
    return build_app(
        path, by_name, token, protect_reads=protect_reads, allowed_hosts=hosts, secrets=secrets
    )


def read_token_file(name: str) -> str:
    """The token in the file ``name`` (surrounding whitespace, such as its newline, dropped)."""
    path = Path(name)
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise ConfigurationError(f"the token file {name!r} is not a regular file")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        raise ConfigurationError(f"cannot read the token file {name!r}: {why}") from None
    token = text.strip()
    if not token:
        raise ConfigurationError(f"the token file {name!r} is empty: write the token in it")
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        print(
            f"warning: other users can read the token file {name!r}: chmod 600 it",
            file=sys.stderr,
        )
    return token


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (port 0: any free one)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigurationError(f"cannot listen on {host!r}: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigurationError(
            f"cannot listen on {host}:{port} ({exc.strerror}): choose another port"
        ) from exc
    return sock


def _check_address(
    host: str, port: int, *, token: str | None, allow_remote: bool, what: str = "the inspector"
) -> bool:
    """Refuse a port out of range, and an address that would expose ``what`` unasked.

    Returns:
        Whether ``host`` is reachable from other machines (it is then allowed).
    """
    remote = not is_loopback(host)
    if remote and not allow_remote:
        raise ConfigurationError(
            f"refusing to serve {what} on {host!r}, which other machines can reach: "
            f"pass allow_remote=True (--allow-remote) and a token to do so"
        )
    if remote and not token:
        raise ConfigurationError(
            f"serving on {host!r} needs a token of your own (token=..., --token-file"
            f"{' or ARKHON_INSPECTOR_TOKEN' if what == 'the inspector' else ''}): "
            f"everyone who can reach the address would otherwise depend on a printed one"
        )
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigurationError(f"port must be an integer from 0 to 65535, got {port!r}")
    return remote


async def serve(
    store_path: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    machines: Mapping[str, Machine[Any]] | Iterable[Machine[Any]] = (),
    token: str | None = None,
    allow_remote: bool = False,
    secrets: Keyring | None = None,
    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the inspector on ``host``:``port`` until cancelled, on asyncio or trio.

    It listens on the loopback address by default. Any other address needs
    ``allow_remote=True`` and a ``token`` of your own, and then every page
    needs the token, not only changes. Without a token a random one is made.
    The address to open (with the token in it) is printed once listening, and
    reported through ``task_status`` (``await task_group.start(serve, ...)``).

    Args:
        store_path: The SQLite file sessions are stored in, or a ``postgresql://`` URL.
        host: The address to listen on.
        port: The port (0: any free one).
        machines: The machines of the store's sessions (see `create_app`).
        token: The token changes need; ``None`` makes one.
        allow_remote: Allow an address other machines can reach.
        secrets: The keyring of sessions with `Sensitive` fields (see `create_app`).
        task_status: Reports the address to open, once listening.

    Raises:
        ConfigurationError: If ``host`` is not a loopback address and
            ``allow_remote`` is false or no token is given; if the port cannot
            be listened on; or for anything `create_app` refuses.
    """
    remote = _check_address(host, port, token=token, allow_remote=allow_remote)
    app = create_app(
        store_path,
        machines=machines,
        token=token,
        protect_reads=remote,
        allowed_hosts=["*"] if remote else None,
        secrets=secrets,
    )
    sock = _listen(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    url = f"http://{shown}:{bound}/?token={app.state.token}"

    def listening() -> None:
        print(f"arkhon-rheo inspector: open {url}", flush=True)
        _log.info("inspector listening", host=host, port=bound, store=str(store_path))
        task_status.started(url)

    await serve_asgi(app, sock, listening)


async def serve_asgi(app: Any, sock: socket.socket, listening: Callable[[], None]) -> None:
    """Serve the ASGI ``app`` with Hypercorn on the listening ``sock`` until cancelled.

    On asyncio or trio, whichever runs. ``listening`` is called once it is
    served. Cancelling asks the server to stop, open requests getting
    ``_GRACE`` seconds to finish.
    """
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.errorlog = None
    backend = _running_library()
    server = importlib.import_module(f"hypercorn.{backend}")
    config.graceful_timeout = _GRACE
    # Hypercorn's asyncio server does not survive being cancelled from outside:
    # it runs shielded, and a cancellation of `serve` asks it to shut down instead.
    stop = anyio.Event()

    async def run_server() -> None:
        with anyio.CancelScope(shield=True):
            await server.serve(app, config, mode="asgi", shutdown_trigger=stop.wait)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_server)
        listening()
        try:
            await anyio.sleep_forever()
        finally:
            stop.set()


def _running_library() -> str:
    try:
        import sniffio  # installed with trio; without it we can only be on asyncio
    except ImportError:  # pragma: no cover - trio (which needs sniffio) is not installed
        return "asyncio"
    return str(sniffio.current_async_library())
