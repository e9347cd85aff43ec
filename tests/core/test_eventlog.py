"""The in-memory event log: encoded rows, read back equal, mostly untracked by the GC."""

from __future__ import annotations

import gc
import marshal
import math
from typing import Any

import pytest
from pydantic import ConfigDict

from arkhon_rheo import AgentSystem, FailureRecord, Lifecycle, Machine, Patch
from arkhon_rheo.protocols import (
    AssistantMessage,
    ErrorClass,
    EventKind,
    SystemMessage,
    ToolCall,
    ToolMessage,
    TransitionEvent,
    UserMessage,
)
from arkhon_rheo.session._compiled import compiled
from arkhon_rheo.session._eventlog import EventLog, Interner
from arkhon_rheo.testing import ReferenceState, ReferenceStep, reference_machine

L = Lifecycle
READS = frozenset({"user_input", "iteration"})
WRITES = frozenset({"thought"})


def event(seq: int, patch: Patch, **changes: Any) -> TransitionEvent:
    base = TransitionEvent(
        "s1",
        seq,
        EventKind.STEP,
        "think",
        L.THINKING,
        L.ACTING,
        READS,
        WRITES,
        patch,
        1,
        1.5,
        2.5,
        None,
        None,
    )
    return base._replace(**changes)


def test_events_read_back_equal_to_what_was_appended() -> None:
    failure = FailureRecord(
        error_type="ValueError", message="no", error_class=ErrorClass.FATAL, lifecycle="Acting"
    )
    step = ReferenceStep(cycle=0, tool="calc", output="42")
    events = [
        event(1, Patch(thought="use the calculator")),
        event(2, Patch().append("steps", step), writes=frozenset({"steps"}), stage="act"),
        event(3, Patch(), kind=EventKind.PAUSE, stage=None, info={"gate": "g", "stage": "act"}),
        event(4, Patch(last_error=failure), kind=EventKind.FAILURE, error=failure, attempt=3),
        event(5, Patch(thought=None, observation="42").append("steps", step, step)),
    ]
    log = EventLog("s1", Interner())
    for item in events:
        log.append(item)
    assert list(log) == events
    assert len(log) == 5
    assert log[0] == events[0]
    assert log[-1] == events[-1]
    assert log[1:3] == events[1:3]
    assert log[-1].patch.appends["steps"] == (step, step)
    assert log[0].from_state is L.THINKING  # the very members, not equal copies
    assert log[0].kind is EventKind.STEP
    assert log[1].writes == frozenset({"steps"})
    with pytest.raises(IndexError):
        log[5]
    assert repr(log) == "<EventLog of 's1': 5 events>"
    log.clear()
    assert len(log) == 0


def test_an_event_adds_no_object_the_collector_tracks_but_the_models_it_holds() -> None:
    log = EventLog("s1", Interner())
    steps = [ReferenceStep(cycle, "calc", "42") for cycle in range(100)]
    gc.collect()
    before = len(gc.get_objects())
    for seq, step in enumerate(steps, start=1):
        log.append(event(seq, Patch(thought="use the calculator", observation=None)))
        log.append(event(seq, Patch().append("steps", step), writes=frozenset({"steps"})))
    gc.collect()
    # The log's list, and one numbered tuple of names per patch shape: no tracked
    # object per event. (The steps were tracked before.)
    assert len(gc.get_objects()) - before <= 2 + 2
    tracked = [slot for slot in log._data if gc.is_tracked(slot)]
    assert tracked == steps  # the models it holds, in order, and nothing else
    # One row per event, all in one untracked buffer (no object per row).
    assert len(log._row_ends) == 200
    assert type(log._rows) is bytearray
    assert not gc.is_tracked(log._rows)
    assert not [slot for slot in log._data if type(slot) is bytes]
    names = [item for item in log._interner.objects if type(item) is tuple]
    assert sorted(names) == [("steps", 1), ("thought", "observation")]  # one per shape
    assert log[0] == event(1, Patch(thought="use the calculator", observation=None))
    assert log[199].patch.appends["steps"] == (steps[99],)


