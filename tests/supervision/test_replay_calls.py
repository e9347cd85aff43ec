"""Recorded calls in the shapes real stages make them, and digests that hold across processes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    ExitReason,
    Lifecycle,
    Machine,
    Patch,
    StateView,
    record_call,
    recorded,
    stage,
)
from arkhon_rheo.errors import ReplayDiverged, UnrecordableCall
from arkhon_rheo.session._recording import CallPlayback, CallRecorder
from arkhon_rheo.store._schema import SCHEMA_VERSION
from arkhon_rheo.testing import ReferenceState, reference_machine

pytestmark = pytest.mark.anyio

L = Lifecycle


class Box(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    out: tuple[str, ...] = ()
    tags: frozenset[str] = frozenset()


def one_stage(body: Any, *, name: str = "box") -> Machine[Box]:
    @stage(reads={"out"}, writes={"out", "tags"}, next=L.FINISHED, name="work")
    async def work(view: StateView[Box]) -> Patch:
        patch: Patch = await body(view)
        return patch

    return Machine(
        name=name,
        state_type=Box,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.INITIALIZED: {L.FINISHED}},
        stages={L.INITIALIZED: work},
    )


async def run_and_replay(body: Any, **system: Any) -> tuple[Box, Any]:
    machine = one_stage(body)
    async with AgentSystem(**system) as agents:
        result = await agents.run(machine, Box(), session_id="b1")
        assert result.exit_reason is ExitReason.FINISHED, result.failure
        report = await agents.stored(machine, "b1").replay(reexecute=True)
    assert isinstance(result.state, Box)
    return result.state, report


@recorded("tool:inner")
async def inner(x: int) -> int:
    await anyio.lowlevel.checkpoint()
    return x * 2


@recorded("tool:outer")
async def outer(x: int) -> int:
    return await inner(x) + 1  # part of the outer call: not recorded on its own


async def test_a_recorded_call_inside_another_belongs_to_the_outer_one() -> None:
    async def body(view: StateView[Box]) -> Patch:
        return Patch(out=(str(await outer(3)),))

    state, report = await run_and_replay(body)
    assert state.out == ("7",)
    assert report.ok, report.divergence


async def test_calls_made_concurrently_replay_in_any_order() -> None:
    @recorded("tool:slow")
    async def slow(name: str, delay: float) -> str:
        await anyio.sleep(delay)
        return name

    async def body(view: StateView[Box]) -> Patch:
        got: list[str] = []

        async def one(name: str, delay: float) -> None:
            got.append(await slow(name, delay))

        async with anyio.create_task_group() as group:
            group.start_soon(one, "a", 0.02)
            group.start_soon(one, "b", 0)
        return Patch(out=tuple(got))

    state, report = await run_and_replay(body)
    assert state.out == ("b", "a")
    assert report.ok, report.divergence


async def test_a_call_cut_short_by_the_stages_own_timeout_is_recorded_and_replayed() -> None:
    @recorded("model")
    async def hang(prompt: str) -> str:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def body(view: StateView[Box]) -> Patch:
        answer = "fallback"
        with anyio.move_on_after(0.01):
            answer = await hang("hello")
        return Patch(out=(answer,))

    state, report = await run_and_replay(body)
    assert state.out == ("fallback",)
    assert report.ok, report.divergence
    async with AgentSystem() as agents:
        (event,) = await agents.stored(one_stage(body), "b1").history()
    assert event.info == {
        "io": [{"kind": "model", "request": {"prompt": "hello"}, "cancelled": True}]
    }


async def test_a_task_left_running_by_a_stage_does_not_record_into_its_event() -> None:
    @recorded("tool:telemetry")
    async def telemetry(step: int) -> None:
        return None

    started = anyio.Event()
    release = anyio.Event()

    async def background() -> None:
        started.set()
        await release.wait()
        await telemetry(1)  # after the stage returned: calls straight through

    async with anyio.create_task_group() as group:

        async def body(view: StateView[Box]) -> Patch:
            await telemetry(0)
            group.start_soon(background)
            await started.wait()
            return Patch(out=("done",))

        machine = one_stage(body)
        async with AgentSystem() as agents:
            handle = await agents.start(machine, Box(), session_id="b1")
            await handle.result()
            release.set()
            await anyio.wait_all_tasks_blocked()
            stored = await agents.stored(machine, "b1").history()
            (first, *_) = await handle.history()
        expected = {"io": [{"kind": "tool:telemetry", "request": {"step": 0}, "response": None}]}
        assert first.info == expected
        assert stored[0].info == expected


async def test_the_stage_gets_what_a_replay_will_give_it() -> None:
    seen: list[Any] = []

    async def body(view: StateView[Box]) -> Patch:
        mine = [
            await record_call("tool:pair", {"n": 1}, _pair),  # returns=Any: JSON data
            await record_call("tool:pair", {"n": 2}, _pair, returns=tuple[int, int]),
        ]
        seen.extend(mine)
        return Patch(out=tuple(str(value) for value in mine))

    _, report = await run_and_replay(body)
    assert seen[:2] == [[1, 2], (1, 2)]
    assert seen[2:] == seen[:2]  # the re-execution got the same
    assert report.ok, report.divergence


async def _pair() -> tuple[int, int]:
    return (1, 2)


async def test_requests_and_responses_that_are_not_json_are_refused_at_the_call() -> None:
    async def nan() -> float:
        return float("nan")

    with CallRecorder():
        with pytest.raises(UnrecordableCall, match="request"):
            await record_call("model", {"temperature": float("nan")}, _pair)
        with pytest.raises(UnrecordableCall, match="response"):
            await record_call("model", {}, nan, returns=float)


async def test_an_unresolvable_return_annotation_is_a_configuration_error_at_first_call() -> None:
    class Hit:  # a local class: "Hit" cannot be resolved from the module
        pass

    @recorded("tool:hit")
    async def hit() -> Hit:
        return Hit()

    with pytest.raises(ConfigurationError, match="pass returns="):
        await hit()  # outside a stage too: found by the tool's own unit tests

    @recorded("tool:hit", returns=None.__class__)
    async def ok() -> Hit:
        return None  # type: ignore[return-value]

    assert await ok() is None


async def test_a_running_session_replays_as_it_was_when_the_replay_began() -> None:
    gate = anyio.Event()

    async def hold(cycle: int) -> None:
        if cycle == 10:  # 30 events committed
            await gate.wait()

    machine = reference_machine(before={"think": hold})
    async with AgentSystem(snapshot_every=7) as agents:
        handle = await agents.start(machine, ReferenceState(cycles=20), session_id="c1")
        reports = []
        while not handle.done:
            reports.append(await agents.stored(machine, "c1").replay())
            if len(reports) == 3:
                gate.set()
            await anyio.lowlevel.checkpoint()
        reports.append(await agents.stored(machine, "c1").replay())
    assert all(report.ok for report in reports), [r.divergence for r in reports if not r.ok]
    assert reports[-1].events == 60
    assert len(reports[-1].state.steps) == 20


SET_RECORD = """
import sys
import anyio
sys.path.insert(0, {tests!r})
from test_replay_calls import set_machine, Box
from arkhon_rheo import AgentSystem

