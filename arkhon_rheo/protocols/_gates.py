"""`Gate`: where a session pauses for a human decision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Gate"]


@dataclass(frozen=True, slots=True)
class Gate:
    """An interrupt gate: the session pauses, durably, before the step it guards.

    Build one with `Gate.before`, `Gate.every` or `Gate.when`. A paused session
    waits in its store (without one, in its system's memory) for
    `StoredSession.approve` (optionally with a value written to ``field``,
    validated like any patch), abort, or a human edit.

    Attributes:
        name: The gate's name, recorded in the pause event.
        stage: Pause before this stage runs.
        steps: Pause before every ``steps``-th commit.
        predicate: Pause when this holds for the committed state.
        field: The state field a resume value is written to, if the gate takes one.
    """

    name: str
    stage: str | None = None
    steps: int | None = None
    predicate: Callable[[Any], bool] | None = None
    field: str | None = None

    @classmethod
    def before(cls, stage: str, *, field: str | None = None, name: str | None = None) -> Gate:
        """Pause before ``stage`` runs."""
        return cls(name or f"before {stage}", stage=stage, field=field)

    @classmethod
    def every(cls, steps: int, *, field: str | None = None, name: str | None = None) -> Gate:
        """Pause before every ``steps``-th commit.

        Raises:
            ConfigurationError: If ``steps`` is not a positive integer.
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigurationError(f"a gate's step interval must be positive, got {steps!r}")
        return cls(name or f"every {steps} steps", steps=steps, field=field)

    @classmethod
    def when(
        cls, predicate: Callable[[Any], bool], *, field: str | None = None, name: str | None = None
    ) -> Gate:
        """Pause when ``predicate(state)`` holds."""
        label = name or str(getattr(predicate, "__name__", "predicate"))
        return cls(label, predicate=predicate, field=field)

    def triggers(self, state: Any, stage: str, commits: int) -> bool:
        """Whether the session pauses before running ``stage`` on ``state``."""
        if self.stage is not None and self.stage == stage:
            return True
        if self.steps is not None and commits > 0 and commits % self.steps == 0:
            return True
        return self.predicate is not None and bool(self.predicate(state))
