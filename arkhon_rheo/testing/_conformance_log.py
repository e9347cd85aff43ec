"""The conformance groups of a session's log: records, appends, loading, history, counters."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from .._errors import DuplicateEvent, SessionError, SessionNotFound
from ..protocols import NewMessage, Store
from ..protocols._seams import EncodedJson, EncodedPatch, StoreSupport
from ._conformance_base import T0, ConformanceBase, make_event, make_events, message

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["AppendConformance", "SessionConformance"]


class SessionConformance(ConformanceBase):
    """Creating sessions, their records, and listing them."""

    async def test_a_store_is_an_async_context_manager_of_the_protocol(
        self, new_store: Callable[[], Store]
    ) -> None:
        store = new_store()
        assert isinstance(store, Store)
        async with store as entered:
            assert entered is store
            assert await store.sessions() == ()

    async def test_a_new_session_is_recorded_with_its_initial_snapshot(
        self, new_store: Callable[[], Store]
    ) -> None:
        fingerprint = {"machine": "m", "stages": ["think", "act"], "version": 2}
        async with new_store() as store:
            record = await store.create_session(
                "s", machine="m", snapshot={"n": 0}, status="paused", fingerprint=fingerprint
            )
            assert (record.session_id, record.machine, record.status) == ("s", "m", "paused")
            assert (record.last_seq, record.parent, record.fingerprint) == (0, None, fingerprint)
            assert (record.waiting, record.wake_at) == (None, None)
            assert record.updated_at >= record.created_at
            assert await store.record("s") == record
            loaded = await store.load("s")
            assert (loaded.record, loaded.snapshot_seq, loaded.snapshot) == (record, 0, {"n": 0})
            assert loaded.events == ()
            assert await store.history("s") == ()
            assert await store.snapshot_at("s", 0) == (0, {"n": 0})

    async def test_sessions_are_listed_oldest_first(self, new_store: Callable[[], Store]) -> None:
        async with new_store() as store:
            await store.create_session("b", machine="m", snapshot={})
            await store.create_session("a", machine="m", snapshot={}, status="paused")
            await store.create_session("c", machine="n", snapshot={}, parent="b")
            await store.set_status("b", "finished")
            await store.append("a", make_events("a", 1, 1), status="running")
            records = await store.sessions()
            assert [r.session_id for r in records] == ["b", "a", "c"]
            assert [r.status for r in records] == ["finished", "running", "running"]
            assert [r.last_seq for r in records] == [0, 1, 0]
            assert (records[2].parent, records[2].machine) == ("b", "n")
            assert records[1].updated_at >= records[1].created_at
            for record in records:
                assert await store.record(record.session_id) == record

    async def test_creating_a_session_twice_is_refused(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={"v": 1})
            await store.append("s", make_events("s", 1, 1))
            with pytest.raises(SessionError) as caught:
                await store.create_session("s", machine="other", snapshot={"v": 2})
            assert not isinstance(caught.value, SessionNotFound)
            loaded = await store.load("s")
            assert (loaded.record.machine, loaded.snapshot, loaded.record.last_seq) == (
                "m",
                {"v": 1},
                1,
            )
            assert len(await store.sessions()) == 1

    async def test_a_status_is_set_on_its_own_or_with_an_append(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.set_status("s", "paused")
            assert (await store.record("s")).status == "paused"
            await store.append("s", make_events("s", 1, 1), status="running")
            await store.append("s", make_events("s", 2, 2))  # no status: unchanged
            record = await store.record("s")
            assert (record.status, record.last_seq) == ("running", 2)
            await store.set_status("s", "finished")
            assert (await store.load("s")).record.status == "finished"


class AppendConformance(ConformanceBase):
    """Appending and acknowledging events, loading, history, snapshots and counters."""

    async def test_events_read_back_equal_to_what_was_appended(
        self, new_store: Callable[[], Store]
    ) -> None:
        odd = make_event("s", 5, error={"class": "transient", "n": 2}, io=None, digest=None)
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={"n": 0})
            await store.append("s", make_events("s", 1, 3), snapshot=(3, {"n": 3}))
            await store.append("s", make_events("s", 4, 4))
            await store.append("s", [odd])
            assert await store.history("s") == (*make_events("s", 1, 4), odd)
            loaded = await store.load("s")
            assert loaded.record.last_seq == 5
            assert (loaded.snapshot_seq, loaded.snapshot) == (3, {"n": 3})
            assert loaded.events == (make_event("s", 4), odd)

    @pytest.mark.parametrize(
        "patch",
        [
            {},
            {"set": {"a": 1, "b": [1, {"c": None}]}},
            {"append": {"b": [2]}, "set": {"a": "ü"}},
            [1, 2],
            "text",
            None,
        ],
        ids=["empty", "set", "append-then-set", "list", "text", "none"],
    )
    async def test_a_patch_of_any_json_form_reads_back_as_it_was(
        self, new_store: Callable[[], Store], patch: Any
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.append("s", [make_event("s", 1, patch=patch)])
            (stored,) = await store.history("s")
            assert stored == (await store.load("s")).events[0] == make_event("s", 1, patch=patch)
            assert json.dumps(stored.patch) == json.dumps(patch)  # the key order too

    async def test_what_is_stored_comes_back_as_json_data(
        self, new_store: Callable[[], Store]
    ) -> None:
        state = {"t": (1, 2), "u": "é✓", "big": 2**62, "neg": -(2**62), "f": 0.1, "z": None}
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot=state)
            await store.append("s", [make_event("s", 1, reads=("a", "b"))], snapshot=(1, state))
            expected = {**state, "t": [1, 2]}
            assert (await store.load("s")).snapshot == expected
            assert await store.snapshot_at("s", 0) == (0, expected)
            (stored,) = await store.history("s")
            assert stored.reads == ("a", "b")

    async def test_keys_read_back_in_the_order_written(
        self, new_store: Callable[[], Store]
    ) -> None:
        # A state's digest is over its JSON, key order included: replay must see the
        # order the step wrote (a store that sorts keys, as jsonb does, breaks replay).
        value = {"zeta": 1, "alpha": {"b": 2, "a": [{"y": 1, "x": 2}]}, "mid": None}
        patch = {"set": {"z": value, "a": 1}, "append": {"log": [value]}}
        order = json.dumps({"v": value, "p": patch})
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={"z": value, "a": 0})
            await store.append(
                "s", [make_event("s", 1, patch=patch, io=value)], snapshot=(1, {"z": value})
            )
            await store.post("s", NewMessage("m", "Ask", value, T0), capacity=5)
            await store.begin_effect("s", "k", tool="t", arguments=value)
            await store.finish_effect("s", "k", result=value)
            (stored,) = await store.history("s")
            assert json.dumps({"v": stored.io, "p": stored.patch}) == order
            assert json.dumps((await store.snapshot_at("s", 0))[1]) == json.dumps(
                {"z": value, "a": 0}
            )
            assert json.dumps((await store.load("s")).snapshot) == json.dumps({"z": value})
            (posted,) = await store.messages("s")
            assert json.dumps(posted.payload) == json.dumps(value)
            (effect,) = await store.effects("s")
            assert json.dumps([effect.arguments, effect.result]) == json.dumps([value, value])

    async def test_an_encoded_patch_and_snapshot_read_back_as_json_data(
        self, new_store: Callable[[], Store]
    ) -> None:
        store = new_store()
        if not StoreSupport(store).encoded:
            pytest.skip(f"{type(store).__name__} does not take encoded patches")
        encoded = EncodedPatch(
            {"answer": b'"42"', "point": b'{"x":1.5,"y":null}'},
            {"messages": [b'{"role":"tool"}', b"[1,2]"]},
        )
        async with store:
            await store.create_session("s", machine="m", snapshot=b'{"n":0}')
            await store.append(
                "s", [make_event("s", 1, patch=encoded)], snapshot=(1, EncodedJson(b'{"n":1}'))
            )
            (stored,) = await store.history("s")
            assert (
                stored.patch
                == encoded.data()
                == {
                    "set": {"answer": "42", "point": {"x": 1.5, "y": None}},
                    "append": {"messages": [{"role": "tool"}, [1, 2]]},
                }
            )
            assert stored == make_event("s", 1, patch=encoded.data())
            loaded = await store.load("s")
            assert (loaded.snapshot_seq, loaded.snapshot, loaded.events) == (1, {"n": 1}, ())
            assert await store.snapshot_at("s", 0) == (0, {"n": 0})

    @pytest.mark.parametrize("seq", [2, 1, 4, 0])
    async def test_a_taken_or_gapped_number_is_refused_and_nothing_is_written(
        self, new_store: Callable[[], Store], seq: int
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.append("s", make_events("s", 1, 2))
            await store.post("s", message("a"), capacity=5)
            with pytest.raises(DuplicateEvent) as caught:
                await store.append(
                    "s",
                    [make_event("s", seq)],
                    snapshot=(seq, {"no": 1}) if seq else None,
                    status="finished",
                    applied=1,
                    posts=[message("timer")],
                )
            assert (caught.value.session_id, caught.value.seq) == ("s", seq)
            assert await store.history("s") == tuple(make_events("s", 1, 2))
            record = await store.record("s")
            assert (record.last_seq, record.status) == (2, "running")
            assert (await store.load("s")).snapshot_seq == 0
            assert [(m.message_id, m.applied_seq) for m in await store.messages("s")] == [
                ("a", None)
            ]
            await store.append("s", make_events("s", 3, 3))
            assert (await store.record("s")).last_seq == 3

    async def test_an_append_with_an_inner_gap_writes_nothing(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            with pytest.raises(DuplicateEvent) as caught:
                await store.append("s", [make_event("s", 1), make_event("s", 3)], status="done")
            assert caught.value.seq == 3
            loaded = await store.load("s")
            assert (loaded.record.last_seq, loaded.record.status, loaded.events) == (
                0,
                "running",
                (),
            )

    async def test_loading_is_the_latest_snapshot_and_the_events_after_it(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={"at": 0})
            await store.append("s", make_events("s", 1, 3), snapshot=(3, {"at": 3}))
            await store.append("s", make_events("s", 4, 6), snapshot=(6, {"at": 6}))
            await store.append("s", make_events("s", 7, 8))
            loaded = await store.load("s")
            assert (loaded.snapshot_seq, loaded.snapshot) == (6, {"at": 6})
            assert loaded.events == tuple(make_events("s", 7, 8))
            assert await store.history("s") == tuple(make_events("s", 1, 8))
            assert await store.snapshot_at("s", 0) == (0, {"at": 0})
            assert await store.snapshot_at("s", 2) == (0, {"at": 0})
            assert await store.snapshot_at("s", 3) == (3, {"at": 3})
            assert await store.snapshot_at("s", 5) == (3, {"at": 3})
            assert await store.snapshot_at("s", 6) == (6, {"at": 6})
            assert await store.snapshot_at("s", 99) == (6, {"at": 6})

    async def test_histories_are_per_session(self, new_store: Callable[[], Store]) -> None:
        async with new_store() as store:
            for sid in ("a", "b"):
                await store.create_session(sid, machine="m", snapshot={"sid": sid})
            await store.append("a", make_events("a", 1, 2))
            await store.append("b", make_events("b", 1, 1))
            await store.append("a", make_events("a", 3, 3))
            assert await store.history("a") == tuple(make_events("a", 1, 3))
            assert await store.history("b") == tuple(make_events("b", 1, 1))
            assert (await store.load("b")).snapshot == {"sid": "b"}

    async def test_concurrent_appends_of_many_sessions_all_land(
        self, new_store: Callable[[], Store]
    ) -> None:
        async def drive(sid: str) -> None:
            await store.create_session(sid, machine="m", snapshot={"sid": sid})
            for seq in range(1, 7):
                snapshot = (seq, {"seq": seq}) if seq % 3 == 0 else None
                await store.append(sid, [make_event(sid, seq)], snapshot=snapshot)

        async with new_store() as store:
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(drive, f"s{i}")
            for i in range(20):
                assert await store.history(f"s{i}") == tuple(make_events(f"s{i}", 1, 6))
                assert (await store.load(f"s{i}")).snapshot == {"seq": 6}

    async def test_a_refused_write_fails_only_its_own_caller(
        self, new_store: Callable[[], Store]
    ) -> None:
        outcomes: dict[str, str] = {}

        async def write(sid: str, seq: int) -> None:
            try:
                await store.append(sid, [make_event(sid, seq)])
            except DuplicateEvent:
                outcomes[sid] = "refused"
            else:
                outcomes[sid] = "ok"

        async with new_store() as store:
            for i in range(12):
                await store.create_session(f"s{i}", machine="m", snapshot={})
            async with anyio.create_task_group() as tg:
                for i in range(12):
                    tg.start_soon(write, f"s{i}", 1 if i % 3 else 2)
            for i in range(12):
                assert outcomes[f"s{i}"] == ("ok" if i % 3 else "refused")
                assert len(await store.history(f"s{i}")) == (1 if i % 3 else 0)

    async def test_the_counters_move_with_the_writes(self, new_store: Callable[[], Store]) -> None:
        store = new_store()
        async with store:
            before = store.statistics()
            assert (before.appended, before.pending) == (0, 0)
            await store.create_session("s", machine="m", snapshot={})
            await store.append("s", make_events("s", 1, 3))
            for seq in range(4, 8):
                await store.append("s", [make_event("s", seq)])
            during = store.statistics()  # each event committed, or accepted and pending
            assert during.appended + during.pending == 7
            assert 0 <= during.pending <= 7
        after = store.statistics()
        assert (after.appended, after.pending) == (7, 0)
        assert after.transactions > before.transactions
        assert 3 <= after.largest_batch <= 7
