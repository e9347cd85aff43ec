"""The core guarantees hold against the ways around them a stage could try.

A stage changes the state only through a declared, validated, stored patch:
not by mutating a value in place (the machine refuses mutable field types),
not by reaching around its view to undeclared fields, and not by handing a
`History` of the wrong items to a typed history field.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import pickle
import re
from typing import TYPE_CHECKING, Any, Optional, Union, cast, get_args, get_origin

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    FrozenMap,
    History,
    Machine,
    Patch,
    Stage,
    StateView,
    stage,
)
from arkhon_rheo import Lifecycle as L
from arkhon_rheo.protocols import EventKind
from arkhon_rheo.store import MemoryStore

if TYPE_CHECKING:
    from collections.abc import Callable

# -- machines over one field -------------------------------------------------------


def one_field_state(annotation: Any, default: Any = None) -> Any:
    """An `AgentState` subclass with one business field ``f`` of ``annotation``."""
    fields: Any = {"lifecycle": (L, L.INITIALIZED), "f": (annotation, default)}
    return create_model("S", __base__=AgentState, **fields)


def one_stage_machine(state_type: type[AgentState], body: type[Stage[Any]]) -> Machine[Any]:
    return Machine(
        name="one",
        state_type=state_type,
        initial=L.INITIALIZED,
        transitions={L.INITIALIZED: {L.FINISHED}},
        stages={L.INITIALIZED: body},
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
    )


# -- 1. writes by mutation -----------------------------------------------------------


class Loose(BaseModel):
    n: int = 0


@dataclasses.dataclass
class LooseData:
    n: int = 0


class Tight(BaseModel):
    model_config = ConfigDict(frozen=True)
    n: int = 0
    items: list[int] = []


@pytest.mark.parametrize(
    ("annotation", "found", "instead"),
    [
        (list[int], "list[int]", "tuple[int, ...]"),
        (dict[str, int], "dict[str, int]", "FrozenMap[str, int]"),
        (set[str], "set[str]", "frozenset[str]"),
        (bytearray, "bytearray", "bytes"),
        (Loose, "Loose (a model that is not frozen)", "frozen model"),
        (LooseData, "LooseData (a dataclass that is not frozen)", "frozen dataclass"),
        (tuple[list[int], ...], "list[int]", "tuple[int, ...]"),
        (Optional[dict[str, int]], "dict[str, int]", "FrozenMap[str, int]"),  # noqa: UP045
        (Union[int, set[int]], "set[int]", "frozenset[int]"),  # noqa: UP007
        (Tight, "list[int] (in Tight.items)", "tuple[int, ...]"),
        (Any, "Any", "concrete immutable type"),
    ],
)
def test_a_mutable_field_type_is_refused_naming_field_type_and_remedy(
    annotation: Any, found: str, instead: str
) -> None:
    @stage(reads={"f"}, next=L.FINISHED)
    async def look(view: StateView[Any]) -> Patch:
        return Patch()

    with pytest.raises(ConfigurationError) as info:
        one_stage_machine(one_field_state(annotation), look)
    message = str(info.value)
    assert "field 'f' of S" in message
    assert f"mutable type: {found};" in message
    assert instead in message


@pytest.mark.anyio
async def test_a_stage_cannot_change_a_list_field_in_place() -> None:
    """The reported hole: ``view.items.append(666)`` with no declared writes."""

    @stage(reads={"f"}, next=L.FINISHED)
    async def sneak(view: StateView[Any]) -> Patch:
        view.f.append(666)
        return Patch()

    with pytest.raises(ConfigurationError, match=r"field 'f' of S .*list\[int\]"):
        one_stage_machine(one_field_state(list[int], []), sneak)
    # The immutable form builds, and the same stage fails without changing anything.
    immutable = one_field_state(tuple[int, ...], ())
    machine = one_stage_machine(immutable, sneak)
    async with MemoryStore() as store, AgentSystem(store=store) as agents:
        result = await agents.run(machine, immutable(f=(1,)), session_id="s")
        report = await agents.stored(machine, "s").replay()
    assert result.state.f == (1,)
    assert report.ok
    assert report.state == result.state


# The property: type trees built from every container kind. Each node is
# (annotation, the mutable kind it holds first or None, a sample value).

_names = itertools.count()
Node = tuple[Any, "tuple[str, str] | None", Any]


def _model(annotation: Any, value: Any, *, frozen: bool) -> Node:
    name = f"{'Frozen' if frozen else 'Loose'}Model{next(_names)}"
    fields: Any = {"x": (annotation, ...)}
    config = ConfigDict(frozen=frozen, arbitrary_types_allowed=True)  # bytearray
    cls: Any = create_model(name, __config__=config, **fields)
    kind = None if frozen else (f"{name} (a model that is not frozen)", "frozen model")
    return cls, kind, cls(x=value) if frozen and value is not None else None


def _dataclass(annotation: Any, value: Any, *, frozen: bool) -> Node:
    name = f"{'Frozen' if frozen else 'Loose'}Data{next(_names)}"
    cls: Any = dataclasses.make_dataclass(name, [("x", annotation)], frozen=frozen)
    kind = None if frozen else (f"{name} (a dataclass that is not frozen)", "frozen dataclass")
    return cls, kind, cls(x=value) if frozen and value is not None else None


#: Generic classes, typed ``Any`` so that they can be subscripted with drawn types.
LIST: Any = list
DICT: Any = dict
SET: Any = set
TUPLE: Any = tuple
FROZENSET: Any = frozenset
HISTORY: Any = History
FROZENMAP: Any = FrozenMap
OPTIONAL: Any = Optional
UNION: Any = Union
KINDS = [
    *("list", "dict", "set", "model", "dataclass"),  # mutable
    *("tuple", "frozenset", "history", "frozenmap", "optional", "union"),
    *("frozen model", "frozen dataclass"),
]


def _wrap(draw: Any, child: Node) -> Node:
    ann, inner, value = child
    how = draw(st.sampled_from(KINDS))
    if how == "frozenset" and re.search(r"History|FrozenMap|Model|Data", _text(ann)):
        # pydantic's python-mode dump of a frozenset turns these items into lists
        # and dicts, which cannot be set members: a known limit, not ours to test.
        how = "tuple"
    first: tuple[str, str] | None
    if how == "list":
        return LIST[ann], (f"list[{_text(ann)}]", "tuple["), None
    if how == "dict":
        return DICT[str, ann], (f"dict[str, {_text(ann)}]", "FrozenMap["), None
    if how == "set":
        return SET[ann], (f"set[{_text(ann)}]", "frozenset["), None
    node: Node
    if how in ("model", "frozen model"):
        node = _model(ann, value, frozen=how == "frozen model")
    elif how in ("dataclass", "frozen dataclass"):
        node = _dataclass(ann, value, frozen=how == "frozen dataclass")
    elif how == "tuple":
        node = TUPLE[ann, ...], None, (value,)
    elif how == "frozenset":
        node = FROZENSET[ann], None, frozenset({value})
    elif how == "history":
        node = HISTORY[ann], None, History([value])
    elif how == "frozenmap":
        node = FROZENMAP[str, ann], None, FrozenMap({"k": value})
    elif how == "optional":
        node = OPTIONAL[ann], None, value
    else:
        node = UNION[ann, int], None, value
    if value is None:  # a mutable type inside: there is no valid sample to make
        node = node[0], node[1], None
    first = node[1] if node[1] is not None else inner
    if first is not None and how in ("frozen model", "frozen dataclass"):
        first = (f"{first[0]} (in {node[0].__name__}.x)", first[1])
    return node[0], first, node[2]


def _text(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is None:
        return str(annotation.__name__)
    if origin is Union:
        return " | ".join("None" if a is type(None) else _text(a) for a in args)
    inner = ", ".join("..." if a is Ellipsis else _text(a) for a in args)
    return f"{origin.__name__}[{inner}]"


@st.composite
def type_trees(draw: Any) -> Node:
    leaf: Node = draw(
        st.sampled_from(
            [
                (int, None, 7),
                (str, None, "s"),
                (bytes, None, b"b"),
                (bytearray, ("bytearray", "bytes"), None),
            ]
        )
    )
    node = leaf
    for _ in range(draw(st.integers(0, 3))):
        node = _wrap(draw, node)
    return node


MUTATIONS: list[tuple[str, Callable[[Any], object]]] = [
    ("append", lambda v: v.append(666)),
    ("extend", lambda v: v.extend([666])),
    ("add", lambda v: v.add(666)),
    ("insert", lambda v: v.insert(0, 666)),
    ("pop", lambda v: v.pop()),
    ("clear", lambda v: v.clear()),
    ("update", lambda v: v.update({"k": 666})),
    ("setitem 0", lambda v: v.__setitem__(0, 666)),
    ("setitem k", lambda v: v.__setitem__("k", 666)),
    ("delitem", lambda v: v.__delitem__(0)),
    ("setattr", lambda v: setattr(v, "x", 666)),
    ("delattr", lambda v: delattr(v, "x")),
]


def try_to_mutate(value: Any, done: list[str]) -> None:
    """Try every in-place change on ``value`` and what it holds; record what worked."""
    for name, mutate in MUTATIONS:
        before = copy.deepcopy(value)
        try:
            mutate(value)  # History.append and the like return a new value: no harm
        except Exception:  # refused, as it must be
            continue
        if value != before:
            done.append(f"{name} on {type(value).__name__}")
    if isinstance(value, BaseModel):
        children: Any = [getattr(value, name) for name in type(value).model_fields]
    elif dataclasses.is_dataclass(value):
        children = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, FrozenMap):
        children = list(value.values())
    elif isinstance(value, tuple | frozenset | History):
        children = list(value)
    else:
        children = []
    for child in children:
        try_to_mutate(child, done)


@settings(deadline=None)  # examples: the profile's (tests/conftest.py)
@given(tree=type_trees())
def test_machine_refuses_every_mutable_type_and_immutable_ones_cannot_be_mutated(
    tree: Node,
) -> None:
    annotation, first, value = tree
    done: list[str] = []

    @stage(reads={"f"}, next=L.FINISHED)
    async def mutate(view: StateView[Any]) -> Patch:
        try_to_mutate(view.f, done)
        return Patch()

    if first is not None:
        found, instead = first
        with pytest.raises(ConfigurationError) as info:
            one_stage_machine(one_field_state(annotation), mutate)
        assert f"field 'f' of S has a mutable type: {found};" in str(info.value)
        assert instead in str(info.value)
        return
    state_type = one_field_state(annotation)
    machine = one_stage_machine(state_type, mutate)
    initial = state_type(f=value)

    async def main() -> None:
        async with MemoryStore() as store, AgentSystem(store=store) as agents:
            result = await agents.run(machine, initial, session_id="s")
            report = await agents.stored(machine, "s").replay()
            events = await agents.stored(machine, "s").history()
        assert done == []
        moved = {"lifecycle": L.INITIALIZED, "session_id": ""}
        assert result.state.model_copy(update=moved) == initial
        assert result.state.f == value
        assert [e.patch for e in events] == [Patch()]
        assert report.ok
        assert report.state == result.state

    for backend in ("asyncio", "trio"):
        anyio.run(main, backend=backend)


def test_metadata_is_frozen_all_the_way_down() -> None:
    state = one_field_state(int, 0)(metadata={"tags": ["a"], "nested": {"k": {1, 2}}})
    assert state.metadata["tags"] == ("a",)
    assert state.metadata["nested"]["k"] == frozenset({1, 2})
    with pytest.raises(AttributeError):
        state.metadata["tags"].append("b")
    assert state.model_dump(mode="json")["metadata"]["nested"] == {"k": [1, 2]}


def test_frozen_map_validates_its_items_whatever_mapping_they_come_in() -> None:
    state_type = one_field_state(FrozenMap[str, int], FrozenMap())
    kept = FrozenMap({"a": 1})
    assert state_type(f=kept).f is kept
    assert state_type(f={"a": 1}).f == {"a": 1}
    for bad in ({"a": "x"}, FrozenMap({"a": "x"})):
        with pytest.raises(ValidationError):
            state_type(f=bad)
    with pytest.raises(TypeError):
        kept._data["a"] = 2
    assert pickle.loads(pickle.dumps(kept)) == kept
    assert copy.deepcopy(kept) == kept
    assert hash(kept) == hash(FrozenMap({"a": 1}))
    data = state_type(f=kept).model_dump(mode="json")
    assert state_type.model_validate(data).f == kept


# -- 2. reads around the view --------------------------------------------------------

SECRET = "TOP-SECRET"


class Secretive(AgentState):
    lifecycle: L = L.INITIALIZED
    public: str = "hello"
    secret: str = SECRET


@pytest.mark.anyio
async def test_no_ordinary_attribute_of_the_view_reaches_an_undeclared_field() -> None:
    seen: dict[str, str] = {}

    @stage(reads={"public"}, next=L.FINISHED)
    async def peek(view: StateView[Secretive]) -> Patch:
        names = {"public", "secret", "_state", "_reads", "_values", "__dict__", *dir(view)}
        for name in sorted(names):
            try:
                seen[name] = repr(getattr(view, name))
            except Exception as exc:
                seen[name] = f"raised {type(exc).__name__}"
        try:
            seen["vars()"] = repr(vars(view))
        except TypeError:
            seen["vars()"] = "raised TypeError"
        return Patch()

    machine: Machine[Secretive] = one_stage_machine(Secretive, peek)
    async with AgentSystem(path=None) as agents:
        result = await agents.run(machine, Secretive(), session_id="s")
    assert result.state.secret == SECRET
    assert seen["_state"] == "raised AttributeError"
    assert seen["__dict__"] == "raised AttributeError"
    assert seen["vars()"] == "raised TypeError"
    assert seen["public"] == "'hello'"
    assert seen["secret"] == "raised UndeclaredRead"
    leaks = {name: text for name, text in seen.items() if SECRET in text}
    assert leaks == {}


# -- 3. History[T] of anything -------------------------------------------------------


class Counts(AgentState):
    lifecycle: L = L.INITIALIZED
    c: History[int] = History()


def test_a_history_of_wrong_items_is_refused_like_a_list_of_them() -> None:
    with pytest.raises(ValidationError):
        Counts(c=cast("Any", ["x"]))
    with pytest.raises(ValidationError):
        Counts(c=cast("Any", History(["x"])))
    kept = History([1, 2])
    assert Counts(c=kept).c is kept  # a valid history is shared, not copied
    assert Counts(c=cast("Any", History(["3"]))).c == [3]  # coerced, like a list


@pytest.mark.anyio
async def test_a_patch_with_a_history_of_wrong_items_is_invalid_and_never_stored() -> None:
    proposals = iter([History(["x"]), History([1, 2])])

    @stage(reads=(), writes={"c"}, next=L.FINISHED)
    async def fill(view: StateView[Counts]) -> Patch:
        return Patch(c=next(proposals))

    machine: Machine[Counts] = one_stage_machine(Counts, fill)
    async with AgentSystem() as agents:  # SQLite, in the test's own directory
        result = await agents.run(machine, Counts(), session_id="s")
        events = await agents.stored(machine, "s").history()
        report = await agents.stored(machine, "s").replay()
    refused, committed = events
    assert refused.kind is EventKind.FAILURE
    assert refused.error is not None
    assert refused.error.error_type == "InvalidPatch"
    assert "'c'" in refused.error.message
    assert refused.writes == {"last_error"}  # the state's c was left as it was
    assert "c" not in refused.patch.values
    assert committed.patch == Patch(c=History([1, 2]))
    assert result.state.c == [1, 2]
    assert report.ok
    assert report.state == result.state