def test_recorded_calls_are_kept_as_one_untracked_object_and_read_back_equal() -> None:
    calls = {
        "io": [
            {
                "kind": "model",
                "request": {"turn": 3, "new": [{"role": "tool", "content": "é\ud800"}], "x": 1.5},
                "response": {"message": {"tool_calls": [{"id": "c3"}]}, "usage": None},
                "done": True,
                "shapes": ((1, 2), {3: frozenset({"a"})}, 10**50),
            }
        ]
    }
    log = EventLog("s1", Interner())
    log.append(event(1, Patch(), info=calls))
    assert log._data == [None]  # the event's slot: its row, its info in it, is in _rows
    packed = log._rows
    assert isinstance(packed, bytearray)
    assert not gc.is_tracked(packed)
    info = log[0].info
    assert info == calls
    assert type(info["io"][0]["shapes"][0]) is tuple  # the very same types
    assert log[0].info is not info  # each read makes its own copy: none is shared


def test_a_nan_reads_back_as_a_nan() -> None:
    log = EventLog("s1", Interner())
    log.append(event(1, Patch(), info={"x": float("nan")}))
    info = log[0].info
    assert info is not None
    assert math.isnan(info["x"])


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "info",
    [
        {"io": [L.THINKING]},  # an enum member: marshal writes built-in types only
        {"io": [ReferenceStep(cycle=0, tool="calc", output="42")]},  # a model
        {"io": _deep(5000)},  # nested deeper than marshal goes
    ],
    ids=["enum", "model", "deep"],
)
def test_info_that_is_not_built_in_data_is_kept_as_it_is(info: dict[str, Any]) -> None:
    log = EventLog("s1", Interner())
    log.append(event(1, Patch(thought="t", observation=None), info=info))
    assert log._data[-1] is info  # after the row and the values that follow it
    assert log[0].info is info
    assert log[0].patch == Patch(thought="t", observation=None)


def test_an_event_whose_info_is_bytes_reads_back_as_those_bytes() -> None:
    odd = event(1, Patch(), info=b"{}")  # not a mapping, but kept as given
    log = EventLog("s1", Interner())
    log.append(odd)
    assert log[0] == odd
    info: Any = log[0].info
    assert type(info) is bytes


def test_models_read_back_in_order_with_their_names() -> None:
    one, two, three = (ReferenceStep(cycle, "calc", str(cycle)) for cycle in range(3))
    failure = FailureRecord(
        error_type="ValueError", message="no", error_class=ErrorClass.FATAL, lifecycle="Acting"
    )
    patches = [
        Patch(last_error=failure, thought="t").append("steps", one, two).append("empty"),
        Patch().append("steps", one).append("more", two, three),
        Patch(thought="only assigned", last_error=failure),
        Patch().append("steps", three),
        Patch(),
    ]
    log = EventLog("s1", Interner())
    for seq, patch in enumerate(patches, start=1):
        log.append(event(seq, patch))
    assert len(log) == len(patches)
    for index, patch in enumerate(patches):
        read = log[index].patch
        assert read == patch
        assert list(read.values.items()) == list(patch.values.items())  # order kept
        assert list(read.appends.items()) == list(patch.appends.items())
    assert log[0].patch.appends["empty"] == ()
    assert [e.patch for e in log] == patches
    assert [e.patch for e in log[1:4]] == patches[1:4]
    assert [e.patch for e in log[::-2]] == patches[::-2]


def test_field_sets_are_numbered_by_value_and_the_table_is_bounded() -> None:
    interner = Interner()
    assert interner.number(frozenset({"a"})) == interner.number(frozenset({"a"}))
    assert interner.number(L.THINKING) == interner.number(L.THINKING)
    assert interner.number(7) == 7  # an int is never numbered: a number means an object
    for index in range(5000):
        interner.number(frozenset({f"f{index}"}))
    assert len(interner.objects) == 4096
    full = frozenset({"past the bound"})
    assert interner.number(full) is full
    log = EventLog("s1", interner)
    log.append(event(1, Patch(thought="x"), writes=full))
    assert log[0].writes == full  # kept as it is, read back all the same


