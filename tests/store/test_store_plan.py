"""The pure batch check both stores share: one refused request never sinks its batch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arkhon_rheo import SessionError, SessionLocked, SessionNotFound
from arkhon_rheo.errors import DuplicateEvent
from arkhon_rheo.store._plan import Acquire, Append, Create, Flush, Release, SetStatus, plan

if TYPE_CHECKING:
    from arkhon_rheo.store._codec import EventRow


def row(session_id: str, seq: int) -> EventRow:
    return (
        session_id,
        seq,
        '["step",null,"A","B",[],[],null,null]',
        b"{}",
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
    assert result.created == [("n", "m", "running", 0, 1.0, 2.0, None, None, None, None)]
    assert result.snapshots == [("n", 0, "{}")]
    assert result.updated == {"n": (1, "paused")}


def test_leases_are_taken_and_released_in_order_within_a_batch() -> None:
    leases = {"held": ("bob", 20.0), "stale": ("bob", 5.0)}
    result = plan(
        [
            Acquire("free", "alice", 40.0, 10.0),
            Acquire("free", "carol", 40.0, 10.0),  # alice took it just before
            Acquire("held", "alice", 40.0, 10.0),  # bob's, unexpired
            Acquire("stale", "alice", 40.0, 10.0),  # bob's, expired
            Release("held", "alice"),  # not alice's: no effect
            Release("free", "alice"),
            Acquire("free", "carol", 41.0, 11.0),  # free again
            Release("none", "alice"),
        ],
        {},
        now=10.0,
        leases=leases,
    )
    assert [type(e) for e in result.errors] == [
        type(None),
        SessionLocked,
        SessionLocked,
        type(None),
        type(None),
        type(None),
        type(None),
        type(None),
    ]
    locked = result.errors[2]
    assert isinstance(locked, SessionLocked)
    assert (locked.owner, locked.expires_at) == ("bob", 20.0)
    assert result.leases == {"free": ("carol", 41.0), "stale": ("alice", 40.0)}
    assert leases == {"held": ("bob", 20.0), "stale": ("bob", 5.0)}  # not modified
    assert result.updated == {}  # leases need no session row


def test_a_release_after_its_acquire_in_one_batch_drops_the_row() -> None:
    result = plan(
        [Acquire("s", "alice", 40.0, 10.0), Release("s", "alice")],
        {},
        now=10.0,
        leases={"s": ("alice", 30.0)},
    )
    assert result.errors == [None, None]
    assert result.leases == {"s": None}


def test_a_post_checks_capacity_on_a_count_of_pending_messages() -> None:
    # A batch that only posts knows how many messages are pending, not their rows
    # (payloads and all): the capacity check counts, and each post adds one.
    from arkhon_rheo.errors import InboxFull
    from arkhon_rheo.store._plan import Inbox, Post

    def post(message_id: str) -> Post:
        return Post("s", (message_id, "Ask", "{}", 0.0, 0.0), capacity=3)

    known = {"s": (0, "waiting")}
    counted = {"s": Inbox(7, {}, {}, count=2)}
    result = plan([post("a"), post("b")], known, now=1.0, inboxes=counted)
    assert result.errors[0] is None
    assert isinstance(result.errors[1], InboxFull)
    assert [row[2] for row in result.inbox] == [8]  # positions go on from the last one
    assert counted["s"].count == 2  # what was known is left as it was
