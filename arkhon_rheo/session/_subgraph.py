"""Subgraphs: a `Machine` run as the stage of another machine.

A subgraph stage runs its child machine as a supervised child session in the
same agent system, waits for it to end, and maps the child's final state to a
patch of the parent, which the parent's supervisor validates against the
stage's declared writes like any other patch.

The child's id is derived from the parent step, ``"<parent>/<stage>/<seq>"``
(``seq`` is the number the parent's event for the step will have), so a parent
resumed after a crash finds the child it had started and resumes it rather than
starting a second one. Each child event carries ``info["parent"]`` (the parent
session, stage and seq); the parent's event for the step records the child run
as a recorded call of kind ``"subgraph:<stage>"`` whose response names the
child session and holds its final state. A replay that re-executes the parent
answers that call from the record: the child does not run again.

A child that stops without ending (paused at a gate, parked waiting for a
message) makes the stage raise `ChildWaits`: the parent's supervisor parks the
parent until the child's end is posted to its inbox, then runs the step again,
which finds the child ended (see below).

**The session scope: where a subgraph stage finds the system that runs its child.**

The agent system sets `SessionScope` in a context variable when it spawns a
session's supervisor; the supervisor's task (and every stage actor it spawns)
inherits it, so a subgraph stage running in that session finds both the
system, through the `SubgraphHost` protocol, and its own session. Nothing here
knows the agent system itself: it sits above this module.

**A session that waits on its child session** parks, and the child's end wakes it.

A subgraph stage (``arkhon_rheo.graphs``) whose child session stops without
ending (paused at a gate, or parked waiting for a message) raises `ChildWaits`.
The supervisor then parks its own session (`wait_for_child`), durably: its
record says ``"waiting"``, on which child, and it accepts one message kind only,
the child's own (`child_kind`). A decision or a message sent to the child by
its id runs the child on; when the child ends, the end of its run posts that
message to the parent's inbox (`tell_parent`), which wakes the parent wherever
its machine is served, as any message does. The parent's step then runs again:
it finds the child ended, and its commit marks the message applied
(`take_child_end`), exactly once, as any inbox message is applied.

The park and the post are each one store transaction, and the park refuses
while the child's message is due, so a child that ends between its parent's
look and its park still wakes it.
"""

from __future__ import annotations

import contextlib
import weakref
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from .._errors import ConfigurationError, SubgraphFailed
from .._log import get_logger
from ..protocols import AgentState, Machine, NewMessage, Patch, Stage, StateView, record_call
from ._record import ExitReason

if TYPE_CHECKING:
    import enum
    from collections.abc import Callable, Iterable, Iterator, Mapping

    from ..protocols import Condition, FailureRecord, Store
    from ._record import Session

__all__ = [
    "ChildOutcome",
    "ChildWaits",
    "SessionScope",
    "SubgraphHost",
    "SubgraphStage",
    "applied_info",
    "child_kind",
    "current_scope",
    "post_child_end",
    "session_scope",
    "subgraph",
    "take_child_end",
    "tell_parent",
    "wait_for_child",
]


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """How a child session ended.

    Attributes:
        state: Its last committed state.
        exit_reason: Why it ended (``"finished"``, ``"failed"``, ``"max_steps"``...).
        failure: The failure that ended it, if one did.
        unawaited: Whether its end may have been posted to the parent's inbox:
            a run of it the parent's step did not start and await here.
    """

    state: AgentState
    exit_reason: str
    failure: FailureRecord | None = None
    unawaited: bool = False


class SubgraphHost(Protocol):
    """What a subgraph stage asks of the system running its session."""

    async def run_child(
        self,
        machine: Machine[Any],
        state: AgentState,
        *,
        session_id: str,
        link: Mapping[str, Any],
        max_steps: int | None,
    ) -> ChildOutcome:
        """Run the child session ``session_id`` to its end and say how it ended.

        The one child per id: a child already running is awaited, a stored one
        that has not ended is resumed, one that has ended is answered from its
        stored state, one that waits (paused at a gate, parked for a message)
        is answered as such; only a child never started starts, from ``state``.
        """
        ...


