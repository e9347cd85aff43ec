"""Rows: how events, snapshots and session records become compact JSON text and back.

Both stores keep exactly these rows (the in-memory one in dicts, the SQLite one
in tables), so they return identical data: JSON columns are text written with
``separators=(",", ":")`` and no NaN, so what is loaded equals what was stored.
Encoding happens in the caller's task, before anything is queued: a value that
cannot be stored is refused there and never reaches a transaction.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError, StoreError, UnserializablePatch
from ..protocols import SessionRecord, StoredEvent

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "EventRow",
    "SessionRow",
    "decode_event",
    "decode_record",
    "dumps",
    "encode_events",
    "loads",
]

#: ``(session_id, seq, kind, stage, from_state, to_state, reads, writes, patch,
#: attempt, started_at, finished_at, error, io, digest)``, JSON columns as text.
EventRow = tuple[
    str,
    int,
    str,
    "str | None",
    str,
    str,
    str,
    str,
    str,
    int,
    float,
    float,
    "str | None",
    "str | None",
    "int | None",
]
#: ``(id, machine, status, last_seq, created_at, updated_at, parent, fingerprint)``,
#: the fingerprint as JSON text.
SessionRow = tuple[str, str, str, int, float, float, "str | None", "str | None"]


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _make_encoder() -> Callable[[Any], str]:
    # `json.JSONEncoder.encode` builds a new C encoder on every call; build it once
    # (no circular-reference check: a cycle raises RecursionError, refused alike).
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has the C accelerator
        return json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode
    text = json.encoder.encode_basestring
    chunks = make(None, _refuse, text, None, ":", ",", False, False, False)
    join = "".join

    def encode(value: Any) -> str:
        return join(chunks(value, 0))

    return encode


_encode = _make_encoder()
loads = json.loads
#: The JSON text of read and write sets, which repeat from event to event.
_NAMES: dict[tuple[str, ...], str] = {}
_NAMES_MAX = 4096


def _names(names: tuple[str, ...]) -> str:
    text = _NAMES.get(names)
    if text is None:
        if len(_NAMES) >= _NAMES_MAX:
            _NAMES.clear()
        text = _NAMES[names] = _encode(list(names))
    return text


def dumps(value: Any, *, what: str, location: str = "") -> str:
    """Encode ``value`` as compact JSON text.

    Args:
        value: JSON-compatible data.
        what: What the value is, for the error message.
        location: The store's location, for the error.

    Returns:
        The JSON text.

    Raises:
        StoreError: The value is not JSON data (or holds NaN or infinity).
    """
    try:
        return _encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise StoreError(
            f"{what} cannot be stored: {exc}; store plain JSON data only", location=location
        ) from exc


def _dump_patch(event: StoredEvent, location: str) -> str:
    try:
        return _encode(event.patch)
    except (TypeError, ValueError, RecursionError) as exc:
        field = "patch"
        if isinstance(event.patch, dict):
            for part in event.patch.values():
                if not isinstance(part, dict):
                    continue
                for name, value in part.items():
                    try:
                        _encode(value)
                    except (TypeError, ValueError, RecursionError):
                        field = str(name)
                        break
        error = UnserializablePatch(stage=event.stage, field=field, reason=str(exc))
        error.location = location
        raise error from exc


def _dump_optional(value: Any, *, what: str, location: str) -> str | None:
    return None if value is None else dumps(value, what=what, location=location)


def encode_events(
    session_id: str, events: Sequence[StoredEvent], location: str = ""
) -> list[EventRow]:
    """Encode the events of one append.

    Args:
        session_id: The session they are appended to.
        events: The events.
        location: The store's location, for errors.

    Returns:
        One row per event.

    Raises:
        ConfigurationError: An event belongs to another session.
        UnserializablePatch: A patch holds a value that is not JSON data.
        StoreError: Another column (error, I/O record) is not JSON data.
    """
    rows: list[EventRow] = []
    for event in events:
        if event.session_id != session_id:
            raise ConfigurationError(
                f"event #{event.seq} of session {event.session_id!r} was appended to "
                f"session {session_id!r}; append each session's events to that session"
            )
        rows.append(
            (
                session_id,
                event.seq,
                event.kind,
                event.stage,
                event.from_state,
                event.to_state,
                _names(event.reads),
                _names(event.writes),
                _dump_patch(event, location),
                event.attempt,
                event.started_at,
                event.finished_at,
                _dump_optional(event.error, what=f"error of event #{event.seq}", location=location),
                _dump_optional(
                    event.io, what=f"I/O record of event #{event.seq}", location=location
                ),
                event.digest,
            )
        )
    return rows


def decode_event(row: Sequence[Any]) -> StoredEvent:
    """Turn an event row back into a `StoredEvent`."""
    return StoredEvent(
        session_id=row[0],
        seq=row[1],
        kind=row[2],
        stage=row[3],
        from_state=row[4],
        to_state=row[5],
        reads=tuple(loads(row[6])),
        writes=tuple(loads(row[7])),
        patch=loads(row[8]),
        attempt=row[9],
        started_at=row[10],
        finished_at=row[11],
        error=None if row[12] is None else loads(row[12]),
        io=None if row[13] is None else loads(row[13]),
        digest=row[14],
    )


def decode_record(row: Sequence[Any]) -> SessionRecord:
    """Turn a session row back into a `SessionRecord`."""
    return SessionRecord(
        session_id=row[0],
        machine=row[1],
        status=row[2],
        last_seq=row[3],
        created_at=row[4],
        updated_at=row[5],
        parent=row[6],
        fingerprint=None if row[7] is None else loads(row[7]),
    )
