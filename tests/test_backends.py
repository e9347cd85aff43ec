"""Each async test runs once per backend, on the backend its id names."""

from __future__ import annotations

from typing import Any

import pytest
import sniffio
import trio

from tests.support.helpers import on_virtual_clock

pytestmark = pytest.mark.anyio


async def test_runs_on_the_backend_it_names(anyio_backend: str) -> None:
    assert sniffio.current_async_library() == anyio_backend


@on_virtual_clock
async def test_a_virtual_clock_test_runs_once_on_trio_with_the_clock(
    anyio_backend: Any, autojump_clock: trio.testing.MockClock
) -> None:
    assert sniffio.current_async_library() == "trio"
    assert anyio_backend == ("trio", {"clock": autojump_clock})
    before = trio.current_time()
    await trio.sleep(3600)  # an hour, at once
    assert trio.current_time() - before == pytest.approx(3600)


def test_virtual_clock_tests_are_collected_once(request: pytest.FixtureRequest) -> None:
    ids = [
        item.nodeid
        for item in request.session.items
        if item.nodeid.startswith(f"{request.node.nodeid.split('::')[0]}::test_a_virtual_clock")
    ]
    assert ids == [f"{request.node.nodeid.split('::')[0]}::{VIRTUAL}"]


VIRTUAL = "test_a_virtual_clock_test_runs_once_on_trio_with_the_clock[trio-virtual-clock]"
