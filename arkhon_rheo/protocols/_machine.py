"""`Machine`: a declared finite-state machine of lifecycle states and the stages that run them."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._errors import ConfigurationError
from ._frozen import mutable_part
from ._gates import Gate
from ._graph import StateGraph, build_graph
from ._inbox import Receive, legacy_kind
from ._resources import checked_resources
from ._sensitive import sensitive_problem
from ._stage import Condition, Stage, TransitionCondition
from ._state import SUPERVISOR_FIELDS, AgentState
from ._upgrade import Upgrade, ValuesFn, checked_upgrades

if TYPE_CHECKING:
    from ._events import TransitionEvent
    from ._store import StoredEvent

__all__ = ["Machine"]

S = TypeVar("S", bound=AgentState)

ConditionLike = Condition[Any] | Callable[[Any], bool]
TransitionConditionLike = TransitionCondition[Any] | Callable[[Any, Any], bool]


def _label(state: enum.Enum) -> str:
    return str(state.value) if isinstance(state.value, str) else state.name


def _edge_conditions(
    name: str,
    transition_invariants: Mapping[tuple[enum.Enum, enum.Enum], Iterable[TransitionConditionLike]]
    | None,
) -> dict[tuple[enum.Enum, enum.Enum], tuple[TransitionCondition[Any], ...]]:
    """The transition invariants by edge, each a `TransitionCondition`."""
    found: dict[tuple[enum.Enum, enum.Enum], tuple[TransitionCondition[Any], ...]] = {}
    for edge, conditions in (transition_invariants or {}).items():
        if not (isinstance(edge, tuple) and len(edge) == 2):
            raise ConfigurationError(
                f"machine {name!r}: transition_invariants keys must be (from, to) pairs "
                f"of states, got {edge!r}"
            )
        found[edge] = tuple(TransitionCondition.coerce(c) for c in conditions)
    return found


class Machine(Generic[S]):
    """States, transitions, the stage of each state, invariants and deadlines.

    A machine is checked when it is built; each mistake is a `ConfigurationError`
    naming the culprit: an unknown state, a non-terminal state without a stage,
    a stage reading or writing a field the state type lacks (or a field only
    the supervisor writes), a transition out of a terminal state, a state that
    cannot be reached from the initial one, a field of the state type whose
    type is mutable (a ``list``, ``dict``, ``set``, ``bytearray``, a model or
    dataclass that is not frozen, ``Any``; nested ones too): a stage could
    change such a value in place, reaching the live state without a patch.

    Every non-terminal state may move to ``failed``: the supervisor takes that
    edge on a fatal error; it need not be declared.

    Args:
        state_type: The `AgentState` subclass the machine runs on.
        initial: The state a session starts in.
        transitions: For each state, the states it may move to.
        stages: For each non-terminal state, the `Stage` class that runs in it
            (its order is the start order of stage actors, for rest_for_one).
        terminal: The states in which a session ends.
        failed: The terminal state a session moves to on a fatal error.
        invariants: Conditions per state, checked on every state that is
            committed in it; the key ``None`` holds invariants of every state.
        transition_invariants: Conditions per edge ``(from, to)``, each called
            with the state before and the candidate state after a step that
            takes that edge (a `TransitionCondition` or a plain callable of two
            states); a violation is a `TransitionInvariantViolation` and the
            step is not committed. The edge must be an allowed transition.
        deadlines: Seconds a state's stage may run before it is cancelled.
        error_routes: Where a recoverable failure in a state leads (with the
            error recorded in ``last_error``); without a route the stage is
            retried after its restart.
        loop_state: Entering this state from another one increments ``iteration``.
        gates: Where a session pauses for a human decision (see `Gate`).
        name: The machine's name, in logs and every session it stores
            (a session is resumed by the machine of the same name). Defaults to
            the state type's qualified name, so unnamed machines of different
            state types are told apart.
        resources: Named objects the machine's stages and tools use (a model
            client, a toolbox, an HTTP client...). The `AgentSystem` that drives
            a session enters each one that is an async context manager once,
            before the session is stored or resumed, shares it with every
            session, and leaves it when the system stops; one that reports
            itself open (``is_open`` is true) is left as it is, unless it
            counts its opens (``counts_opens`` is true, as the model clients
            do): that one is entered by every system that uses it. A tool reads
            them from its `ToolContext`.
        version: The version of the machine's state type and states (from 1).
            Stored sessions carry it; raise it when a change needs an upgrade.
        upgrades: How sessions stored by earlier versions are read: keyed by
            the version an `Upgrade` reads (``{1: Upgrade(rename={"a": "b"})}``
            makes version 1 sessions version 2 ones; a plain function of a dict
            of field values is ``Upgrade(values=fn)``), one per version from the
            oldest still read to ``version - 1``. Compatible changes (a new
            field with a default, a type that accepts more, a new state or
            transition) need none.
        reply: What a session of the machine answers to a message it was asked
            (``AgentSystem.ask``): called with the state at the end of the turn
            the message began; its value is `Reply.value`. ``None``: replies
            carry the state only (their ``value`` is ``None``).

    Raises:
        ConfigurationError: If the machine is inconsistent, as listed above, a
            resource's name is not a non-empty string, or the version or an
            upgrade is not as described.
    """

    def __init__(
        self,
        *,
        state_type: type[S],
        initial: enum.Enum,
        transitions: Mapping[enum.Enum, Iterable[enum.Enum]],
        stages: Mapping[enum.Enum, type[Stage[Any]]],
        terminal: Iterable[enum.Enum],
        failed: enum.Enum,
        invariants: Mapping[enum.Enum | None, Iterable[ConditionLike]] | None = None,
        transition_invariants: Mapping[
            tuple[enum.Enum, enum.Enum], Iterable[TransitionConditionLike]
        ]
        | None = None,
        deadlines: Mapping[enum.Enum, float] | None = None,
        error_routes: Mapping[enum.Enum, enum.Enum] | None = None,
        loop_state: enum.Enum | None = None,
        gates: Iterable[Gate] = (),
        name: str | None = None,
        resources: Mapping[str, object] | None = None,
        version: int = 1,
        upgrades: Mapping[int, Upgrade | ValuesFn] | None = None,
        reply: Callable[[S], Any] | None = None,
    ) -> None:
        if not (isinstance(state_type, type) and issubclass(state_type, AgentState)):
            raise ConfigurationError(
                f"machine {name or '(unnamed)'!r}: state_type must be an AgentState subclass, "
                f"got {state_type!r}"
            )
        if name is None:
            name = f"{state_type.__module__}.{state_type.__qualname__}"
        self.name = name
        self.state_type = state_type
        self.initial = initial
        self.terminal = frozenset(terminal)
        self.failed = failed
        self.stages: dict[enum.Enum, type[Stage[Any]]] = dict(stages)
        self.transitions: dict[enum.Enum, frozenset[enum.Enum]] = {
            src: frozenset(dst) for src, dst in transitions.items()
        }
        self.deadlines: dict[enum.Enum, float] = dict(deadlines or {})
        self.error_routes: dict[enum.Enum, enum.Enum] = dict(error_routes or {})
        self.loop_state = loop_state
        self.gates = tuple(gates)
        #: The machine's resources by name (read-only).
        self.resources: Mapping[str, object] = checked_resources(name, resources)
        #: The machine's version (sessions it stores carry it), and how sessions of
        #: earlier versions are read, by the version each upgrade reads.
        self.version = version
        #: What a session answers to a message it was asked (see ``reply`` above).
        self.reply: Callable[[S], Any] | None = _checked_reply(name, reply)
        self.upgrades = checked_upgrades(name, version, upgrades, state_type.model_fields)
        self.invariants: dict[enum.Enum | None, tuple[Condition[Any], ...]] = {
            key: tuple(Condition.coerce(c) for c in conditions)
            for key, conditions in (invariants or {}).items()
        }
        self.transition_invariants = _edge_conditions(name, transition_invariants)
        self.states: frozenset[enum.Enum] = frozenset(
            {initial, failed, *self.terminal, *self.transitions, *self.stages}
            | {dst for dsts in self.transitions.values() for dst in dsts}
        )
        self._check()
        #: Every message kind a `Receive` stage of the machine accepts, by name.
        self.messages: dict[str, type[Any]] = self._message_kinds()
        #: Older names (class names) of its kinds, by their names: read in payloads.
        self.message_aliases: dict[str, str] = _aliases(self.messages)
        # Precomputed for the supervisor's hot path.
        self._allowed: dict[enum.Enum, frozenset[enum.Enum]] = {
            state: self.transitions.get(state, frozenset())
            | ({failed} if state not in self.terminal else frozenset())
            for state in self.states
        }
        common = self.invariants.get(None, ())
        self._checks: dict[enum.Enum, tuple[Condition[Any], ...]] = {
            state: common + self.invariants.get(state, ()) for state in self.states
        }
        #: The runtime's compiled form of this machine (validator, codec, per-state
        #: tables), built by the supervision layer on first use and kept here, so
        #: that it lives exactly as long as the machine.
        self._compiled: Any = None

    # -- queries used by the supervisor -----------------------------------------

    def allowed(self, state: enum.Enum) -> frozenset[enum.Enum]:
        """The states ``state`` may move to, the implicit failed edge included."""
        return self._allowed.get(state, frozenset())

    def invariants_of(self, state: enum.Enum) -> tuple[Condition[Any], ...]:
        """Every invariant that holds in ``state`` (the common ones first)."""
        return self._checks.get(state, ())

    def transition_invariants_of(
        self, from_state: enum.Enum, to_state: enum.Enum
    ) -> tuple[TransitionCondition[Any], ...]:
        """The invariants of the edge ``from_state`` -> ``to_state`` (none if it has none)."""
        return self.transition_invariants.get((from_state, to_state), ())

    def is_terminal(self, state: enum.Enum) -> bool:
        """Whether a session in ``state`` has ended."""
        return state in self.terminal

    def graph(self, events: Iterable[StoredEvent | TransitionEvent] = ()) -> StateGraph:
        """The machine as a `StateGraph`, with the path of a session's ``events`` over it.

        Every declared transition and error route is an edge, labelled with the
        stage of its source state; the implicit move of a non-terminal state to
        ``failed`` is drawn only where declared or taken. Given a session's
        events (stored or live), each edge it took carries how many times, and
        moves the machine does not declare (a fatal error's move to ``failed``,
        a rollback) are added. States are laid out in their enum's declaration
        order, named by their enum member's name.

        Args:
            events: A session of this machine's events, in order (none: the
                machine alone).

        Returns:
            The graph; ``graph.mermaid()`` draws it.
        """
        members = {state: index for index, state in enumerate(type(self.initial))}
        order = sorted(self.states, key=lambda state: members.get(state, len(members)))
        declared: list[tuple[str, str, str | None]] = []
        for source in order:
            targets = set(self.transitions.get(source, ()))
            if source in self.error_routes:
                targets.add(self.error_routes[source])
            stage = self.stages.get(source)
            declared.extend(
                (source.name, target.name, stage.name if stage is not None else None)
                for target in order
                if target in targets
            )
        return build_graph(
            events=events,
            states=[state.name for state in order],
            initial=self.initial.name,
            terminal=[state.name for state in self.terminal],
            failed=self.failed.name,
            declared=declared,
        )

    # -- the build-time check ----------------------------------------------------

    def _fail(self, message: str) -> ConfigurationError:
        return ConfigurationError(f"machine {self.name!r}: {message}")

    def _check(self) -> None:
        self._check_state_type()
        declared = self._declared_states()
        for where, state in self._mentioned_states():
            if state not in declared:
                raise self._fail(f"{where} names unknown state {state!r}")
        self._check_terminal_states()
        self._check_edge_settings()
        for state, seconds in self.deadlines.items():
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
                raise self._fail(
                    f"deadline of {state!r} must be a positive number, got {seconds!r}"
                )
        self._check_stages()
        self._check_reachable()
        self._check_gates()

    def _check_terminal_states(self) -> None:
        """Sessions end in the terminal states only, failed included; the others run a stage."""
        if self.failed not in self.terminal:
            raise self._fail(f"failed state {self.failed!r} must be terminal")
        if self.initial in self.terminal:
            raise self._fail(f"initial state {self.initial!r} is terminal: nothing would run")
        for state in self.terminal:
            if self.transitions.get(state):
                raise self._fail(f"terminal state {state!r} has outgoing transitions")
            if state in self.stages:
                raise self._fail(f"terminal state {state!r} has a stage, which would never run")
        for state in self.states - self.terminal:
            if state not in self.stages:
                raise self._fail(f"non-terminal state {state!r} has no stage to run in it")

    def _check_edge_settings(self) -> None:
        """Error routes and transition invariants name transitions the machine allows."""
        for state, target in self.error_routes.items():
            if target not in self.transitions.get(state, frozenset()) | {self.failed}:
                raise self._fail(
                    f"error route {state!r} -> {target!r} is not an allowed transition"
                )
        for src, dst in self.transition_invariants:
            if dst not in self.transitions.get(src, frozenset()) and not (
                dst is self.failed and src not in self.terminal
            ):
                raise self._fail(
                    f"transition invariant on {src!r} -> {dst!r}: the machine does not "
                    "allow that transition, so the invariant would never be checked"
                )

    def _check_state_type(self) -> None:
        name = self.state_type.__name__
        if (problem := sensitive_problem(self.state_type, AgentState.base_fields)) is not None:
            raise self._fail(problem)
        for field, info in self.state_type.model_fields.items():
            if (found := mutable_part(info.rebuild_annotation())) is not None:
                mutable, instead = found
                raise self._fail(
                    f"field {field!r} of {name} has a mutable type: {mutable}; a stage "
                    f"could change it in place without a patch. Use {instead}"
                )

    def _declared_states(self) -> frozenset[enum.Enum]:
        enum_type = type(self.initial)
        if not isinstance(self.initial, enum.Enum):
            raise self._fail(f"initial state must be an enum member, got {self.initial!r}")
        field = self.state_type.model_fields.get("lifecycle")
        annotation = field.annotation if field is not None else None
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            if annotation is not enum.Enum and not isinstance(self.initial, annotation):
                raise self._fail(
                    f"initial state {self.initial!r} is not a {annotation.__name__}, the type "
                    f"of {self.state_type.__name__}.lifecycle"
                )
            enum_type = annotation if annotation is not enum.Enum else enum_type
        return frozenset(enum_type)

    def _mentioned_states(self) -> Iterable[tuple[str, enum.Enum]]:
        yield "initial", self.initial
        yield "failed", self.failed
        for state in self.terminal:
            yield "terminal", state
        for src, dsts in self.transitions.items():
            yield "transitions", src
            for dst in dsts:
                yield f"transition from {src!r}", dst
        for state in self.stages:
            yield "stages", state
        for state in self.deadlines:
            yield "deadlines", state
        for state, target in self.error_routes.items():
            yield "error_routes", state
            yield f"error route of {state!r}", target
        for key in self.invariants:
            if key is not None:
                yield "invariants", key
        for src, dst in self.transition_invariants:
            yield "transition_invariants", src
            yield "transition_invariants", dst
        if self.loop_state is not None:
            yield "loop_state", self.loop_state

    def _check_stages(self) -> None:
        fields = frozenset(self.state_type.model_fields)
        named: dict[str, type[Stage[Any]]] = {}
        for state, stage_type in self.stages.items():
            if isinstance(stage_type, type) and issubclass(stage_type, Stage):
                other = named.setdefault(stage_type.name, stage_type)
                if other is not stage_type:
                    raise self._fail(
                        f"two different stages are named {stage_type.name!r} "
                        f"({other.__qualname__} and {stage_type.__qualname__}); give each "
                        "a unique name"
                    )
            if not (isinstance(stage_type, type) and issubclass(stage_type, Stage)):
                raise self._fail(f"stage of {state!r} must be a Stage subclass, got {stage_type!r}")
            name = stage_type.name
            if missing := stage_type.writes - fields:
                raise self._fail(
                    f"stage {name!r} writes {sorted(missing)}, which "
                    f"{self.state_type.__name__} does not have"
                )
            if reserved := stage_type.writes & SUPERVISOR_FIELDS:
                raise self._fail(
                    f"stage {name!r} declares writes to {sorted(reserved)}, which only the "
                    "supervisor writes (the lifecycle moves through the stage's next())"
                )
            if missing := stage_type.reads - fields:
                raise self._fail(
                    f"stage {name!r} reads {sorted(missing)}, which "
                    f"{self.state_type.__name__} does not have"
                )

    def _message_kinds(self) -> dict[str, type[Any]]:
        kinds: dict[str, type[Any]] = {}
        for stage_type in self.stages.values():
            if not issubclass(stage_type, Receive):
                continue
            for name, kind in stage_type.kinds().items():
                if kinds.setdefault(name, kind) is not kind:
                    raise self._fail(
                        f"two different message kinds are named {name!r} "
                        f"({kinds[name].__qualname__} and {kind.__qualname__}); give one a "
                        "`kind` class variable of its own"
                    )
        return kinds

    def waits_in(self, state: enum.Enum) -> bool:
        """Whether ``state`` waits for messages (its stage is a `Receive` stage)."""
        stage_type = self.stages.get(state)
        return stage_type is not None and issubclass(stage_type, Receive)

    def _check_gates(self) -> None:
        names = {stage.name for stage in self.stages.values()}
        fields = frozenset(self.state_type.model_fields) - SUPERVISOR_FIELDS
        for gate in self.gates:
            if not isinstance(gate, Gate):
                raise self._fail(f"gates must be Gate objects, got {gate!r}")
            if gate.stage is not None and gate.stage not in names:
                raise self._fail(f"gate {gate.name!r} guards unknown stage {gate.stage!r}")
            if gate.field is not None and gate.field not in fields:
                raise self._fail(
                    f"gate {gate.name!r} writes {gate.field!r}, which "
                    f"{self.state_type.__name__} does not have (or only the supervisor writes)"
                )

    def _check_reachable(self) -> None:
        seen = {self.initial}
        frontier = [self.initial]
        while frontier:
            state = frontier.pop()
            nexts = set(self.transitions.get(state, ()))
            if state not in self.terminal:
                nexts.add(self.failed)
                if state in self.error_routes:
                    nexts.add(self.error_routes[state])
            for nxt in nexts - seen:
                seen.add(nxt)
                frontier.append(nxt)
        if unreachable := self.states - seen:
            names = sorted(_label(s) for s in unreachable)
            raise self._fail(f"states {names} cannot be reached from {self.initial!r}")

    def __repr__(self) -> str:
        version = f" version {self.version}" if self.version != 1 else ""
        return f"<Machine {self.name!r}{version}: {len(self.states)} states>"


def _checked_reply(name: str, reply: Any) -> Any:
    """``reply`` (a machine's), checked: ``None`` or a function of the state."""
    if reply is not None and not callable(reply):
        raise ConfigurationError(
            f"machine {name!r}: reply must be a function of the state, got {reply!r}"
        )
    return reply


def _aliases(messages: dict[str, type[Any]]) -> dict[str, str]:
    """The older names (class names) of ``messages``' kinds, by the name each has now."""
    return {
        legacy: name
        for name, kind in messages.items()
        if (legacy := legacy_kind(kind)) is not None and legacy not in messages
    }
