"""One encoding per value per commit, and no validation where it could change nothing.

A commit turns each value it writes into JSON once: the state's digest is
chained over those bytes and the store keeps them as they are. A value already
of its field's exact plain type is not validated again (validation would give
it back unchanged), and a patch whose values all came back unchanged is not
rebuilt; anything else is validated as before.
"""

from __future__ import annotations

import enum
import math
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ExitReason,
    History,
    Lifecycle,
    Machine,
    Patch,
    StateView,
    stage,
)
from arkhon_rheo.core._codec import EventCodec
from arkhon_rheo.core._floats import may_hold_floats
from arkhon_rheo.errors import InvalidPatch, UnserializablePatch
from arkhon_rheo.protocols import EventKind, TransitionEvent
from arkhon_rheo.protocols._encoded import EncodedPatch
from arkhon_rheo.session._commit_rule import PatchValidator, StateHasher
from arkhon_rheo.store import MemoryStore

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from arkhon_rheo.protocols import NewMessage, StoredEvent

pytestmark = pytest.mark.anyio
L = Lifecycle


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(BaseModel):
    model_config = ConfigDict(frozen=True)

    x: float
    label: str | None = None


class Step(NamedTuple):
    cycle: int
    tool: str
    score: float | None


class Loose(NamedTuple):
    what: tuple[int | str, ...]


class Ledger(AgentState):
    lifecycle: Lifecycle = L.THINKING
    note: str = ""
    maybe: str | None = None
    count: int = 0
    bounded: int = Field(default=1, ge=1)
    color: Color = Color.RED
    point: Point | None = None
    where: Point = Point(x=0.0)
    shouted: str = ""
    steps: History[Step] = History()
    loose: tuple[Loose, ...] = ()
    ratio: float = 0.0
    tags: frozenset[str] = frozenset()

    @field_validator("shouted")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()


def _machine(body: Any = None) -> Machine[Ledger]:
    writes = set(Ledger.model_fields) - {"lifecycle", "iteration", "last_error", "session_id"}

    @stage(reads=(), writes=writes, next=L.FINISHED, name="work")
    async def work(view: StateView[Ledger]) -> Patch:
        result: Patch = body(view) if body is not None else Patch()
        return result

    return Machine(
        name="ledger",
        state_type=Ledger,
        initial=L.THINKING,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.THINKING: {L.FINISHED}},
        stages={L.THINKING: work},
    )


WRITES = frozenset(Ledger.model_fields) - {"lifecycle", "iteration", "last_error", "session_id"}


def _validate(patch: Patch) -> tuple[dict[str, Any], Patch]:
    validator = PatchValidator(_machine())
    return validator.validate(Ledger(), patch, stage="work", writes=WRITES)


def test_values_of_their_exact_plain_type_come_back_as_they_are() -> None:
    point = Point(x=1.5)
    step = Step(1, "calc", None)
    patch = Patch(note="n", maybe=None, count=3, color=Color.BLUE, point=point).append(
        "steps", step
    )
    updates, validated = _validate(patch)
    assert validated is patch  # nothing changed: not rebuilt
    assert updates["point"] is point
    assert updates["steps"][-1] is step


@pytest.mark.parametrize(
    ("patch", "field", "expected"),
    [
        (Patch(count="3"), "count", 3),  # coerced, as the model would
        (Patch(bounded=5), "bounded", 5),  # a constrained field: still validated...
        (Patch(shouted="hey"), "shouted", "HEY"),  # ...as is one with a field validator
        (Patch(where={"x": 2}), "where", Point(x=2.0)),
        (Patch(ratio=1), "ratio", 1.0),
    ],
)
def test_anything_else_is_validated_as_before(patch: Patch, field: str, expected: Any) -> None:
    updates, validated = _validate(patch)
    assert updates[field] == expected
    assert validated.values[field] == expected


@pytest.mark.parametrize(
    "patch",
    [
        Patch(bounded=0),
        Patch().append("steps", Step("one", "calc", None)),  # type: ignore[arg-type]
        Patch().append("steps", Step(1, "calc", "high")),  # type: ignore[arg-type]
    ],
)
def test_a_value_that_does_not_validate_is_still_refused(patch: Patch) -> None:
    with pytest.raises(InvalidPatch):
        _validate(patch)


def test_a_named_tuple_with_items_of_another_type_is_validated_into_a_new_one() -> None:
    loose = Loose(what=(1, "a"))
    patch = Patch().append("steps", Step(1, "calc", 2)).append("loose", loose)  # int for float
    _, validated = _validate(patch)
    assert validated is not patch
    assert validated.appends["steps"] == (Step(1, "calc", 2.0),)
    assert type(validated.appends["steps"][0].score) is float
    assert validated.appends["loose"] == (loose,)


def _hasher() -> tuple[StateHasher, EventCodec]:
    codec = EventCodec(_machine())
    return StateHasher(codec), codec


def test_each_value_is_encoded_once_into_the_bytes_the_store_keeps() -> None:
    hasher, codec = _hasher()
    patch = (
        Patch(note="ünï", count=7, point=Point(x=0.5), tags=frozenset({"b", "a"}))
        .append("steps", Step(0, "calc", None), Step(1, "calc", 2.5))
        .append("loose", Loose(what=(1, "x")))
    )
    encoded = hasher.encode(patch, stage="work")
    assert encoded.values == {
        "note": '"ünï"'.encode(),
        "count": b"7",
        "point": b'{"x":0.5,"label":null}',
        "tags": b'["a","b"]',  # a set: sorted, whatever the hash seed
    }
    assert encoded.appends == {
        "steps": [b'[0,"calc",null]', b'[1,"calc",2.5]'],
        "loose": [b'[[1,"x"]]'],
    }
    # The same data the stores were given before, for those that take plain JSON
    # (a set now in its canonical order).
    data, plain = encoded.data(), codec.encode_patch(patch)
    assert data["append"] == plain["append"]
    assert data["set"].pop("tags") == sorted(plain["set"].pop("tags")) == ["a", "b"]
    assert data["set"] == plain["set"]