async def main():
    async with AgentSystem() as agents:
        if sys.argv[1] == "record":
            result = await agents.run(set_machine(), Box(), session_id="s1")
            print(result.exit_reason.value, sorted(result.state.tags) == sorted(WORDS))
        else:
            report = await agents.stored(set_machine(), "s1").replay(reexecute=True)
            print("ok" if report.ok else report.divergence, report.checked)

WORDS = [f"word-{{i}}" for i in range(40)]
anyio.run(main)
"""


def set_machine() -> Machine[Box]:
    async def body(view: StateView[Box]) -> Patch:
        words = {f"word-{i}" for i in range(40)}
        echoed = await record_call("tool:echo", {"words": words}, _echo(words), returns=set[str])
        return Patch(tags=frozenset(echoed))

    return one_stage(body, name="sets")


def _echo(words: set[str]) -> Any:
    async def call() -> set[str]:
        return set(words)

    return call


def test_sets_digest_and_replay_alike_under_other_hash_seeds(tmp_path: Path) -> None:
    script = tmp_path / "sets.py"
    script.write_text(SET_RECORD.format(tests=str(Path(__file__).parent)))

    def run(step: str, seed: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, str(script), step],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run("record", "1") == "finished True"
    for seed in ("2", "3", "4"):
        assert run("replay", seed) == "ok 1"


async def test_a_store_of_schema_version_1_is_upgraded_in_place() -> None:
    async def body(view: StateView[Box]) -> Patch:
        return Patch(out=("x",))

    machine = one_stage(body)
    async with AgentSystem() as agents:
        await agents.run(machine, Box(), session_id="old")
    # (Imported here: a subprocess test imports this module on its own, outside the package.)
    from tests.support.store_rows import write_schema_3

    write_schema_3("arkhon-rheo.db")  # rows laid out as before version 4...
    with sqlite3.connect("arkhon-rheo.db", isolation_level=None) as db:  # ...as version 1 left it
        db.execute("ALTER TABLE events DROP COLUMN digest")
        db.execute("ALTER TABLE sessions DROP COLUMN fingerprint")
        db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        db.execute("PRAGMA user_version = 1")
    async with AgentSystem() as agents:
        report = await agents.stored(machine, "old").replay()
        assert report.ok
        assert report.events == 1
        assert report.checked == 0  # stored without a digest: folded only
        await agents.run(machine, Box(), session_id="new")
        assert (await agents.stored(machine, "new").replay()).checked == 1
    with sqlite3.connect("arkhon-rheo.db") as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        assert meta["schema_version"] == str(SCHEMA_VERSION)


async def test_a_call_waiting_for_a_concurrent_call_that_never_comes_diverges() -> None:
    records = [
        {"kind": "t", "request": "slow", "response": 1, "done": 1, "after": 0},
        {"kind": "t", "request": "fast", "response": 2, "done": 0, "after": 0},
    ]
    playback = CallPlayback(records, "s", wait=0.01)
    with playback, pytest.raises(ReplayDiverged, match="waited for 1 calls that finished"):
        await record_call("t", "slow", _pair)  # "fast" finished while it ran; never made
    assert playback.diverged is not None

    playback = CallPlayback(records, "s")
    answers: list[Any] = []

    async def call(request: str) -> None:
        answers.append(await record_call("t", request, _pair))

    with playback:
        async with anyio.create_task_group() as group:
            group.start_soon(call, "slow")
            await anyio.wait_all_tasks_blocked()  # "slow" waits for "fast" to be answered
            group.start_soon(call, "fast")
    assert answers == [2, 1]
