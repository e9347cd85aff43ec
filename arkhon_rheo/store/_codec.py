"""Rows: how events, snapshots and session records become compact rows and back.

Both stores keep exactly these rows (the in-memory one in dicts, the SQLite one
in tables), so they return identical data: JSON columns are written with
``separators=(",", ":")`` and no NaN, so what is loaded equals what was stored.
Encoding happens in the caller's task, before anything is queued: a value that
cannot be stored is refused there and never reaches a transaction.

An event row is compact (schema version 4). What repeats from event to event
(the kind, stage, lifecycle states, read and write sets, and the names of the
fields its patch writes) is its *shape*, a short JSON array kept once per
store (the SQLite store interns it in its ``shapes`` table: a row holds its
number); the row's patch is then the JSON array of the patch's values in the
shape's order, e.g. ``["42"]`` for ``{"set": {"observation": "42"}}``. The
supervisor's patches come encoded already (`EncodedPatch`): their bytes are
spliced in as they are. A patch of any other form is kept whole (its shape has
no names), as are the patches of files written before version 4. A snapshot
larger than `COMPRESS_OVER` bytes is kept zlib-compressed (a ``bytes`` value;
a ``str`` is plain JSON).
"""

from __future__ import annotations

import json
import zlib
from typing import TYPE_CHECKING, Any

from .._errors import (
    ConfigurationError,
    SessionsDamaged,
    StoreCorrupt,
    StoreError,
    UnserializablePatch,
)
from ..protocols import SessionRecord, StoredEvent, StoredMessage
from ..protocols._seams import EncodedJson, EncodedPatch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

__all__ = [
    "COMPRESS_OVER",
    "EventRow",
    "MessageRow",
    "SessionRow",
    "Snapshot",
    "damaged",
    "decode_event",
    "decode_message",
    "decode_record",
    "decode_records",
    "decode_snapshot",
    "dumps",
    "encode_events",
    "encode_snapshot",
    "loads",
    "shape_of",
    "upgrade_row",
]

#: ``(session_id, seq, shape, patch, attempt, started_at, finished_at, error, io,
#: digest)``: the shape as JSON text, the patch as JSON bytes (or text), the error
#: and I/O record as JSON text.
EventRow = tuple[
    str,
    int,
    str,
    "bytes | str",
    int,
    float,
    float,
    "str | None",
    "str | None",
    "int | None",
]
#: ``(id, machine, status, last_seq, created_at, updated_at, parent, fingerprint,
#: waiting, wake_at)``, the fingerprint and what it waits for as JSON text.
SessionRow = tuple[
    str, str, str, int, float, float, "str | None", "str | None", "str | None", "float | None"
]
#: ``(session_id, message_id, position, kind, payload, posted_at, due_at,
#: applied_seq)``: an inbox message, its payload as JSON text.
MessageRow = tuple[str, str, int, str, str, float, float, "int | None"]
#: A stored snapshot: JSON text, or zlib-compressed JSON bytes.
Snapshot = str | bytes
#: Snapshots longer than this many bytes of JSON are stored compressed.
COMPRESS_OVER = 512


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
_CACHE_MAX = 4096
#: The shape text of each ``(kind, stage, from, to, reads, writes, set, append)``.
_SHAPES: dict[tuple[Any, ...], str] = {}
#: The parsed form of each shape text read back.
_PARSED: dict[str, tuple[Any, ...]] = {}


def shape_of(key: tuple[Any, ...]) -> str:
    """The shape text of ``(kind, stage, from_state, to_state, reads, writes, set, append)``.

    ``set`` and ``append`` are the names of the fields the patch assigns and
    appends to, or both ``None`` for a patch kept whole.
    """
    text = _SHAPES.get(key)
    if text is None:
        if len(_SHAPES) >= _CACHE_MAX:
            _SHAPES.clear()
        text = _SHAPES[key] = _encode(list(key))
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


def encode_snapshot(state: Any, *, what: str, location: str = "") -> Snapshot:
    """A state as a snapshot row's value: ``bytes`` are JSON encoded already.

    Raises:
        StoreError: The state is not JSON data.
    """
    if isinstance(state, bytes):
        try:  # unless pydantic wrote them, make sure the bytes are JSON before they are kept
            if type(state) is not EncodedJson:
                loads(state)
        except ValueError as exc:
            raise StoreError(
                f"{what} cannot be stored: its bytes are not JSON ({exc})", location=location
            ) from exc
        text = state
    else:
        text = dumps(state, what=what, location=location).encode()
    if len(text) > COMPRESS_OVER:
        return zlib.compress(text, 1)
    return text.decode()