def test_a_sequence_assigned_whole_is_encoded_item_by_item() -> None:
    hasher, _ = _hasher()
    steps = History[Step]().append(Step(0, "a", None), Step(1, "b", 1.0))
    encoded = hasher.encode(Patch(steps=steps), stage="work")
    assert encoded.items["steps"] == [b'[0,"a",null]', b'[1,"b",1.0]']
    assert encoded.values["steps"] == b'[[0,"a",null],[1,"b",1.0]]'


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        (Patch(ratio=math.nan), "ratio"),
        (Patch(point=Point(x=math.inf)), "point"),
        (Patch().append("steps", Step(0, "calc", -math.inf)), "steps"),
        (Patch(loose=(Loose(what=(object(),)),)), "loose"),  # type: ignore[arg-type]
    ],
)
def test_a_value_that_is_not_json_is_refused_naming_its_field(patch: Patch, field: str) -> None:
    hasher, _ = _hasher()
    with pytest.raises(UnserializablePatch, match=f"'{field}'"):
        hasher.encode(patch, stage="work")


def test_a_null_that_stands_for_none_is_no_nan() -> None:
    hasher, _ = _hasher()
    encoded = hasher.encode(Patch(point=Point(x=1.0), maybe=None), stage="work")
    assert encoded.values == {"point": b'{"x":1.0,"label":null}', "maybe": b"null"}


class SpyStore(MemoryStore):
    """A memory store that keeps what `append` was given."""

    def __init__(self, *, encoded: bool = True) -> None:
        super().__init__()
        self.takes_encoded = encoded
        self.given: list[tuple[list[StoredEvent], Any]] = []

    async def append(
        self,
        session_id: str,
        events: Sequence[StoredEvent],
        *,
        snapshot: tuple[int, Any] | None = None,
        status: str | None = None,
        applied: int | None = None,
        posts: Sequence[NewMessage] = (),
        owner: str | None = None,
        waiting: Any = None,
        accepts: Collection[str] = (),
    ) -> None:
        self.given.append((list(events), snapshot))
        await super().append(
            session_id,
            events,
            snapshot=snapshot,
            status=status,
            applied=applied,
            posts=posts,
            owner=owner,
            waiting=waiting,
            accepts=accepts,
        )


def _work(view: StateView[Ledger]) -> Patch:
    return Patch(note="done", point=Point(x=2.0)).append("steps", Step(0, "calc", 0.5))


@pytest.mark.parametrize("encoded", [True, False], ids=["takes-encoded", "plain-json"])
async def test_the_store_gets_encoded_values_or_plain_json_and_reads_back_the_same(
    encoded: bool,
) -> None:
    machine = _machine(_work)
    store = SpyStore(encoded=encoded)
    async with store, AgentSystem(store=store, snapshot_every=1) as system:
        result = await system.run(machine, Ledger(), session_id="s")
        stored = await store.history("s")
        report = await system.stored(machine, "s").replay()
    assert result.exit_reason is ExitReason.FINISHED
    assert report.ok
    assert report.checked == 1
    (events, snapshot), *_ = store.given
    patch = events[0].patch
    assert (type(patch) is EncodedPatch) is encoded
    assert isinstance(snapshot[1], bytes) is encoded
    expected = {
        "set": {"note": "done", "point": {"x": 2.0, "label": None}},
        "append": {"steps": [[0, "calc", 0.5]]},
    }
    assert stored[0].patch == expected
    if not encoded:
        assert patch == expected
        assert snapshot[1] == EventCodec(machine).encode_state(result.state)


def test_a_digest_over_the_encoded_bytes_is_the_digest_of_the_state() -> None:
    hasher, _ = _hasher()
    state = Ledger()
    patch = Patch(point=Point(x=3.0), tags=frozenset({"z", "y"})).append(
        "steps", Step(0, "t", None)
    )
    after = state.model_copy(
        update={
            "point": patch.values["point"],
            "tags": patch.values["tags"],
            "steps": state.steps.append(*patch.appends["steps"]),
        }
    )
    event = TransitionEvent(
        session_id="",
        seq=1,
        kind=EventKind.ROLLBACK,
        stage=None,
        from_state=L.THINKING,
        to_state=L.THINKING,
        reads=frozenset(),
        writes=patch.fields,
        patch=patch,
        attempt=0,
        started_at=0.0,
        finished_at=0.0,
    )
    digest = hasher.start(state).after(event, after, hasher.encode(patch))
    assert digest.value == hasher.of(after)
    assert hasher.encode(patch).values["point"] == TypeAdapter(Point).dump_json(Point(x=3.0))


class Plain(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    when: int | None = None


class Money(enum.Enum):
    HALF = 0.5


@pytest.mark.parametrize(
    ("annotation", "may"),
    [
        (str | None, False),
        (frozenset[str], False),
        (tuple[int, ...], False),
        (Plain, False),
        (Color, False),
        (float, True),
        (int | float, True),
        (Point, True),
        (Step, True),
        (History[Step], True),
        (Money, True),
        (Any, True),
        (list, True),  # a bare container may hold anything
        (dict[str, Any], True),
    ],
    ids=repr,
)
def test_only_types_that_may_hold_a_float_are_checked_for_nan(annotation: Any, may: bool) -> None:
    assert may_hold_floats(annotation) is may
