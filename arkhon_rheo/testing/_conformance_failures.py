"""The conformance group of failure modes: a store not open, unknown sessions, non-JSON data."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest

from .._errors import SessionNotFound, StoreError
from ..protocols._seams import StoreSupport
from ._conformance_base import T0, ConformanceBase, make_event, message

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..protocols import Store

__all__ = ["FailureConformance"]

#: Every call that takes a session id, on the session named: each raises `SessionNotFound`
#: for a session the store does not have.
SESSION_CALLS: dict[str, Callable[[Store, str], Awaitable[object]]] = {
    "record": lambda store, sid: store.record(sid),
    "load": lambda store, sid: store.load(sid),
    "history": lambda store, sid: store.history(sid),
    "snapshot_at": lambda store, sid: store.snapshot_at(sid, 1),
    "append": lambda store, sid: store.append(sid, [make_event(sid, 1)]),
    "set_status": lambda store, sid: store.set_status(sid, "paused"),
    "post": lambda store, sid: store.post(sid, message("a"), capacity=5),
    "pending": lambda store, sid: store.pending(sid),
    "messages": lambda store, sid: store.messages(sid),
    "park": lambda store, sid: store.park(
        sid, None, status="waiting", waiting=None, accepts=(), now=T0
    ),
    "begin_effect": lambda store, sid: store.begin_effect(sid, "k", tool="t", arguments={}),
    "finish_effect": lambda store, sid: store.finish_effect(sid, "k", result=1),
    "effects": lambda store, sid: store.effects(sid),
    "acquire": lambda store, sid: store.acquire(sid, "me", ttl=60),
    "release": lambda store, sid: store.release(sid, "me"),
}

#: The calls that take no session id.
STORE_CALLS: dict[str, Callable[[Store], Awaitable[object]]] = {
    "create_session": lambda store: store.create_session("t", machine="m", snapshot={}),
    "sessions": lambda store: store.sessions(),
    "waking": lambda store: store.waking(T0),
    "leases": lambda store: store.leases(),
}

#: Leases need no session: a store may lease an id before the session is created.
NOT_FOUND_CALLS = [name for name in SESSION_CALLS if name not in ("acquire", "release")]


#: Values a store cannot keep as JSON.
NOT_JSON = [
    pytest.param(object(), id="object"),
    pytest.param(math.nan, id="nan"),
    pytest.param({1, 2}, id="set"),
]


class FailureConformance(ConformanceBase):
    """What a store refuses, with which error, and that a refusal writes nothing."""

    @pytest.mark.parametrize("call", [*STORE_CALLS, *SESSION_CALLS])
    async def test_a_store_not_open_refuses_every_call(
        self, new_store: Callable[[], Store], call: str
    ) -> None:
        def attempt(store: Store) -> Awaitable[object]:
            if call in STORE_CALLS:
                return STORE_CALLS[call](store)
            return SESSION_CALLS[call](store, "s")

        store = new_store()
        with pytest.raises(StoreError):  # not entered yet
            await attempt(store)
        async with store:
            await store.create_session("s", machine="m", snapshot={})
        with pytest.raises(StoreError):  # closed
            await attempt(store)

    @pytest.mark.parametrize("call", NOT_FOUND_CALLS)
    async def test_an_unknown_session_is_not_found(
        self, new_store: Callable[[], Store], call: str
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            with pytest.raises(SessionNotFound) as caught:
                await SESSION_CALLS[call](store, "nope")
            assert "nope" in str(caught.value)
            assert [r.session_id for r in await store.sessions()] == ["s"]

    @pytest.mark.parametrize("bad", NOT_JSON)
    async def test_what_is_not_json_is_refused_and_nothing_is_written(
        self, new_store: Callable[[], Store], bad: object
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            with pytest.raises(StoreError):
                await store.create_session("t", machine="m", snapshot={"x": bad})
            with pytest.raises(StoreError):
                await store.append("s", [make_event("s", 1, patch={"set": {"ok": 1, "x": bad}})])
            with pytest.raises(StoreError):
                await store.append("s", [make_event("s", 1)], snapshot=(1, {"x": bad}))
            with pytest.raises(StoreError):
                await store.append("s", [make_event("s", 1, io={"x": bad})])
            with pytest.raises(StoreError):
                await store.post("s", message("a", x=bad), capacity=5)
            with pytest.raises(StoreError):
                await store.begin_effect("s", "k", tool="t", arguments={"x": bad})
            assert [r.session_id for r in await store.sessions()] == ["s"]
            assert await store.history("s") == ()
            assert (await store.load("s")).snapshot_seq == 0
            assert await store.messages("s") == ()
            assert await store.effects("s") == ()
            await store.begin_effect("s", "k", tool="t", arguments={})
            with pytest.raises(StoreError):
                await store.finish_effect("s", "k", result={"x": bad})
            (effect,) = await store.effects("s")
            assert effect.result is None
            # Nothing half-written stands in the way of what comes next.
            await store.append("s", [make_event("s", 1)], snapshot=(1, {"x": 1}))
            assert (await store.load("s")).snapshot == {"x": 1}

    async def test_snapshot_bytes_that_are_not_json_are_refused(
        self, new_store: Callable[[], Store]
    ) -> None:
        store = new_store()
        if not StoreSupport(store).encoded:
            pytest.skip(f"{type(store).__name__} does not take encoded snapshots")
        async with store:
            with pytest.raises(StoreError):
                await store.create_session("s", machine="m", snapshot=b"\xff{")
            assert await store.sessions() == ()
            await store.create_session("s", machine="m", snapshot=b"{}")
            with pytest.raises(StoreError):
                await store.append("s", [make_event("s", 1)], snapshot=(1, b"{"))
            assert await store.history("s") == ()
            assert (await store.load("s")).snapshot == {}
