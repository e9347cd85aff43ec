"""Patch validation: permissions, per-field value validation, invariants.

``model_copy(update=...)`` does not validate, so each written value is
validated on its own through a cached ``TypeAdapter`` of its field; appended
items through an adapter of the sequence's item type. Only the written fields
are touched, so the cost of a commit does not grow with the state's history.

A value whose validation could only give it back unchanged skips the adapter:
one of the exact types a plain field (no constraints, no field validator)
declares (``str``, ``int | None``, an enum, a pydantic model that is not
revalidated, a union or discriminated union of those), an ``int`` or
``float`` within a field's bounds (``Field(ge=0)``), a tuple of such items for
a ``tuple[X, ...]`` field, or a named tuple whose items are each of their
declared plain types.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
import types
import typing
import weakref
from typing import TYPE_CHECKING, Annotated, Any, get_args, get_origin, is_typeddict

import annotated_types
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from .._errors import (
    InvalidPatch,
    InvariantViolation,
    TransitionInvariantViolation,
    UndeclaredWrite,
)
from ..core._seams import item_type
from ..protocols import SUPERVISOR_FIELDS, AgentState, History, Patch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ..protocols import Condition, Machine, TransitionCondition

__all__ = ["PatchValidator", "check_edge", "check_invariants", "state_label"]


def state_label(state: enum.Enum) -> str:
    """A lifecycle state as events and errors name it: its value if a string, else its name."""
    return str(state.value) if isinstance(state.value, str) else state.name


class _Fields:
    """The validation of each field of one state type: adapters and exact types.

    Args:
        state_type: The state type.
    """

    __slots__ = ("__weakref__", "checks", "exact", "exact_items", "hooked", "items", "values")

    def __init__(self, state_type: type[AgentState]) -> None:
        self.values: dict[str, TypeAdapter[Any]] = {}
        self.items: dict[str, TypeAdapter[Any] | None] = {}
        # Fields with the model's own field validators are validated through the
        # model (on a throwaway copy); the others through an adapter of their full
        # annotation, constraints and ``Annotated`` metadata included.
        self.hooked = frozenset(
            name
            for decorator in state_type.__pydantic_decorators__.field_validators.values()
            for name in decorator.info.fields
        )
        if "*" in self.hooked:
            self.hooked = frozenset(state_type.model_fields)
        #: The exact types a field's value may have to skip validation (see the module).
        self.exact: dict[str, frozenset[type]] = {}
        #: Whether an item appended to a sequence field may skip validation.
        self.exact_items: dict[str, Callable[[Any], bool]] = {}
        #: For the other fields, a test that a value validates as itself, where known.
        self.checks: dict[str, Callable[[Any], bool]] = {}
        for name, field in state_type.model_fields.items():
            annotation = field.rebuild_annotation()
            config = None if _has_config(field.annotation) else _CONFIG
            self.values[name] = TypeAdapter(annotation, config=config)
            item = item_type(field.annotation)
            self.items[name] = (
                None
                if item is None
                else TypeAdapter(item, config=None if _has_config(item) else _CONFIG)
            )
            if name in self.hooked:
                continue
            if field.metadata:
                if (bounded := _bounded_check(field.annotation, field.metadata)) is not None:
                    self.checks[name] = bounded
                continue
            if (exact := _exact_types(field.annotation)) is not None:
                self.exact[name] = exact
            if item is not None and (check := _item_check(item)) is not None:
                self.exact_items[name] = check
                if get_origin(field.annotation) is tuple:
                    self.checks[name] = _tuple_check(check)


#: Each state type's `_Fields`, made once: building pydantic adapters is the
#: dearest part of compiling a machine, and most machines of a process share
#: their state type (every ``react_agent`` has `ReactState` or a subclass).
_FIELDS: weakref.WeakKeyDictionary[type, _Fields] = weakref.WeakKeyDictionary()


class PatchValidator:
    """Validates patches against one machine's state type and invariants.

    Args:
        machine: The machine whose state type and invariants apply.
    """

    __slots__ = ("_checks", "_exact", "_exact_items", "_hooked", "_items", "_machine", "_values")

    def __init__(self, machine: Machine[Any]) -> None:
        self._machine = machine
        # The adapters depend on the state type only: machines sharing one share them.
        fields = _FIELDS.get(machine.state_type)
        if fields is None:
            fields = _FIELDS[machine.state_type] = _Fields(machine.state_type)
        self._hooked = fields.hooked
        self._values = fields.values
        self._items = fields.items
        self._exact = fields.exact
        self._exact_items = fields.exact_items
        self._checks = fields.checks

    def updates(
        self,
        state: AgentState,
        patch: Patch,
        *,
        stage: str,
        writes: frozenset[str],
    ) -> dict[str, Any]:
        """Validate ``patch`` and return the field updates it makes to ``state``.

        Nothing is changed: the caller commits the updates, or drops them.

        Raises:
            UndeclaredWrite: If the patch writes outside ``writes`` (never partly merged).
            InvalidPatch: If a value fails its field's validation, a field is both
                assigned and appended to, or an append targets a non-sequence field.
        """
        return self.validate(state, patch, stage=stage, writes=writes)[0]

    def validate(
        self,
        state: AgentState,
        patch: Patch,
        *,
        stage: str,
        writes: frozenset[str],
    ) -> tuple[dict[str, Any], Patch]:
        """Like `updates`, and also return the patch with its values as validated.

        The validated patch is what an event records (a dict a stage wrote for a
        model field is recorded as the model), so replaying it gives the same state.
        It is ``patch`` itself when validation changed no value.

        Raises:
            UndeclaredWrite: If the patch writes outside ``writes`` (never partly merged).
            InvalidPatch: If a value fails its field's validation, a field is both
                assigned and appended to, or an append targets a non-sequence field.
        """
        updates, patch, _ = self._validated(state, patch, stage=stage, writes=writes)
        return updates, patch

    def _validated(
        self,
        state: AgentState,
        patch: Patch,
        *,
        stage: str,
        writes: frozenset[str],
    ) -> tuple[dict[str, Any], Patch, frozenset[str]]:
        """`validate`, also returning the fields the patch writes (computed once)."""
        if not isinstance(patch, Patch):
            raise InvalidPatch(
                stage=stage,
                field="(patch)",
                reason=f"execute() returned {type(patch).__name__}, not a Patch",
            )
        values, appends = patch._parts()  # read only: no views, no copies
        written = frozenset(values) if not appends else frozenset(values).union(appends)
        if not written <= writes or not written.isdisjoint(SUPERVISOR_FIELDS):
            raise UndeclaredWrite(
                stage=stage, fields=written - (writes - SUPERVISOR_FIELDS), writes=writes
            )
        updates: dict[str, Any] = {}
        changed = False
        validated_appends: dict[str, tuple[Any, ...]] = {}
        exact, checks = self._exact, self._checks
        for name, value in values.items():
            if name in appends:
                raise InvalidPatch(
                    stage=stage, field=name, reason="a patch may assign or append, not both"
                )
            types_ = exact.get(name)
            if types_ is not None and type(value) in types_:
                updates[name] = value  # validation would give it back as it is
                continue
            check = checks.get(name)
            if check is not None and check(value):
                updates[name] = value  # likewise (a number within bounds, a tuple of such)
                continue
            try:
                if name in self._hooked:
                    scratch = state.model_copy()
                    type(state).__pydantic_validator__.validate_assignment(scratch, name, value)
                    updates[name] = getattr(scratch, name)
                else:
                    updates[name] = self._values[name].validate_python(value)
            except ValidationError as exc:
                raise InvalidPatch(stage=stage, field=name, reason=_reason(exc)) from exc
            changed = changed or updates[name] is not value
        for name, items in appends.items():
            adapter = self._items.get(name)
            if adapter is None:
                raise InvalidPatch(
                    stage=stage,
                    field=name,
                    reason="only History[...] or tuple[X, ...] fields can be appended to",
                )
            check = self._exact_items.get(name)
            if check is not None and all(map(check, items)):
                checked = items  # validation would give each back as it is
            else:
                try:
                    checked = tuple(adapter.validate_python(item) for item in items)
                except ValidationError as exc:
                    raise InvalidPatch(stage=stage, field=name, reason=_reason(exc)) from exc
                changed = changed or any(a is not b for a, b in zip(checked, items, strict=True))
            validated_appends[name] = checked
            current = getattr(state, name)
            if isinstance(current, History):
                updates[name] = current.append(*checked)
            else:
                updates[name] = (*current, *checked)
        if changed:
            patch = Patch.of({name: updates[name] for name in values}, validated_appends)
        return updates, patch, written

    def check_invariants(self, state: AgentState, lifecycle: enum.Enum, *, stage: str) -> None:
        """Check every invariant of ``lifecycle`` on ``state``.

        Raises:
            InvariantViolation: Naming the first invariant that does not hold, or
                whose predicate raised.
        """
        check_invariants(self._machine.invariants_of(lifecycle), state, lifecycle, stage=stage)

    def check_transition(self, before: AgentState, after: AgentState, *, stage: str) -> None:
        """Check the invariants of the edge from ``before.lifecycle`` to ``after.lifecycle``.

        Raises:
            TransitionInvariantViolation: Naming the first that does not hold, or
                whose predicate raised.
        """
        source, target = before.lifecycle, after.lifecycle
        check_edge(
            self._machine.transition_invariants_of(source, target), before, after, stage=stage
        )


def check_invariants(
    conditions: Iterable[Condition[Any]], state: AgentState, lifecycle: enum.Enum, *, stage: str
) -> None:
    """Check ``conditions`` (the invariants of ``lifecycle``) on ``state``.

    Raises:
        InvariantViolation: Naming the first that does not hold, or whose predicate raised.
    """
    for condition in conditions:
        try:
            holds = condition.holds(state)
        except Exception as exc:  # a broken predicate is a violation, never a crash
            raise InvariantViolation(
                stage=stage,
                invariant=f"{condition.name} (the check raised {exc!r})",
                lifecycle=state_label(lifecycle),
            ) from exc
        if not holds:
            raise InvariantViolation(
                stage=stage, invariant=condition.name, lifecycle=state_label(lifecycle)
            )


def check_edge(
    conditions: Iterable[TransitionCondition[Any]],
    before: AgentState,
    after: AgentState,
    *,
    stage: str,
) -> None:
    """Check ``conditions`` (the invariants of the edge ``before`` -> ``after``).

    Raises:
        TransitionInvariantViolation: Naming the first that does not hold, or
            whose predicate raised.
    """
    for condition in conditions:
        try:
            holds = condition.holds(before, after)
        except Exception as exc:  # a broken predicate is a violation, never a crash
            raise TransitionInvariantViolation(
                stage=stage,
                invariant=f"{condition.name} (the check raised {exc!r})",
                from_state=state_label(before.lifecycle),
                to_state=state_label(after.lifecycle),
            ) from exc
        if not holds:
            raise TransitionInvariantViolation(
                stage=stage,
                invariant=condition.name,
                from_state=state_label(before.lifecycle),
                to_state=state_label(after.lifecycle),
            )


def _reason(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    return f"{first.get('msg', exc)}" + (f" (at {where})" if where else "")


_CONFIG: Any = {"arbitrary_types_allowed": True}
#: Types whose exact instances pydantic's lax validation gives back as they are.
_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})


def _exact_types(annotation: Any) -> frozenset[type] | None:
    """The exact types whose values validate as themselves under ``annotation``, if known.

    A plain type, an enum, a pydantic model that is never revalidated, or a union
    of plain types (``str | None``); ``None`` for anything else (constraints,
    containers, ``Annotated`` metadata...), which is always validated.
    """
    if annotation in _PLAIN:
        return frozenset({annotation})
    if get_origin(annotation) is Annotated:  # a discriminated union, and nothing else
        inner, *extra = get_args(annotation)
        if len(extra) == 1 and _only_discriminator(extra[0]):
            return _exact_types(inner)
        return None
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return frozenset({annotation})
        if (
            issubclass(annotation, BaseModel)
            and annotation.model_config.get("revalidate_instances", "never") == "never"
        ):
            return frozenset({annotation})
        return None
    if get_origin(annotation) in (typing.Union, types.UnionType):
        # An exact instance of one member is that member's strict match: a union
        # gives it back as it is (its other members do not convert it).
        found = [_exact_types(member) for member in get_args(annotation)]
        if all(kinds is not None for kinds in found):
            return frozenset().union(*(kinds for kinds in found if kinds is not None))
    return None


def _only_discriminator(metadata: Any) -> bool:
    """Whether ``metadata`` (of an ``Annotated`` union) names a discriminator and nothing else."""
    if not isinstance(metadata, FieldInfo) or metadata.discriminator is None:
        return False
    return not metadata.metadata and isinstance(metadata.discriminator, str)


#: The bounds a number's field may declare, and the test each makes.
_BOUNDS: dict[type, tuple[str, Callable[[Any, Any], bool]]] = {
    annotated_types.Ge: ("ge", operator.ge),
    annotated_types.Gt: ("gt", operator.gt),
    annotated_types.Le: ("le", operator.le),
    annotated_types.Lt: ("lt", operator.lt),
}


def _bounded_check(annotation: Any, metadata: list[Any]) -> Callable[[Any], bool] | None:
    """A test that a value of an ``int`` or ``float`` field with bounds only is valid as it is.

    ``turns: int = Field(ge=0)``: an exact ``int`` within the bounds validates as
    itself; anything else (out of bounds, NaN, another type) goes to the adapter.
    """
    if annotation not in (int, float):
        return None
    tests: list[tuple[Callable[[Any, Any], bool], Any]] = []
    for item in metadata:
        bound = _BOUNDS.get(type(item))
        if bound is None:
            return None
        tests.append((bound[1], getattr(item, bound[0])))

    def check(value: Any) -> bool:
        if type(value) is not annotation:
            return False
        # A loop, not all(): no generator made at each commit (the collector counts those).
        for test, limit in tests:  # noqa: SIM110
            if not test(value, limit):
                return False
        return True

    return check


def _tuple_check(item: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """A test that a whole ``tuple[X, ...]`` validates as itself: a tuple of such items."""

    def check(value: Any) -> bool:
        if type(value) is not tuple:
            return False
        for one in value:  # noqa: SIM110 (likewise)
            if not item(one):
                return False
        return True

    return check


def _item_check(item: Any) -> Callable[[Any], bool] | None:
    """A test that an appended item would validate as itself, if one is known.

    An item of an exact type of `_exact_types`; or a named tuple whose fields are
    each of their annotation's exact plain types (a named tuple does not check
    its fields, so those are looked at one by one).
    """
    exact = _exact_types(item)
    if exact is not None:
        return lambda value: type(value) in exact
    if not (isinstance(item, type) and issubclass(item, tuple) and hasattr(item, "_fields")):
        return None
    try:
        hints = typing.get_type_hints(item)
    except Exception:  # an unresolvable annotation: validate as declared
        return None
    fields: list[frozenset[type]] = []
    for name in item._fields:
        found = _exact_types(hints.get(name, Any))
        if found is None or not found <= _PLAIN:
            return None
        fields.append(found)
    kinds = tuple(fields)
    size = len(kinds)

    def check(value: Any) -> bool:
        # ``map`` rather than a generator in ``all()``: half the cost, at every commit.
        # The length too: ``map`` stops at the shorter (a tuple built by ``tuple.__new__``).
        return (
            type(value) is item
            and len(value) == size
            and all(map(frozenset.__contains__, kinds, map(type, value)))
        )

    return check


def _has_config(annotation: Any) -> bool:
    """Whether ``annotation`` carries its own pydantic config (a model, dataclass, TypedDict).

    pydantic refuses a ``config`` for those; ``Annotated`` wrappers are looked through.
    """
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if not isinstance(annotation, type):
        return False
    return (
        issubclass(annotation, BaseModel)
        or dataclasses.is_dataclass(annotation)
        or is_typeddict(annotation)
    )
