"""A session's effect ledger: the requests that write it, their check, and its rows.

Before a tool with side effects runs, its intent is committed (`BeginEffect`);
when it returns, its outcome (`FinishEffect`). Each entry is keyed by the
call's idempotency key within its session. Both stores decide what an effect
request does with the same function (`plan_effect`, called by ``_plan.plan``
with what the batch knows of the entries it touches), so they behave the same;
the SQLite store reads that knowledge and writes the planned rows in the
batch's transaction (`._effects_sql`). `EffectLedger` is the stores' shared
half of the protocol methods (``begin_effect``, ``finish_effect``, ``effects``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio.lowlevel

from .._errors import ConfigurationError, SessionNotFound, StoreError
from .._hooks import current_injector
from ..protocols import EffectStatus, StoredEffect
from ._codec import dumps, loads

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "BeginEffect",
    "EffectLedger",
    "EffectRow",
    "FinishEffect",
    "decode_effect",
    "plan_effect",
]

#: ``(session_id, key, tool, arguments, status, attempts, started_at, finished_at,
#: result, error)``: the arguments and the result as JSON text, the status as its value.
EffectRow = tuple[str, str, str, str, str, int, float, "float | None", "str | None", "str | None"]
#: What a batch knows of the ledger entries it touches, by ``(session_id, key)``.
Known = dict[tuple[str, str], EffectRow]

_STARTED = EffectStatus.STARTED.value
_DONE = EffectStatus.DONE.value
_FAILED = EffectStatus.FAILED.value


@dataclass(slots=True)
class BeginEffect:
    """Commit the intent of an effect, unless the ledger has its key (see `Store.begin_effect`).

    Its result is ``(row, began)``.
    """

    session_id: str
    key: str
    tool: str
    arguments: str
    retry: bool


@dataclass(slots=True)
class FinishEffect:
    """Store a started effect's outcome: ``result`` (JSON text) or ``error``."""

    session_id: str
    key: str
    result: str | None
    error: str | None


def plan_effect(
    request: BeginEffect | FinishEffect,
    exists: bool,
    known: Known,
    written: Known,
    now: float,
    location: str,
) -> tuple[Exception | None, Any]:
    """Plan one effect request of a batch: why it is refused (or ``None``), and its result.

    Args:
        request: The request.
        exists: Whether its session exists (as the batch knows it).
        known: The entries the batch knows, updated with what it plans.
        written: The rows the batch writes, by ``(session_id, key)``; gains this one's.
        now: The store's time, for the entry's timestamps.
        location: The store, for errors.
    """
    sid, key = request.session_id, request.key
    if not exists:
        return SessionNotFound(session_id=sid), None
    row = known.get((sid, key))
    result: Any
    if isinstance(request, BeginEffect):
        if row is not None and (row[4] == _DONE or (row[4] == _STARTED and not request.retry)):
            return None, (row, False)
        attempts = 1 if row is None else row[5] + 1
        row = (sid, key, request.tool, request.arguments, _STARTED, attempts, now, None, None, None)
        result = (row, True)
    else:
        if row is None or row[4] != _STARTED:
            state = "was never begun" if row is None else f"is {row[4]} already"
            error = StoreError(
                f"session {sid!r}: effect {key!r} {state}; only a started effect is "
                "finished (nothing was written)",
                location=location,
            )
            return error, None
        status = _FAILED if request.error is not None else _DONE
        row = (*row[:4], status, row[5], row[6], now, request.result, request.error)
        result = row
    known[(sid, key)] = written[(sid, key)] = row
    return None, result


def effect_keys(requests: Sequence[Any]) -> dict[str, list[str]]:
    """The ledger keys the effect requests of a batch touch, by session."""
    keys: dict[str, list[str]] = {}
    for request in requests:
        if isinstance(request, BeginEffect | FinishEffect):
            keys.setdefault(request.session_id, []).append(request.key)
    return keys