def test_another_sessions_event_is_kept_as_it_is_and_a_log_extends_from_a_log() -> None:
    interner = Interner()
    log = EventLog("s1", interner)
    stranger = event(1, Patch(thought="x"))._replace(session_id="other")
    log.append(stranger)
    assert log[0] is stranger
    first = EventLog("s1", interner)
    first.append(event(1, Patch(thought="x")))
    second = EventLog("s1", interner)
    second.extend(first)
    second.extend([event(2, Patch(thought="y"))])
    second.extend(first)  # after an event of its own: the slots move, the events do not
    second.append(stranger)  # kept as it is, after slots taken from another log
    assert [e.seq for e in second] == [1, 2, 1, 1]
    assert second[-1] is stranger
    assert second[2] == first[0]
    size = len(first._data)
    assert second._data[:size] == second._data[2 * size : 3 * size] == first._data  # copied


@pytest.mark.anyio
async def test_a_memory_sessions_history_and_states_are_those_it_committed() -> None:
    # States share their set of fields set once it holds every field the machine
    # writes: no state's set may change under another (each is a frozen model).
    machine = reference_machine()
    states: list[ReferenceState] = []
    async with AgentSystem(path=None, listeners=[lambda e: None]) as system:
        initial = ReferenceState(cycles=3)
        handle = await system.start(machine, initial, session_id="m")
        result = await handle.result()
        history = await handle.history()
        states.append(result.state)
    assert [e.seq for e in history] == list(range(1, 10))
    assert [e.to_state for e in history][-1] is L.FINISHED
    assert history[1].patch.appends["steps"] == (ReferenceStep(0, "calc", "42"),)
    assert states[0].model_fields_set >= {"thought", "steps", "observation", "lifecycle"}
    assert initial.model_fields_set == {"cycles"}  # the caller's state is untouched


def test_an_event_whose_members_would_not_read_back_is_kept_as_it_is() -> None:
    log = EventLog("s1", Interner())
    numbered = event(1, Patch(thought="x"), writes=0)  # an int where a field set belongs
    as_set = event(2, Patch(thought="y"), reads={"user_input"})  # a set, not a frozenset

    class Names(frozenset[str]):
        pass

    subclass = event(3, Patch(thought="z"), writes=Names({"thought"}))
    odd_kind = event(4, Patch(thought="w"), kind=7)

    class Stage(str):
        pass

    odd_stage = event(5, Patch(thought="v"), stage=Stage("think"))  # marshal writes no subclass
    odd = (numbered, as_set, subclass, odd_kind, odd_stage)
    for item in odd:
        log.append(item)
    log.append(event(6, Patch(thought="u")))
    assert [log[i] is item for i, item in enumerate(odd)] == [True] * 5
    assert type(log[2].writes) is Names
    assert log[5] == event(6, Patch(thought="u"))


class Loose(ReferenceState):
    """A state type that is not frozen: pydantic adds to its set of fields set in place."""

    model_config = ConfigDict(frozen=False, extra="forbid")


def test_only_frozen_states_share_their_set_of_fields_set() -> None:
    frozen = compiled(reference_machine())
    first = ReferenceState(cycles=3, thought="t")
    second = frozen.copy_with(first, {"thought": "u"})
    assert second.__pydantic_fields_set__ is first.__pydantic_fields_set__

    base = reference_machine()
    loose_machine = Machine(
        name="loose",
        state_type=Loose,
        initial=base.initial,
        terminal=base.terminal,
        failed=base.failed,
        transitions=base.transitions,
        stages=base.stages,
    )
    loose = compiled(loose_machine)
    start = Loose(cycles=3, thought="t")
    later = loose.copy_with(loose.copy_with(start, {"thought": "u"}), {"thought": "v"})
    later.user_input = "changed"  # allowed: the type is not frozen
    assert later.__pydantic_fields_set__ is not start.__pydantic_fields_set__
    assert start.model_fields_set == {"cycles", "thought"}  # untouched