#: What a damaged row's error says to do about it.
_DAMAGED = (
    "Restore the store from a backup, or delete the session; the store's other "
    "sessions read as before"
)
#: What reading a damaged JSON column raises: not JSON (or not text), nested too deep.
_UNREADABLE = (ValueError, TypeError, RecursionError, zlib.error)


def damaged(session_id: str, what: str, exc: BaseException) -> StoreCorrupt:
    """The error for a row of session ``session_id`` whose ``what`` does not decode.

    Args:
        session_id: The session the row belongs to.
        what: What the row's value is ("its machine fingerprint", "its snapshot"...).
        exc: What reading it raised.
    """
    if isinstance(exc, RecursionError):
        reason = "nested too deep to read"
    else:
        reason = f"not JSON ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    return StoreCorrupt(
        f"session {session_id!r} is damaged in the store: {what} is {reason}. {_DAMAGED}",
        session_id=session_id,
    )


def decode_snapshot(value: Snapshot, session_id: str) -> Any:
    """The state a snapshot row's value holds, as JSON data.

    Raises:
        StoreCorrupt: The value is not JSON (or nested too deep), naming ``session_id``.
    """
    try:
        if isinstance(value, bytes):
            return loads(zlib.decompress(value))
        return loads(value)
    except _UNREADABLE as exc:
        raise damaged(session_id, "a snapshot of its state", exc) from exc


def _compact(patch: Any) -> tuple[tuple[str, ...], tuple[str, ...], list[Any]] | None:
    """``(set names, append names, values)`` of a ``{"set", "append"}`` patch, else ``None``."""
    if type(patch) is not dict:
        return None
    keys = tuple(patch)
    if keys not in (("set",), ("append",), ("set", "append"), ()):
        return None
    assigned = patch.get("set", {})
    appended = patch.get("append", {})
    if "set" in patch and (type(assigned) is not dict or not assigned):
        return None
    if "append" in patch and (
        type(appended) is not dict
        or not appended
        or any(type(items) is not list for items in appended.values())
    ):
        return None
    return tuple(assigned), tuple(appended), [*assigned.values(), *appended.values()]


def _dump_patch(event: StoredEvent, location: str) -> tuple[Any, Any, bytes]:
    """``(set names, append names, patch bytes)`` of an event's patch."""
    patch = event.patch
    if type(patch) is EncodedPatch:
        values, appends = patch.values, patch.appends
        if not appends:  # the common case, without a list of parts
            return tuple(values), (), b"[" + b",".join(values.values()) + b"]"
        parts = list(values.values())
        parts += [b"[" + b",".join(items) + b"]" for items in appends.values()]
        return tuple(values), tuple(appends), b"[" + b",".join(parts) + b"]"
    compact = _compact(patch)
    try:
        if compact is None:
            return None, None, _encode(patch).encode()
        return compact[0], compact[1], _encode(compact[2]).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        field = "patch"
        if isinstance(patch, dict):
            for part in patch.values():
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


# (What each column is, for the error, is only spelled out for a value there is.)
def _dump_error(event: StoredEvent, location: str) -> str:
    return dumps(event.error, what=f"error of event #{event.seq}", location=location)


def _dump_io(event: StoredEvent, location: str) -> str:
    return dumps(event.io, what=f"I/O record of event #{event.seq}", location=location)


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
        assigned, appended, patch = _dump_patch(event, location)
        shape = shape_of(
            (
                event.kind,
                event.stage,
                event.from_state,
                event.to_state,
                tuple(event.reads),
                tuple(event.writes),
                assigned,
                appended,
            )
        )
        rows.append(
            (
                session_id,
                event.seq,
                shape,
                patch,
                event.attempt,
                event.started_at,
                event.finished_at,
                None if event.error is None else _dump_error(event, location),
                None if event.io is None else _dump_io(event, location),
                event.digest,
            )
        )
    return rows


