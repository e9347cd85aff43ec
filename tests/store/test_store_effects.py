"""Each session's effect ledger, on every store, durability mode and backend: the stores' own.

What the protocol asks of the ledger (an intent once per key, ambiguous and failed
effects begun again, an outcome once, per session, concurrent sessions) is the
conformance suite's (``EffectConformance``, run by test_conformance.py); here are the
package's refusals of what it cannot store and the faulty store's forwarding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import ConfigurationError, StoreError
from arkhon_rheo.protocols import EffectStatus
from arkhon_rheo.testing import FaultyStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.store.conftest import AnyStore

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