class SessionScope:
    """The session a stage runs in, and the system that runs it.

    The session is held weakly: a context copied from a session's task can
    outlive the session (on asyncio, a cancelled deadline's timer keeps its
    context until the deadline's time), and must not keep it in memory.
    """

    __slots__ = ("_session", "host")

    def __init__(self, host: SubgraphHost, session: Session) -> None:
        self.host = host
        self._session = weakref.ref(session)

    @property
    def session(self) -> Session:
        """The session; it is alive whenever one of its stages asks."""
        session = self._session()
        if session is None:  # pragma: no cover - its tasks end before it can go
            raise RuntimeError("the session of this scope has been freed")
        return session

    def __repr__(self) -> str:
        return f"SessionScope(host={self.host!r}, session={self._session()!r})"


_SCOPE: ContextVar[SessionScope | None] = ContextVar("arkhon_rheo_session_scope", default=None)


def current_scope() -> SessionScope | None:
    """The scope of the session whose stage is running (``None`` outside any)."""
    return _SCOPE.get()


@contextlib.contextmanager
def session_scope(host: SubgraphHost, session: Session) -> Iterator[None]:
    """Set the scope for the tasks spawned inside the block (they copy the context)."""
    token = _SCOPE.set(SessionScope(host, session))
    try:
        yield
    finally:
        _SCOPE.reset(token)


_logger = get_logger("arkhon_rheo.supervision")

#: The room the message that wakes a parent always has in its inbox: the
#: parent cannot take its other messages before its child ends.
_ROOM = 2**31

#: The exit reasons of a child run whose end its parent must learn of.
_ENDED = frozenset({ExitReason.FINISHED, ExitReason.FAILED, ExitReason.MAX_STEPS})


def child_kind(child_id: str) -> str:
    """The message kind that wakes the parent of child session ``child_id``: its own only."""
    return f"arkhon.child:{child_id}"


def _message_id(child_id: str) -> str:
    return f"child-ended:{child_id}"


class ChildWaits(Exception):
    """Raised by a stage whose child session stopped without ending: its session parks.

    Never a failure: the supervisor parks the session until the child ends
    (see the module's doc), then runs the step again.

    Attributes:
        child_id: The child session.
        status: How it waits: ``"paused"`` (at a gate) or ``"waiting"`` (for a message).
    """

    def __init__(self, child_id: str, status: str) -> None:
        super().__init__(f"child session {child_id!r} is {status}")
        self.child_id = child_id
        self.status = status


async def wait_for_child(
    session: Session, state: AgentState, stage: str, waits: ChildWaits
) -> bool:
    """Park ``session`` in ``state`` until its child ends; return whether it parked.

    ``False``: the child ended meanwhile (its message is due): the step runs
    again, past the gate it had passed.
    """
    persistence = session.persistence
    assert persistence is not None  # the stage raises `ChildWaits` only with a store
    kind = child_kind(waits.child_id)
    parked = await persistence.store.park(
        session.session_id,
        persistence.owner,
        status=ExitReason.WAITING.value,
        waiting={
            "state": state.lifecycle.name,
            "stage": stage,
            "child": waits.child_id,
            "child_status": waits.status,
            "accepts": [kind],
        },
        accepts=[kind],
        now=session.clock.now(),
    )
    if not parked:
        session.gates_passed = True  # the gate before this step let it through already
        return False
    session.finish(ExitReason.WAITING)
    _logger.info(
        "session_waits_on_child",
        session_id=session.session_id,
        child=waits.child_id,
        child_status=waits.status,
    )
    return True


async def tell_parent(session: Session) -> None:
    """Post the end of child ``session`` to its parent's inbox, if its parent may wait on it.

    Only for a run its parent does not await here (``session.tell_parent``):
    one a decision or a message launched.
    """
    link, persistence = session.link, session.persistence
    if not session.tell_parent or link is None or persistence is None or persistence.lost:
        return  # (lost: the session is another owner's, who tells the parent of its end)
    if session.exit_reason not in _ENDED:
        return
    reason = session.exit_reason.value
    parent = str(link["session_id"])
    await post_child_end(persistence.store, parent, session.session_id, reason, session.clock.now())


