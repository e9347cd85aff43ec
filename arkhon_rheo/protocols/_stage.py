"""The stage contract: what a stage reads, writes, requires, does, and where it goes next."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from .._errors import ConfigurationError, ReadOnlyState, UndeclaredRead
from ._state import AgentState

if TYPE_CHECKING:
    import enum
    from collections.abc import Awaitable, Callable, Coroutine, Iterable

    from ._patch import Patch

__all__ = ["Condition", "Stage", "StateView", "TransitionCondition", "stage"]

S = TypeVar("S", bound=AgentState)


class Condition(Generic[S]):
    """A named predicate over a state: an invariant or a precondition.

    Args:
        name: What the condition asserts, for error messages
            ("finished requires a final answer").
        predicate: Returns true when the state satisfies the condition.
    """

    __slots__ = ("name", "predicate")

    def __init__(self, name: str, predicate: Callable[[S], bool]) -> None:
        self.name = name
        self.predicate = predicate

    @classmethod
    def coerce(cls, value: Condition[S] | Callable[[S], bool]) -> Condition[S]:
        """Accept a `Condition` or a plain predicate (named after the function)."""
        if isinstance(value, Condition):
            return value
        if not callable(value):
            raise ConfigurationError(f"a condition must be callable, got {value!r}")
        name = getattr(value, "__doc__", None) or getattr(value, "__name__", repr(value))
        return cls(str(name).strip(), value)

    def holds(self, state: S) -> bool:
        """Whether ``state`` satisfies the condition."""
        return bool(self.predicate(state))

    def __repr__(self) -> str:
        return f"Condition({self.name!r})"


class TransitionCondition(Generic[S]):
    """A named predicate over a transition: the state before a step and the state after it.

    An invariant that a plain `Condition` cannot say because it depends on the
    path taken ("when the agent is observing and the path came from acting,
    its action is set"). Declare it on the machine for one ``(from, to)`` edge
    (``Machine(transition_invariants=...)``); the supervisor checks it on every
    commit that takes that edge.

    Args:
        name: What the condition asserts, for error messages.
        predicate: Called with ``(before, after)``: the committed state the step
            started from and the candidate state it would commit; returns true
            when the transition is acceptable.
    """

    __slots__ = ("name", "predicate")

    def __init__(self, name: str, predicate: Callable[[S, S], bool]) -> None:
        self.name = name
        self.predicate = predicate

    @classmethod
    def coerce(
        cls, value: TransitionCondition[S] | Callable[[S, S], bool]
    ) -> TransitionCondition[S]:
        """Accept a `TransitionCondition` or a plain two-argument predicate.

        Raises:
            ConfigurationError: If ``value`` is not callable.
        """
        if isinstance(value, TransitionCondition):
            return value
        if isinstance(value, Condition) or not callable(value):
            raise ConfigurationError(
                f"a transition condition must be a callable of (before, after), got {value!r}"
            )
        name = getattr(value, "__doc__", None) or getattr(value, "__name__", repr(value))
        return cls(str(name).strip(), value)

    def holds(self, before: S, after: S) -> bool:
        """Whether the move from ``before`` to ``after`` satisfies the condition."""
        return bool(self.predicate(before, after))

    def __repr__(self) -> str:
        return f"TransitionCondition({self.name!r})"


class StateView(Generic[S]):
    """A read-only window on a state that exposes only a stage's read set.

    Reading a field outside the read set raises `UndeclaredRead`; nothing can be
    written through it. The values are the state's own (immutable) values.

    The view keeps a read-only mapping of its read set's values and nothing
    else: no attribute, ``__dict__`` or slot of it leads to the state or to an
    undeclared field. It is a guard against mistakes, not a sandbox: stage code runs in the same
    interpreter as the supervisor, and Python-level introspection (the caller's
    frame through ``sys._getframe``, ``gc.get_referrers`` on a shared value)
    can still reach the whole state. Reading it that way bypasses the contract
    the machine's checks and replay rely on.

    Args:
        state: The state to read from.
        reads: The fields the stage may read.
        stage: The stage's name, for error messages.
    """

    __slots__ = ("_stage", "_values")

    def __init__(self, state: S, reads: frozenset[str], stage: str) -> None:
        values = MappingProxyType({name: getattr(state, name) for name in reads})
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_stage", stage)

    def __getattr__(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        if name.startswith("_"):  # protocol probes (copy, pickle, ...) get the usual answer
            raise AttributeError(name)
        raise UndeclaredRead(stage=self._stage, field=name, reads=frozenset(self._values))

    def __setattr__(self, name: str, value: object) -> None:
        raise ReadOnlyState(stage=self._stage, field=name)

    def __delattr__(self, name: str) -> None:
        raise ReadOnlyState(stage=self._stage, field=name)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={self._values[name]!r}" for name in sorted(self._values))
        return f"StateView({fields})"


def _names(value: Iterable[str] | str) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset({value})
    return frozenset(value)


class Stage(Generic[S]):
    """Base class of stages: declare the contract in the class statement.

    ::

        class Think(Stage[MyState], reads={"user_input"}, writes={"thought"}):
            async def execute(self, view: StateView[MyState]) -> Patch:
                return Patch(thought=...)

            def next(self, state: MyState) -> Lifecycle:
                return Lifecycle.ACTING

    Each stage runs in its own long-lived actor; an instance may keep a private
    cache, which a restart (a fresh instance) discards.

    Attributes:
        name: The stage's name (defaults to the lower-cased class name).
        reads: The fields `execute` may read through its view.
        writes: The fields its patch may write.
        preconditions: Conditions the committed state must meet before it runs.
    """

    name: ClassVar[str] = "stage"
    reads: ClassVar[frozenset[str]] = frozenset()
    writes: ClassVar[frozenset[str]] = frozenset()
    preconditions: ClassVar[tuple[Condition[Any], ...]] = ()

    def __init_subclass__(
        cls,
        *,
        name: str | None = None,
        reads: Iterable[str] | None = None,
        writes: Iterable[str] | None = None,
        preconditions: Iterable[Condition[Any] | Callable[[Any], bool]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        cls.name = name if name is not None else cls.__dict__.get("name", cls.__name__.lower())
        if reads is not None:
            cls.reads = _names(reads)
        if writes is not None:
            cls.writes = _names(writes)
        if preconditions is not None:
            cls.preconditions = tuple(Condition.coerce(c) for c in preconditions)

    async def execute(self, view: StateView[S]) -> Patch:
        """Do the stage's work from a read-only view; return the proposed patch."""
        raise NotImplementedError(f"stage {self.name!r} must implement execute()")

    def next(self, state: S) -> enum.Enum:
        """Choose the next lifecycle state from the state just committed."""
        raise NotImplementedError(f"stage {self.name!r} must implement next()")


def stage(
    *,
    reads: Iterable[str] = (),
    writes: Iterable[str] = (),
    next: Callable[[Any], enum.Enum] | enum.Enum,
    name: str | None = None,
    preconditions: Iterable[Condition[Any] | Callable[[Any], bool]] = (),
) -> Callable[[Callable[[StateView[Any]], Awaitable[Patch]]], type[Stage[Any]]]:
    """Turn a plain async function into a `Stage` class.

    ::

        @stage(reads={"user_input"}, writes={"thought"}, next=Lifecycle.ACTING)
        async def think(view): ...

    Args:
        reads: The fields the function may read through its view.
        writes: The fields its patch may write.
        next: The next lifecycle state, or a function of the committed state choosing it.
        name: The stage's name; defaults to the function's name.
        preconditions: Conditions the state must meet before it runs.

    Returns:
        A decorator returning the `Stage` subclass.
    """

    def decorate(fn: Callable[[StateView[Any]], Awaitable[Patch]]) -> type[Stage[Any]]:
        choose = next if callable(next) else (lambda _state, _to=next: _to)

        class FunctionStage(
            Stage[Any],
            name=name or fn.__name__,
            reads=reads,
            writes=writes,
            preconditions=preconditions,
        ):
            # The function's own coroutine, awaited by the host: no second frame.
            def execute(self, view: StateView[Any]) -> Coroutine[Any, Any, Patch]:
                return cast("Coroutine[Any, Any, Patch]", fn(view))

            def next(self, state: Any) -> enum.Enum:
                return choose(state)

        FunctionStage.__name__ = FunctionStage.__qualname__ = fn.__name__
        FunctionStage.__doc__ = fn.__doc__
        return FunctionStage

    return decorate
