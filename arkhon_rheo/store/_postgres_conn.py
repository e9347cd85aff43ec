"""How `PostgresStore` reaches PostgreSQL: its URL, its connections, and running scripts on them.

psycopg 3 is an optional dependency (the ``postgres`` extra): it is imported
when a store is opened, never when this package is. The store's SQL is written
as scripts (generators that yield ``(sql, parameters, mode)`` and receive the
rows, as in `._driver`), run whole by `run_now` on a synchronous psycopg
connection in a worker thread, so the same code runs on asyncio and trio
(psycopg's async connections need asyncio).

The URL's password is a secret: `redacted_url` registers it (and a
``password=`` query parameter) with the scrubbing registry and masks it, and
every psycopg error becomes a `StoreError` whose text is scrubbed and whose
cause is never psycopg's own exception (its text or arguments could quote the
connection string).
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Any, TypeVar

from .._errors import ConfigurationError, StoreError, StoreUnavailable
from .._redact import REDACTED, register_secret, scrub
from ._driver import step

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ._driver import Rows, Script, Statement
    from ._postgres_watch import Watchdog

__all__ = [
    "PIPELINE",
    "PIPELINE_EVERY",
    "SCHEMES",
    "Connection",
    "connect",
    "import_psycopg",
    "is_postgres_url",
    "notify_payloads",
    "pipeline",
    "redacted_url",
    "run_now",
    "sessions_channel",
    "translate",
]

T = TypeVar("T")
#: A `Statement` mode of this module's own: its parameters are statements, run in one
#: round trip (see `pipeline`); the rows of the last one come back, or (`PIPELINE_EVERY`)
#: a list of each one's rows.
PIPELINE = 32
PIPELINE_EVERY = 64
#: The URL schemes of a PostgreSQL store.
SCHEMES = ("postgresql://", "postgres://")
#: A psycopg connection (typed loosely: psycopg is optional).
Connection = Any
_INSTALL = 'pip install "arkhon-rheo[postgres]"'


def is_postgres_url(value: object) -> bool:
    """Whether ``value`` is a ``postgresql://`` or ``postgres://`` URL."""
    return isinstance(value, str) and value.lower().startswith(SCHEMES)