async def post_child_end(
    store: Store, parent_id: str, child_id: str, exit_reason: str, now: float
) -> None:
    """Post the end of child ``child_id`` to parent ``parent_id``'s inbox (once: by its id).

    Errors are logged: the parent can still be resumed by hand.
    """
    payload = {"child": child_id, "exit_reason": exit_reason}
    message = NewMessage(_message_id(child_id), child_kind(child_id), payload, now)
    try:
        await store.post(parent_id, message, capacity=_ROOM)
    except Exception as exc:
        _logger.error("parent_not_told", session_id=child_id, error=repr(exc))


async def take_child_end(session: Session, child_id: str) -> None:
    """Have the step under way apply the message that told ``session`` of its child's end.

    Its next commit (the step's, or the failure it records) marks it applied.
    """
    persistence = session.persistence
    if persistence is None:
        return
    wanted = _message_id(child_id)
    for message in await persistence.store.pending(session.session_id):
        if message.message_id == wanted:
            session.applies = message
            return


def applied_info(session: Session) -> tuple[int | None, dict[str, Any]]:
    """The inbox position the next commit applies for a child's end, and what its event says."""
    message = session.applies
    if message is None:
        return None, {}
    return message.position, {"child_ended": dict(message.payload)}


S = TypeVar("S", bound=AgentState)
C = TypeVar("C", bound=AgentState)

#: How a child stops without ending: paused at a gate, parked for a message (or,
#: run on by a decision or a message, it runs in another process).
_WAITS = frozenset({"paused", "waiting", "running"})


