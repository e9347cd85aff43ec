"""`Gate`: where a session pauses for a human decision; the decisions, as messages.

A decision on a paused session is a message like any other (`Approve`,
`Abort`, `Edit`): sent to the session's inbox, stored first, applied once,
an event in its history. A gate may ask a question (JSON data computed from
the state it pauses in, shown wherever the pause is) and declare the type of
the answer `Approve` carries; a wrong answer is refused before anything is
stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from .._errors import ConfigurationError, MessageRefused

if TYPE_CHECKING:
    from collections.abc import Callable


__all__ = ["Abort", "Approve", "Edit", "Gate"]


class Approve(BaseModel):
    """Let a session paused at a gate go on, with the gate's answer (``value``) if it takes one.

    Attributes:
        value: Written to the gate's ``field`` (checked against its ``answer``
            type first, then validated like any patch); ``None`` for a gate that
            takes no value.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ClassVar[str] = "approve"
    value: Any = None


class Abort(BaseModel):
    """End a session paused at a gate: it moves to its machine's failed state."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ClassVar[str] = "abort"


class Edit(BaseModel):
    """Change business fields of a session paused at a gate; it stays paused.

    Attributes:
        fields: New values by field name (validated like a patch).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ClassVar[str] = "edit"
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Gate:
    """An interrupt gate: the session pauses, durably, before the step it guards.

    Build one with `Gate.before`, `Gate.every` or `Gate.when`. A paused session
    waits in its store (without one, in its system's memory) for a decision:
    `Approve` (optionally with a value written to ``field``, validated like
    any patch), `Abort`, or an `Edit` (``StoredSession.approve/abort/edit``,
    or the messages themselves through ``AgentSystem.send``).

    Attributes:
        name: The gate's name, recorded in the pause event.
        stage: Pause before this stage runs.
        steps: Pause before every ``steps``-th commit: the commits are the steps'
            (``STEP`` events) since the session began or was last rolled back
            (a pause, a decision, a resume or a recorded failure is none).
        predicate: Pause when this holds for the committed state.
        field: The state field a resume value is written to, if the gate takes one.
        question: What the gate asks: JSON data (a string, say), or a function of
            the paused state returning it; recorded in the pause and shown by
            ``arkhon-rheo show`` and the inspector.
        answer: The type the answer (`Approve.value`) must have, checked (with
            pydantic) before anything is stored; the gate's ``field`` takes it.
    """

    name: str
    stage: str | None = None
    steps: int | None = None
    predicate: Callable[[Any], bool] | None = None
    field: str | None = None
    question: Any = None
    answer: Any = None
    _adapter: TypeAdapter[Any] | None = dataclass_field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.answer is not None:
            if self.field is None:
                raise ConfigurationError(
                    f"gate {self.name!r} declares an answer type but no field to write it to; "
                    "pass field=..."
                )
            object.__setattr__(self, "_adapter", TypeAdapter(self.answer))

    @classmethod
    def before(
        cls,
        stage: str,
        *,
        field: str | None = None,
        name: str | None = None,
        question: Any = None,
        answer: Any = None,
    ) -> Gate:
        """Pause before ``stage`` runs."""
        return cls(
            name or f"before {stage}", stage=stage, field=field, question=question, answer=answer
        )

    @classmethod
    def every(
        cls,
        steps: int,
        *,
        field: str | None = None,
        name: str | None = None,
        question: Any = None,
        answer: Any = None,
    ) -> Gate:
        """Pause before every ``steps``-th commit.

        The commits counted are the steps' (``STEP`` events) since the session
        began or was last rolled back: a pause, the decision that let it go on,
        a resume, a recorded failure add none, and a rollback (or a turn an
        interrupting message cut back) starts the count again. So it pauses
        after steps ``n``, ``2n``... and, rolled back, ``n`` steps later.

        Raises:
            ConfigurationError: If ``steps`` is not a positive integer.
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigurationError(f"a gate's step interval must be positive, got {steps!r}")
        label = name or f"every {steps} steps"
        return cls(label, steps=steps, field=field, question=question, answer=answer)

    @classmethod
    def when(
        cls,
        predicate: Callable[[Any], bool],
        *,
        field: str | None = None,
        name: str | None = None,
        question: Any = None,
        answer: Any = None,
    ) -> Gate:
        """Pause when ``predicate(state)`` holds."""
        label = name or str(getattr(predicate, "__name__", "predicate"))
        return cls(label, predicate=predicate, field=field, question=question, answer=answer)

    def ask(self, state: Any) -> Any:
        """The gate's question about ``state`` (``None`` if it asks none)."""
        question = self.question
        return question(state) if callable(question) else question

    def answer_schema(self) -> Any:
        """The JSON schema of the answer the gate takes (``None``: any value, or none)."""
        return None if self._adapter is None else self._adapter.json_schema()

    def check_answer(self, value: Any, *, session_id: str = "") -> Any:
        """``value`` as the gate's answer type.

        Raises:
            MessageRefused: If the value is not of that type (nothing is stored).
        """
        if self._adapter is None:
            return value
        try:
            return self._adapter.validate_python(value)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, error['loc'])) or '(answer)'}: {error['msg']}"
                for error in exc.errors(include_url=False)
            )
            raise MessageRefused(
                f"gate {self.name!r} takes an answer of type {self.answer!r}: {problems}; "
                "nothing was stored",
                session_id=session_id,
            ) from None

    def triggers(self, state: Any, stage: str, commits: int) -> bool:
        """Whether the session pauses before running ``stage`` on ``state``.

        ``commits``: the steps committed since the session began or was last
        rolled back (each ``STEP`` event counts one; a ``ROLLBACK`` starts again
        from none).
        """
        if self.stage is not None and self.stage == stage:
            return True
        if self.steps is not None and commits > 0 and commits % self.steps == 0:
            return True
        return self.predicate is not None and bool(self.predicate(state))
