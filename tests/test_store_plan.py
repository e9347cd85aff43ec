"""The pure batch check both stores share: one refused request never sinks its batch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arkhon_rheo import DuplicateEvent, SessionError, SessionNotFound
from arkhon_rheo.store._plan import Append, Create, Flush, SetStatus, plan

if TYPE_CHECKING:
    from arkhon_rheo.store._codec import EventRow


def row(session_id: str, seq: int) -> EventRow:
    return (
        session_id,
        seq,
        "step",
        None,
        "A",
        "B",
        "[]",
        "[]",
        "{}",
        1,
        0.0,
        0.0,
        None,
        None,
        None,
    )


def append(session_id: str, *seqs: int, status: str | None = None) -> Append:
    return Append(session_id, [row(session_id, s) for s in seqs], None, status)


def test_a_bad_request_is_excluded_and_the_rest_written() -> None:
    known = {"a": (2, "running"), "b": (0, "running")}
    result = plan(
        [append("a", 3), append("b", 5), append("a", 4, 5), append("b", 1), Flush()],
        known,
        now=9.0,
    )
    assert [type(e) for e in result.errors] == [
        type(None),
        DuplicateEvent,
        type(None),
        type(None),
        type(None),
    ]
    assert [(r[0], r[1]) for r in result.events] == [("a", 3), ("a", 4), ("a", 5), ("b", 1)]
    assert result.updated == {"a": (5, "running"), "b": (1, "running")}
    assert result.appended == 4
    assert known == {"a": (2, "running"), "b": (0, "running")}  # not modified


def test_create_then_append_in_one_batch_and_unknown_sessions() -> None:
    create = Create("n", "m", "running", None, "{}", 1.0)
    result = plan(
        [append("n", 1), create, append("n", 1, status="paused"), create, SetStatus("x", "done")],
        {},
        now=2.0,
    )
    errors = result.errors
    assert isinstance(errors[0], SessionNotFound)
    assert errors[1] is None
    assert errors[2] is None
    assert isinstance(errors[3], SessionError)
    assert isinstance(errors[4], SessionNotFound)
    assert result.created == [("n", "m", "running", 0, 1.0, 2.0, None)]
    assert result.snapshots == [("n", 0, "{}")]
    assert result.updated == {"n": (1, "paused")}