def redacted_url(url: str) -> str:
    """``url`` as it may be shown: its password masked, and registered as a secret.

    ``postgresql://app:s3cret@db/agents`` shows as
    ``postgresql://app:[REDACTED]@db/agents``; a ``password=`` query parameter
    is masked (and registered) too.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.query:
        pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        shown = []
        for key, value in pairs:
            if key.lower() in ("password", "passfile", "sslpassword"):
                register_secret(value)
                register_secret(urllib.parse.quote(value, safe=""))
                value = REDACTED
            shown.append((key, value))
        parts = parts._replace(query=urllib.parse.urlencode(shown, safe="[]"))
    userinfo, at, host = parts.netloc.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if colon:
            for form in {password, urllib.parse.unquote(password)}:
                register_secret(form)
            parts = parts._replace(netloc=f"{user}:{REDACTED}@{host}")
    return urllib.parse.urlunsplit(parts)


def import_psycopg() -> Any:
    """The ``psycopg`` module.

    Raises:
        ConfigurationError: psycopg (with psycopg_pool) is not installed.
    """
    try:
        import psycopg
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            f"a PostgreSQL store needs psycopg 3 and psycopg_pool: {_INSTALL}"
        ) from None
    return psycopg


def translate(exc: BaseException, location: str, *, what: str = "PostgreSQL failed") -> StoreError:
    """A `StoreError` for a psycopg error: its text scrubbed, on one line, with no chained cause.

    The original error is not chained (``__cause__`` stays empty and
    ``__suppress_context__`` is set): its arguments may hold the connection string.
    A connection PostgreSQL could not make or ended (psycopg's
    ``OperationalError``: a restart, an administrator, the idle-in-transaction
    timeout) is a `StoreUnavailable`: a run that meets it stops, to go on from
    its last commit, rather than failing its session.
    """
    psycopg = import_psycopg()
    text = scrub(str(exc).strip() or type(exc).__name__)
    # One line (libpq adds its hint, "Is the server running...", on a line of its own).
    text = "; ".join(line.strip() for line in text.splitlines() if line.strip())
    kind = type(exc).__name__
    if isinstance(exc, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected):
        kind = "a conflict with another transaction"
    cls = StoreUnavailable if isinstance(exc, psycopg.OperationalError) else StoreError
    error = cls(f"{what} on {location}: {kind}: {text}", location=location)
    error.__suppress_context__ = True
    return error


def connect(
    url: str,
    location: str,
    *,
    autocommit: bool = True,
    options: Mapping[str, Any] | None = None,
) -> Connection:
    """A new synchronous connection to ``url`` (blocking; run it in a worker thread).

    ``options``: psycopg's connection options (a connect timeout, keepalives: see
    `._postgres_watch.connection_options`).

    Raises:
        StoreUnavailable: PostgreSQL cannot be reached, or did not answer in time.
        StoreError: PostgreSQL refused the connection.
    """
    psycopg = import_psycopg()
    try:
        return psycopg.connect(url, autocommit=autocommit, **(options or {}))
    except psycopg.Error as exc:
        error = translate(exc, location, what="cannot connect to PostgreSQL")
    raise error


def pipeline(statements: Sequence[Statement], *, every: bool = False) -> Statement:
    """One statement that runs ``statements`` in one round trip (psycopg's pipeline mode).

    The rows of the last one come back (``every``: a list of each one's rows).
    Should one fail, PostgreSQL skips the ones after it, and the error is
    raised as for one statement: in a transaction, the script rolls it back.
    """
    return ("", statements, PIPELINE_EVERY if every else PIPELINE)


def _rows_of(cursor: Any, mode: int) -> Rows:
    if mode & 2:
        return [(cursor.rowcount,)]
    if mode or cursor.description is None:
        return []
    rows: Rows = cursor.fetchall()
    return rows


def _run(connection: Connection, statement: Statement) -> Rows:
    sql, params, mode = statement
    with connection.cursor() as cursor:
        if mode & 1:
            cursor.executemany(sql, params)
        else:
            cursor.execute(sql, params)
        return _rows_of(cursor, mode)


def _run_pipeline(connection: Connection, statements: Sequence[Statement]) -> list[Rows]:
    cursors = []
    try:
        with connection.pipeline() as pipe:
            for sql, params, mode in statements:
                cursor = connection.cursor()
                cursors.append(cursor)
                if mode & 1:
                    cursor.executemany(sql, params)
                else:
                    cursor.execute(sql, params)
            pipe.sync()  # every result is in: the cursors' rows may be read
            return [
                _rows_of(cursor, statement[2])
                for cursor, statement in zip(cursors, statements, strict=True)
            ]
    finally:
        for cursor in cursors:
            cursor.close()


def _execute(connection: Connection, statement: Statement, location: str) -> Rows:
    psycopg = import_psycopg()
    try:
        if statement[2] == PIPELINE:
            return _run_pipeline(connection, statement[1])[-1]  # type: ignore[arg-type]
        if statement[2] == PIPELINE_EVERY:
            return _run_pipeline(connection, statement[1])  # type: ignore[arg-type, return-value]
        return _run(connection, statement)
    except psycopg.Error as exc:
        error = translate(exc, location)
        error.sqlstate = getattr(exc, "sqlstate", None)  # type: ignore[attr-defined]
    raise error


def run_now(
    connection: Connection, script: Script[T], location: str, watchdog: Watchdog | None = None
) -> T:
    """Run the whole script on ``connection``, on the calling thread.

    With ``watchdog``, each statement the server does not answer within its
    limit has its connection cut, and fails with `StoreUnavailable`.

    Raises:
        StoreError: A statement failed and the script did not handle it.
    """
    try:
        first = next(script)
    except StopIteration as stop:
        result: T = stop.value
        return result
    if watchdog is None:
        return step(script, first, lambda statement: _execute(connection, statement, location))

    def watched(statement: Statement) -> Rows:
        with watchdog.watching(connection):
            return _execute(connection, statement, location)

    return step(script, first, watched)


def sessions_channel(channel: str) -> str:
    """The channel of the session changes beside work queue ``channel`` (63 characters at most)."""
    return f"{channel[:55]}_changes"


def notify_payloads(ids: list[str], limit: int = 7900) -> list[str]:
    """``ids`` as newline-separated payloads of at most ``limit`` bytes (PostgreSQL's cap: 8000)."""
    payloads: list[str] = []
    current: list[str] = []
    size = 0
    for each in ids:
        length = len(each.encode()) + 1
        if length > limit:
            continue  # an id that long is left to the asks' polling
        if size + length > limit:
            payloads.append("\n".join(current))
            current, size = [], 0
        current.append(each)
        size += length
    if current:
        payloads.append("\n".join(current))
    return payloads