def _turn(seq: int, patch: Patch, info: dict[str, Any]) -> TransitionEvent:
    return event(seq, patch, writes=frozenset(patch.fields), info=info)


def test_a_recorded_response_that_is_an_appended_message_is_kept_once_and_read_back() -> None:
    call = ToolCall(id="c1", name="lookup", arguments='{"key": 1}')
    reply = AssistantMessage(tool_calls=(call,))
    answer = ToolMessage(tool_call_id="c1", name="lookup", content="2")
    first = [SystemMessage(content="be brief"), UserMessage(content="task")]
    model_io: dict[str, Any] = {
        "io": [
            {
                "kind": "model",
                "request": {"turn": 0, "new": [m.model_dump(mode="json") for m in first]},
                "response": {
                    "message": reply.model_dump(mode="json"),
                    "finish_reason": "tool_calls",
                },
            }
        ]
    }
    tool_io = {
        "io": [
            {
                "kind": "tool:lookup",
                "request": {"name": "lookup", "arguments": {"key": 1}},
                "response": answer.model_dump(mode="json"),
            }
        ]
    }
    events = [
        event(1, Patch().append("messages", *first), writes=frozenset({"messages"})),
        _turn(2, Patch(turns=1, pending=(call,)).append("messages", reply), model_io),
        _turn(3, Patch(pending=()).append("messages", answer), tool_io),
    ]
    log = EventLog("s1", Interner())
    for item in events:
        log.append(item)
    assert list(log) == events
    assert log[1].info == model_io
    assert log[2].info == tool_io
    # The rows hold neither the reply nor the tool's answer (the request is as recorded).
    rows = bytes(log._rows)
    assert b"be brief" in rows
    assert b'{"key": 1}' not in rows
    assert b"tool_call_id" not in rows
    assert model_io["io"][0]["response"]["message"] is not None  # the caller's, untouched
    # A log extended from this one reads the same (the places are relative).
    other = EventLog("s1", log._interner)
    other.append(event(1, Patch(thought="first")))
    other.extend(log)
    assert list(other)[1:] == events


@pytest.mark.parametrize(
    "response",
    [
        {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "3", "is_error": False},
        {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "2"},
        {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "2", "is_error": 0},
        {"tool_call_id": "c1", "role": "tool", "name": "lookup", "content": "2", "is_error": False},
        {"message": {"role": "assistant", "content": None, "tool_calls": ()}},
        ["not", "a", "dict"],
    ],
    ids=["other-content", "fewer-keys", "int-for-bool", "other-order", "tuple-for-list", "list"],
)
def test_a_response_that_differs_from_the_message_in_any_way_is_kept_as_recorded(
    response: Any,
) -> None:
    answer = ToolMessage(tool_call_id="c1", name="lookup", content="2")
    reply = AssistantMessage(tool_calls=())
    info = {"io": [{"kind": "tool", "request": {"new": [{"role": "x"}]}, "response": response}]}
    patch = Patch().append("messages", answer, reply)
    log = EventLog("s1", Interner())
    log.append(_turn(1, patch, info))
    read = log[0].info
    assert read == info
    assert read is not None
    assert type(read["io"][0]["response"]) is type(response)
    assert marshal.loads(log._rows)[14] == ()  # nothing pointed at