def decode_effect(row: Sequence[Any]) -> StoredEffect:
    """A ledger row as a `StoredEffect`."""
    sid, key, tool, arguments, status, attempts, started_at, finished_at, result, error = row
    return StoredEffect(
        session_id=sid,
        key=key,
        tool=tool,
        arguments=loads(arguments),
        status=EffectStatus(status),
        attempts=attempts,
        started_at=started_at,
        finished_at=finished_at,
        result=None if result is None else loads(result),
        error=error,
    )


class EffectLedger:
    """The effect-ledger methods of the `Store` protocol, shared by both stores.

    A store provides `_write_effect` (commit one request, durably per its mode,
    and return its result) and `_effect_rows` (a session's rows, in order).
    """

    _location: str

    def _check_open(self) -> None:
        raise NotImplementedError  # pragma: no cover (StoreBase's)

    async def _write_effect(self, request: BeginEffect | FinishEffect) -> Any:
        raise NotImplementedError  # pragma: no cover

    async def _effect_rows(self, session_id: str) -> Sequence[Sequence[Any]]:
        raise NotImplementedError  # pragma: no cover

    def _effect_key(self, session_id: str, key: str) -> None:
        self._check_open()
        if not isinstance(key, str) or not key:
            raise ConfigurationError(
                f"an effect of session {session_id!r} needs a key (a non-empty str), got {key!r}"
            )

    async def begin_effect(
        self,
        session_id: str,
        key: str,
        *,
        tool: str,
        arguments: Any,
        retry: bool = False,
    ) -> tuple[StoredEffect, bool]:
        """Commit a side effect's intent before it runs, unless the ledger has ``key``.

        See `Store.begin_effect`: returns once the intent is committed (in every
        durability mode).

        Returns:
            The stored effect, and whether this call began it (run the effect only then).

        Raises:
            SessionNotFound: No such session.
            StoreError: ``arguments`` is not JSON data, the write failed, or the store
                is not open.
            ConfigurationError: ``key`` or ``tool`` is not a non-empty str.
        """
        if current_injector() is not None:
            await _inject(session_id, "begin_effect")
        self._effect_key(session_id, key)
        if not isinstance(tool, str) or not tool:
            raise ConfigurationError(f"effect {key!r}: tool must be a non-empty str, got {tool!r}")
        what = f"the arguments of effect {key!r} of session {session_id!r}"
        text = dumps(arguments, what=what, location=self._location)
        row, began = await self._write_effect(BeginEffect(session_id, key, tool, text, retry))
        return decode_effect(row), began

    async def finish_effect(
        self, session_id: str, key: str, *, result: Any = None, error: str | None = None
    ) -> StoredEffect:
        """Store a started effect's outcome (see `Store.finish_effect`).

        Raises:
            SessionNotFound: No such session.
            StoreError: The effect is not started, ``result`` is not JSON data, the
                write failed, or the store is not open; nothing is written.
            ConfigurationError: ``key`` is malformed, or ``error`` is not a str.
        """
        if current_injector() is not None:
            await _inject(session_id, "finish_effect")
        self._effect_key(session_id, key)
        if error is not None and not isinstance(error, str):
            raise ConfigurationError(f"effect {key!r}: error must be a str, got {error!r}")
        text = None
        if error is None:
            what = f"the result of effect {key!r} of session {session_id!r}"
            text = dumps(result, what=what, location=self._location)
        row = await self._write_effect(FinishEffect(session_id, key, text, error))
        return decode_effect(row)

    async def effects(self, session_id: str) -> tuple[StoredEffect, ...]:
        """The session's effect ledger, in the order its effects were first begun.

        Raises:
            SessionNotFound: No such session.
        """
        await anyio.lowlevel.checkpoint()
        return tuple(map(decode_effect, await self._effect_rows(session_id)))


async def _inject(session_id: str, operation: str) -> None:
    injector = current_injector()
    if injector is not None:
        await injector.inject("store", session_id, {"operation": operation})
