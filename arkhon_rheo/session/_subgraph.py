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
which finds the child ended (see ``session/_child_wait.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from .._errors import ConfigurationError, SubgraphFailed
from ..protocols import AgentState, Machine, Patch, Stage, StateView, record_call
from ._child_wait import ChildWaits, take_child_end
from ._scope import current_scope

if TYPE_CHECKING:
    import enum
    from collections.abc import Callable, Iterable

    from ..protocols import Condition

__all__ = ["SubgraphStage", "subgraph"]

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