def upgrade_row(row: Sequence[Any]) -> EventRow:
    """A version 3 event row (15 columns, JSON as text) as a version 4 row: the same data."""
    try:
        compact = _compact(loads(row[8]))
    except ValueError:  # damaged already: kept as it is, for a replay to report
        compact = None
    if compact is None:
        assigned, appended, patch = None, None, row[8].encode()
    else:
        assigned, appended = compact[0], compact[1]
        patch = _encode(compact[2]).encode()
    reads, writes = tuple(loads(row[6])), tuple(loads(row[7]))
    shape = shape_of((row[2], row[3], row[4], row[5], reads, writes, assigned, appended))
    return (row[0], row[1], shape, patch, *row[9:15])


def _parsed(shape: str) -> tuple[Any, ...]:
    found = _PARSED.get(shape)
    if found is None:
        kind, stage, source, target, reads, writes, assigned, appended = loads(shape)
        found = (
            kind,
            stage,
            source,
            target,
            tuple(reads),
            tuple(writes),
            None if assigned is None else tuple(assigned),
            None if appended is None else tuple(appended),
        )
        if len(_PARSED) >= _CACHE_MAX:
            _PARSED.clear()
        _PARSED[shape] = found
    return found


def _patch(data: Any, assigned: tuple[str, ...] | None, appended: tuple[str, ...] | None) -> Any:
    if (
        assigned is None
        or appended is None
        or type(data) is not list
        or len(data) != len(assigned) + len(appended)
    ):
        return data  # kept whole (or damaged: the caller's decoding says so)
    patch: dict[str, Any] = {}
    if assigned:
        patch["set"] = dict(zip(assigned, data, strict=False))
    if appended:
        patch["append"] = dict(zip(appended, data[len(assigned) :], strict=True))
    return patch


def decode_event(row: Sequence[Any]) -> StoredEvent:
    """Turn an event row back into a `StoredEvent`.

    Raises:
        StoreCorrupt: A column of it is not JSON (or nested too deep), naming the session.
    """
    try:
        return _event(row)
    except _UNREADABLE as exc:
        raise damaged(row[0], f"event #{row[1]}", exc) from exc


def _event(row: Sequence[Any]) -> StoredEvent:
    kind, stage, source, target, reads, writes, assigned, appended = _parsed(row[2])
    return StoredEvent(
        session_id=row[0],
        seq=row[1],
        kind=kind,
        stage=stage,
        from_state=source,
        to_state=target,
        reads=reads,
        writes=writes,
        patch=_patch(loads(row[3]), assigned, appended),
        attempt=row[4],
        started_at=row[5],
        finished_at=row[6],
        error=None if row[7] is None else loads(row[7]),
        io=None if row[8] is None else loads(row[8]),
        digest=row[9],
    )


def _column(row: Sequence[Any], index: int, what: str) -> Any:
    text = row[index]
    if text is None:
        return None
    try:
        return loads(text)
    except _UNREADABLE as exc:
        raise damaged(row[0], what, exc) from exc


def decode_record(row: Sequence[Any]) -> SessionRecord:
    """Turn a session row back into a `SessionRecord`.

    Raises:
        StoreCorrupt: Its fingerprint or what it waits for is not JSON (or
            nested too deep), naming the session.
    """
    return SessionRecord(
        session_id=row[0],
        machine=row[1],
        status=row[2],
        last_seq=row[3],
        created_at=row[4],
        updated_at=row[5],
        parent=row[6],
        fingerprint=_column(row, 7, "its machine fingerprint"),
        waiting=_column(row, 8, "what it waits for"),
        wake_at=row[9],
    )


def decode_records(rows: Iterable[Sequence[Any]], location: str = "") -> tuple[SessionRecord, ...]:
    """Turn session rows back into `SessionRecord` s, every one that decodes.

    Raises:
        SessionsDamaged: Some do not (see `decode_record`): it names each, and
            holds the records of the others.
    """
    records: list[SessionRecord] = []
    found: list[tuple[str, str, str]] = []
    for row in rows:
        try:
            records.append(decode_record(row))
        except StoreCorrupt as exc:
            found.append((row[0], str(row[1]), str(exc)))
    if found:
        raise SessionsDamaged(tuple(records), tuple(found), location=location)
    return tuple(records)


def decode_message(row: Sequence[Any]) -> StoredMessage:
    """Turn an inbox row back into a `StoredMessage`."""
    return StoredMessage(
        session_id=row[0],
        message_id=row[1],
        position=row[2],
        kind=row[3],
        payload=_column(row, 4, f"inbox message {row[1]!r}"),
        posted_at=row[5],
        due_at=row[6],
        applied_seq=row[7],
    )