class SubgraphStage(Stage[S]):
    """A stage that runs a child machine as a child session.

    Declare the child machine in the class statement and say how the parent's
    view becomes the child's initial state (`input`) and how the child's final
    state becomes the parent's patch (`output`)::

        class Auth(SubgraphStage[Main], machine=auth, reads={"user"}, writes={"token"}):
            def input(self, view):
                return AuthState(user=view.user)

            def output(self, child, view):
                return Patch(token=child.token)

            def next(self, state):
                return Step.PROCESS

    A child that ends without finishing fails the stage with `SubgraphFailed`
    (recoverable: the stage restarts and its next attempt runs a new child). A
    child that waits (paused at a gate, parked for a message) parks the parent's
    session, with a store, until the child ends: answer the child by its id,
    and the step then takes its result as if it had never waited.
    The stage's deadline, if its state has one, bounds the whole child run;
    cancelling the stage cancels the child.

    Attributes:
        machine: The child machine.
        max_steps: The child's step budget (the system's default if ``None``).
    """

    machine: ClassVar[Machine[Any]]
    max_steps: ClassVar[int | None] = None

    def __init_subclass__(
        cls,
        *,
        machine: Machine[Any] | None = None,
        max_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if machine is not None:
            if not isinstance(machine, Machine):
                raise ConfigurationError(
                    f"subgraph stage {cls.name!r}: machine must be a Machine, got {machine!r}"
                )
            cls.machine = machine
        if max_steps is not None:
            cls.max_steps = max_steps

    def input(self, view: StateView[S]) -> Any:
        """The child's initial state, from the parent's view."""
        raise NotImplementedError(f"subgraph stage {self.name!r} must implement input()")

    def output(self, child: Any, view: StateView[S]) -> Patch:
        """The parent's patch, from the child's final state and the parent's view."""
        raise NotImplementedError(f"subgraph stage {self.name!r} must implement output()")

    async def execute(self, view: StateView[S]) -> Patch:
        """Run the child session to its end; map its final state to the parent's patch.

        Raises:
            ConfigurationError: If there is no child machine, ``input`` returns no
                state of the child's type, or the stage runs outside a session of
                an agent system.
            SubgraphFailed: If the child ends without finishing.
        """
        child = getattr(type(self), "machine", None)
        if not isinstance(child, Machine):
            raise ConfigurationError(f"subgraph stage {self.name!r} has no child machine")
        start = self.input(view)
        if not isinstance(start, child.state_type):
            raise ConfigurationError(
                f"subgraph stage {self.name!r}: input() must return a "
                f"{child.state_type.__name__}, got {type(start).__name__}"
            )
        data = start.model_dump(mode="json")
        data.pop("session_id", None)  # the child's id depends on where it runs
        request = {"machine": child.name, "input": data}
        response = await record_call(
            f"subgraph:{self.name}", request, lambda: self._run(child, start)
        )
        final = child.state_type.model_validate(response["state"])
        return self.output(final, view)

    async def _run(self, child: Machine[Any], start: AgentState) -> dict[str, Any]:
        scope = current_scope()
        if scope is None:
            raise ConfigurationError(
                f"subgraph stage {self.name!r} runs its child in the agent system that "
                "runs its session; outside a session there is none"
            )
        parent = scope.session
        seq = parent.step_seq()  # the same again when a resumed parent re-runs the step
        child_id = f"{parent.session_id}/{self.name}/{seq}"
        outcome = await scope.host.run_child(
            child,
            start,
            session_id=child_id,
            link={"session_id": parent.session_id, "stage": self.name, "seq": seq},
            max_steps=type(self).max_steps,
        )
        if outcome.unawaited:  # its end may have been posted to us: this step applies it
            await take_child_end(parent, child_id)
        if outcome.exit_reason in _WAITS and parent.persistence is not None:
            raise ChildWaits(child_id, outcome.exit_reason)  # we park until the child ends
        if outcome.exit_reason != "finished":
            raise SubgraphFailed(
                stage=self.name,
                session_id=child_id,
                exit_reason=outcome.exit_reason,
                failure=outcome.failure,
            )
        return {"session_id": child_id, "state": outcome.state.model_dump(mode="json")}


def subgraph(
    machine: Machine[C],
    *,
    name: str,
    input: Callable[[StateView[Any]], C],
    output: Callable[[C, StateView[Any]], Patch],
    next: Callable[[Any], enum.Enum] | enum.Enum,
    reads: Iterable[str] = (),
    writes: Iterable[str] = (),
    preconditions: Iterable[Condition[Any] | Callable[[Any], bool]] = (),
    max_steps: int | None = None,
) -> type[SubgraphStage[Any]]:
    """Make a stage that runs ``machine`` as a child session (see `SubgraphStage`).

    ::

        auth_stage = subgraph(
            auth,
            name="auth",
            reads={"user"},
            writes={"token"},
            input=lambda view: AuthState(user=view.user),
            output=lambda child, view: Patch(token=child.token),
            next=Step.PROCESS,
        )

    Args:
        machine: The child machine.
        name: The stage's name (part of each child's session id).
        input: The child's initial state, from the parent's view (limited to ``reads``).
        output: The parent's patch from the child's final state and the parent's
            view; it may write only ``writes``, like any stage's patch.
        next: The parent's next lifecycle state, or a function of its committed state.
        reads: The parent fields ``input`` and ``output`` may read.
        writes: The parent fields the patch may write.
        preconditions: Conditions the parent's state must meet before the child starts.
        max_steps: The child's step budget (the system's default otherwise).

    Returns:
        The `SubgraphStage` subclass, for the parent machine's ``stages``.

    Raises:
        ConfigurationError: If ``machine`` is not a `Machine`.
    """
    choose = next if callable(next) else (lambda _state, _to=next: _to)
    make_input, make_output = input, output

    class FunctionSubgraph(
        SubgraphStage[Any],
        name=name,
        reads=reads,
        writes=writes,
        preconditions=preconditions,
        machine=machine,
        max_steps=max_steps,
    ):
        def input(self, view: StateView[Any]) -> Any:
            return make_input(view)

        def output(self, child: Any, view: StateView[Any]) -> Patch:
            return make_output(child, view)

        def next(self, state: Any) -> enum.Enum:
            return choose(state)

    FunctionSubgraph.__name__ = FunctionSubgraph.__qualname__ = f"subgraph_{name}"
    return FunctionSubgraph
