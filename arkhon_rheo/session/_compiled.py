"""The compiled machine: everything the runtime derives from one `Machine`, built once.

A `Machine` is a declaration. Running it needs a patch validator, an event
codec, a state hasher, its fingerprint and, for the supervisor's step, tables
per lifecycle state (the stage, its read and write sets, the invariants, the
allowed targets, the terminal flag). `compiled` builds them on first use and
keeps them on the machine itself, so they live exactly as long as the machine:
a service that builds a machine per request frees each one with its sessions,
and no cache keyed by ``id(machine)`` outlives (or, worse, outlives and
mistakes) the machine it was built for.

The per-state tables are keyed by the identity of the state member (its
``id``): enum members live for the life of the program, so the key is exact,
and looking it up costs an integer hash instead of ``Enum.__hash__``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from ..core._seams import EventCodec, fingerprint
from ._commit_rule import PatchValidator, StateHasher
from ._eventlog import Interner

if TYPE_CHECKING:
    import enum
    from collections.abc import Mapping

    from ..protocols import AgentState, Condition, Machine, Stage, TransitionCondition

__all__ = ["CompiledMachine", "StatePlan", "compiled", "with_fields"]

_BUILD = threading.Lock()
_set = object.__setattr__
S = TypeVar("S", bound="AgentState")


class StatePlan:
    """What the supervisor needs in one lifecycle state, computed once.

    Attributes:
        state: The lifecycle state.
        terminal: Whether a session in it has ended.
        failed: Whether it is the machine's failed state.
        stage_type: The stage that runs in it (``None`` in a terminal state).
        name: That stage's name (``""`` in a terminal state).
        reads: The stage's read set.
        writes: The stage's write set.
        preconditions: The stage's preconditions.
        deadline: Seconds the stage may run, or ``None``.
        invariants: Every invariant that holds in the state, the common ones first.
        allowed: The states it may move to, the implicit failed edge included.
        targets: The plan of each allowed target, by the target's ``id``.
        edge_checks: The transition invariants of each edge out of it that has
            any, by the target's ``id``.
        written: The sets of fields its commits wrote, one shared object per
            distinct set (see `shared_writes`).
    """

    __slots__ = (
        "allowed",
        "deadline",
        "edge_checks",
        "failed",
        "invariants",
        "name",
        "preconditions",
        "reads",
        "receives",
        "stage_type",
        "state",
        "targets",
        "terminal",
        "writes",
        "written",
    )

    def __init__(self, machine: Machine[Any], state: enum.Enum) -> None:
        self.state = state
        self.terminal = machine.is_terminal(state)
        self.failed = state is machine.failed
        stage_type: type[Stage[Any]] | None = machine.stages.get(state)
        self.stage_type = stage_type
        self.name = "" if stage_type is None else stage_type.name
        self.reads: frozenset[str] = frozenset() if stage_type is None else stage_type.reads
        self.writes: frozenset[str] = frozenset() if stage_type is None else stage_type.writes
        self.preconditions: tuple[Condition[Any], ...] = (
            () if stage_type is None else tuple(stage_type.preconditions)
        )
        self.deadline: float | None = machine.deadlines.get(state)
        #: Whether the state waits for messages (its stage is a `Receive` stage).
        self.receives = machine.waits_in(state)
        self.invariants: tuple[Condition[Any], ...] = machine.invariants_of(state)
        self.allowed: frozenset[enum.Enum] = machine.allowed(state)
        self.targets: dict[int, StatePlan] = {}
        self.edge_checks: dict[int, tuple[TransitionCondition[Any], ...]] = {}
        self.written: dict[frozenset[str], frozenset[str]] = {}
        for target in self.allowed:
            if checks := machine.transition_invariants_of(state, target):
                self.edge_checks[id(target)] = checks

    def shared_writes(self, written: frozenset[str]) -> frozenset[str]:
        """One object for each distinct set of fields this state's commits write.

        An event keeps its write set for as long as its session's log lives; a
        stage writes the same few sets again and again, so the events share
        them instead of each keeping a set the cyclic GC scans. At most 64
        distinct sets are kept; beyond them each event keeps its own.
        """
        shared = self.written.get(written)
        if shared is not None:
            return shared
        if len(self.written) < _SHARED_WRITES:
            self.written[written] = written
        return written


#: How many distinct write sets a state's plan shares (see `StatePlan.shared_writes`).
_SHARED_WRITES = 64


class CompiledMachine:
    """One machine's validator, codec, hasher, fingerprint and per-state plans.

    Build it with `compiled`, which keeps one per machine; the codec, hasher
    and fingerprint are made on first use (an in-memory session needs none).

    Args:
        machine: The machine to compile.
    """

    __slots__ = (
        "_codec",
        "_copyable",
        "_fingerprint",
        "_hasher",
        "_plans",
        "frozen",
        "interned",
        "machine",
        "validator",
    )

    def __init__(self, machine: Machine[Any]) -> None:
        self.machine = machine
        self.validator = PatchValidator(machine)
        self._codec: EventCodec | None = None
        self._hasher: StateHasher | None = None
        self._fingerprint: dict[str, Any] | None = None
        #: Numbers for the states, kinds and field sets its in-memory event logs name.
        self.interned = Interner()
        plans = {id(state): StatePlan(machine, state) for state in machine.states}
        for plan in plans.values():
            plan.targets = {id(target): plans[id(target)] for target in plan.allowed}
        self._plans = plans
        state_type = machine.state_type
        #: Whether its states are frozen: then consecutive states may share their
        #: set of fields set (see `with_fields`).
        self.frozen = state_type.model_config.get("frozen") is True
        # States copied field by field (see `copy_with`): those whose copy is pydantic's own.
        self._copyable: type[Any] | None = (
            state_type
            if state_type.model_config.get("extra") != "allow"
            and state_type.model_copy is BaseModel.model_copy
            and state_type.__copy__ is BaseModel.__copy__
            else None
        )

    @property
    def codec(self) -> EventCodec:
        """The machine's event codec."""
        if self._codec is None:
            self._codec = EventCodec(self.machine)
        return self._codec

    @property
    def hasher(self) -> StateHasher:
        """The machine's state hasher (over its codec's field adapters)."""
        if self._hasher is None:
            self._hasher = StateHasher(self.codec)
        return self._hasher

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The machine's structural fingerprint, as stored with its sessions."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.machine)
        return self._fingerprint

    def copy_with(self, state: S, updates: dict[str, Any]) -> S:
        """``state.model_copy(update=updates)``, without its generic steps.

        For a state of the machine's own type, without extra fields or private
        attributes, the copy is made as pydantic makes it (a new ``__dict__``,
        the updated fields marked set); any other goes through ``model_copy``.
        """
        cls = type(state)
        if (
            cls is not self._copyable
            or state.__pydantic_extra__ is not None
            or getattr(state, "__pydantic_private__", None) is not None
        ):
            return state.model_copy(update=updates)
        copied = cls.__new__(cls)
        _set(copied, "__dict__", {**state.__dict__, **updates})
        _set(copied, "__pydantic_extra__", None)
        _set(copied, "__pydantic_fields_set__", with_fields(state, updates, share=self.frozen))
        _set(copied, "__pydantic_private__", None)
        return copied

    def plan(self, state: enum.Enum) -> StatePlan:
        """The plan of ``state``.

        A value equal to one of the machine's states without being that member
        (a member of another ``str`` enum) gets a plan of its own, as the
        machine's mappings would answer for it.
        """
        found = self._plans.get(id(state))
        if found is None:
            found = StatePlan(self.machine, state)
            found.targets = {id(target): self._plans[id(target)] for target in found.allowed}
        return found


def with_fields(state: AgentState, names: Mapping[str, Any], *, share: bool) -> set[str]:
    """``state``'s set of fields set, with ``names`` added.

    With ``share``, the state's own set when it has them all already, as it
    soon does in a session (the fields a machine writes are few). Only for a
    frozen state type (pydantic adds to the set of a state whose field is
    assigned): the runtime never changes a set it did not just make, so
    consecutive states share one, and a commit makes no set the cyclic GC tracks.
    """
    fields: set[str] = state.__pydantic_fields_set__
    if share and fields.issuperset(names):
        return fields
    return fields | names.keys()


def compiled(machine: Machine[Any]) -> CompiledMachine:
    """The compiled form of ``machine``, built on first use and kept on the machine."""
    found: CompiledMachine | None = machine._compiled
    if found is None:
        with _BUILD:  # sessions of one machine may start in several threads' loops
            found = machine._compiled
            if found is None:
                found = machine._compiled = CompiledMachine(machine)
    return found
