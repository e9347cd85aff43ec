"""Each session's effect ledger, on every store, durability mode and backend.

An intent is committed once per key; a done effect is returned as it is, a
started one (ambiguous) too unless retried; a failed one is begun again; an
outcome is stored once, for a started effect only; the ledger lists a
session's effects in the order they were first begun, and survives the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from arkhon_rheo import ConfigurationError, SessionNotFound, StoreError
from arkhon_rheo.protocols import EffectStatus, StoredEffect
from arkhon_rheo.testing import FaultyStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.store.conftest import AnyStore, Kind

pytestmark = pytest.mark.anyio

T0 = 1000.0
STARTED, DONE, FAILED = EffectStatus.STARTED, EffectStatus.DONE, EffectStatus.FAILED


@pytest.fixture
def clock() -> list[float]:
    """The stores' clock: ``clock[0]``, moved by the test."""
    return [T0]


@pytest.fixture
def make(make_store: Callable[..., AnyStore], clock: list[float]) -> Callable[[], AnyStore]:
    return lambda: make_store(clock=lambda: clock[0])


async def test_an_intent_is_committed_once_and_its_outcome_is_the_answer_from_then_on(
    make: Callable[[], AnyStore], clock: list[float]
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        effect, began = await store.begin_effect("s", "k1", tool="send", arguments={"to": "a"})
        assert began
        assert effect == StoredEffect("s", "k1", "send", {"to": "a"}, STARTED, 1, T0)
        # Ambiguous: begun again without retry, it is returned as it is.
        again, began = await store.begin_effect("s", "k1", tool="send", arguments={"to": "b"})
        assert (again, began) == (effect, False)
        clock[0] = T0 + 2
        done = await store.finish_effect("s", "k1", result={"content": "sent", "n": [1, 2]})
        assert done == StoredEffect(
            "s", "k1", "send", {"to": "a"}, DONE, 1, T0, T0 + 2, {"content": "sent", "n": [1, 2]}
        )
        # Done: never begun again, not even on retry.
        for retry in (False, True):
            found, began = await store.begin_effect(
                "s", "k1", tool="send", arguments={}, retry=retry
            )
            assert (found, began) == (done, False)
        assert await store.effects("s") == (done,)


async def test_an_ambiguous_effect_retried_and_a_failed_one_are_begun_again(
    make: Callable[[], AnyStore], clock: list[float]
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.begin_effect("s", "a", tool="t", arguments={"x": 1})
        await store.begin_effect("s", "b", tool="t", arguments={"x": 2})
        clock[0] = T0 + 1
        retried, began = await store.begin_effect(
            "s", "a", tool="t", arguments={"x": 10}, retry=True
        )
        assert began
        assert (retried.arguments, retried.status, retried.attempts, retried.started_at) == (
            {"x": 10},
            STARTED,
            2,
            T0 + 1,
        )
        failed = await store.finish_effect("s", "b", error="Transient('busy')")
        assert (failed.status, failed.error, failed.result) == (FAILED, "Transient('busy')", None)
        again, began = await store.begin_effect("s", "b", tool="t", arguments={"x": 2})
        assert began
        assert (again.status, again.attempts, again.error, again.finished_at) == (
            STARTED,
            2,
            None,
            None,
        )
        # Listed in the order first begun, whatever was updated since.
        assert [e.key for e in await store.effects("s")] == ["a", "b"]


async def test_an_outcome_is_stored_for_a_started_effect_only(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        with pytest.raises(StoreError, match="never begun"):
            await store.finish_effect("s", "nope", result=1)
        await store.begin_effect("s", "k", tool="t", arguments={})
        await store.finish_effect("s", "k", result=None)
        with pytest.raises(StoreError, match="done already"):
            await store.finish_effect("s", "k", result=2)
        (effect,) = await store.effects("s")
        assert (effect.status, effect.result) == (DONE, None)


async def test_ledgers_are_per_session_and_need_the_session(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.create_session("t", machine="m", snapshot={})
        await store.begin_effect("s", "k", tool="t", arguments={})
        _, began = await store.begin_effect("t", "k", tool="t", arguments={})
        assert began  # the same key in another session is another effect
        assert await store.effects("t") != ()
        assert len(await store.effects("s")) == 1
        with pytest.raises(SessionNotFound):
            await store.begin_effect("x", "k", tool="t", arguments={})
        with pytest.raises(SessionNotFound):
            await store.finish_effect("x", "k", result=1)
        with pytest.raises(SessionNotFound):
            await store.effects("x")


async def test_what_cannot_be_stored_is_refused_before_anything_is_written(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        with pytest.raises(StoreError, match="arguments of effect"):
            await store.begin_effect("s", "k", tool="t", arguments={"x": float("nan")})
        with pytest.raises(ConfigurationError):
            await store.begin_effect("s", "", tool="t", arguments={})
        with pytest.raises(ConfigurationError):
            await store.begin_effect("s", "k", tool="", arguments={})
        assert await store.effects("s") == ()
        await store.begin_effect("s", "k", tool="t", arguments={})
        with pytest.raises(StoreError, match="result of effect"):
            await store.finish_effect("s", "k", result={1, 2})
        with pytest.raises(ConfigurationError):
            await store.finish_effect("s", "k", error=3)  # type: ignore[arg-type]
        (effect,) = await store.effects("s")
        assert effect.status is STARTED


async def test_concurrent_sessions_commit_their_effects_together(
    make: Callable[[], AnyStore], kind: Kind
) -> None:
    async with make() as store:
        for i in range(50):
            await store.create_session(f"s{i}", machine="m", snapshot={})

        async def one(i: int) -> None:
            _, began = await store.begin_effect(f"s{i}", "k", tool="t", arguments={"i": i})
            assert began
            await store.finish_effect(f"s{i}", "k", result=i)

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(one, i)
        for i in range(50):
            (effect,) = await store.effects(f"s{i}")
            assert (effect.status, effect.result, effect.arguments) == (DONE, i, {"i": i})
    if kind.sqlite:  # what was committed is in the file
        async with make() as again:
            assert (await again.effects("s7"))[0].result == 7


async def test_a_faulty_store_fails_and_forwards_effect_calls(
    make: Callable[[], AnyStore],
) -> None:
    store = FaultyStore(make())
    store.fail("begin_effect", nth=1).fail("finish_effect", nth=1)
    async with store:
        await store.create_session("s", machine="m", snapshot={})
        with pytest.raises(StoreError, match="injected"):
            await store.begin_effect("s", "k", tool="t", arguments={})
        assert await store.effects("s") == ()
        await store.begin_effect("s", "k", tool="t", arguments={})
        with pytest.raises(StoreError, match="injected"):
            await store.finish_effect("s", "k", result=1)
        assert (await store.effects("s"))[0].status is STARTED
        await store.finish_effect("s", "k", result=1)
        assert (await store.effects("s"))[0].status is DONE
        assert store.calls["effects"] == 3