def test_a_message_built_around_validation_is_not_pointed_at() -> None:
    odd = ToolMessage.model_construct(tool_call_id="c1", name="lookup", content=2.5, is_error=False)
    dumped = {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": 2.5}
    dumped["is_error"] = False
    info = {"io": [{"kind": "tool", "request": {}, "response": dumped}]}
    log = EventLog("s1", Interner())
    log.append(_turn(1, Patch().append("messages", odd), info))
    assert log[0].info == info
    assert marshal.loads(log._rows)[14] == ()


def test_many_values_errors_and_info_that_follows_the_row_read_back_in_place() -> None:
    failure = FailureRecord(
        error_type="ValueError", message="no", error_class=ErrorClass.FATAL, lifecycle="Acting"
    )
    steps = [ReferenceStep(cycle, "calc", str(cycle)) for cycle in range(70)]
    values = {f"f{index}": (index if index % 3 else f"text {index}") for index in range(40)}
    patch = Patch.of(values, {"steps": tuple(steps), "floats": (1.5, float("inf"), None, True)})
    kept = {"io": [L.THINKING]}
    events = [
        event(1, patch, error=failure, info=kept),
        event(2, patch, error=failure),
        event(3, patch, info={"x": [1, 2]}),
    ]
    log = EventLog("s1", Interner())
    for item in events:
        log.append(item)
    assert list(log) == events
    assert log[0].info is kept
    assert log[0].error is failure
    assert log[1].patch.values["f3"] == "text 3"
    assert log[2].patch.appends["steps"][69] is steps[69]
    assert [type(v) for v in log[2].patch.appends["floats"]] == [float, float, type(None), bool]
    assert log[2].patch.values["f3"] is values["f3"]  # a string follows the row: shared


def test_recorded_calls_are_written_with_their_keys_numbered_and_read_back_in_order() -> None:
    calls = {
        "io": [
            {
                "kind": "model",
                "request": {"turn": 1, "new": [{"role": "tool", "content": "2"}], "tools": []},
                "response": {"usage": {"prompt_tokens": 3}, "model": "m", "empty": {}},
            }
        ]
    }
    interner = Interner()
    log = EventLog("s1", interner)
    for seq in (1, 2):
        log.append(event(seq, Patch(), info=calls))
    ends = log._row_ends
    first, second = bytes(log._rows[: ends[0]]), bytes(log._rows[ends[0] : ends[1]])
    for key in (b"kind", b"request", b"turn", b"prompt_tokens", b"usage"):
        assert key not in first  # the keys are numbers in the row
    assert b"model" in first  # the values are not
    assert len(second) == len(first)  # the same shapes of keys, the same numbers
    assert ("kind", "request", "response") in interner.objects
    for read in log:
        assert read.info == calls
        assert read.info is not None
        assert list(read.info["io"][0]) == ["kind", "request", "response"]  # in order
        assert list(read.info["io"][0]["request"]) == ["turn", "new", "tools"]


@pytest.mark.parametrize(
    "info",
    [
        {"io": [{"shape": (1, 2)}]},  # a tuple would read back as a dict: written as it is
        {"io": [{1: "a", 2.5: "b"}]},  # keys that are no strings
        {"io": [{"n": L.THINKING.value, "s": {"x"}}]},  # a set
    ],
    ids=["tuple", "keys", "set"],
)
def test_info_that_is_not_json_shaped_is_written_unpacked_and_reads_back_the_same(
    info: dict[str, Any],
) -> None:
    log = EventLog("s1", Interner())
    log.append(event(1, Patch(), info=info))
    assert log._ends[0] > 0  # written as a row, not kept whole
    read = log[0].info
    assert read == info
    assert read is not None
    assert type(next(iter(read["io"][0].values()))) is type(next(iter(info["io"][0].values())))


def test_a_full_interner_leaves_the_keys_in_the_row() -> None:
    interner = Interner()
    for index in range(5000):
        interner.number(frozenset({f"f{index}"}))
    calls = {"io": [{"kind": "tool:x", "request": {"a": 1}}]}
    log = EventLog("s1", interner)
    log.append(event(1, Patch(), info=calls))
    assert log[0].info == calls
    assert len(interner.objects) == 4096
