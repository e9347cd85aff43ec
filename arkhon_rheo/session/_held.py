"""The sensitive values of a session's run, masked in all the library shows while it runs.

A session of a machine with `Sensitive` fields holds secrets in its state. While
it runs (or is replayed), each value its state holds, and each one a commit
writes, is held for scrubbing (``_redact.hold_secrets``): a log line, a span's
exception, a failure record, a gate's question or a recorded call that holds
one shows ``[REDACTED]`` there. The run's end lets them go, so the registry
holds the values of the sessions running, not of every session ever run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._redact import hold_secrets, release_secrets
from ..protocols._seams import secret_texts, sensitive_fields

if TYPE_CHECKING:
    from ..protocols import AgentState, Machine, Patch, TransitionEvent

__all__ = ["HeldValues", "held_values"]


class HeldValues:
    """The sensitive values one run holds for scrubbing, until `release`.

    Args:
        fields: The machine's sensitive fields.
    """

    __slots__ = ("_fields", "_held")

    def __init__(self, fields: frozenset[str]) -> None:
        self._fields = fields
        self._held: set[str] = set()

    def state(self, state: AgentState) -> None:
        """Hold the values of ``state``'s sensitive fields."""
        for name in self._fields:
            self._hold(getattr(state, name, None))

    def patch(self, patch: Patch) -> None:
        """Hold the values ``patch`` writes to sensitive fields."""
        fields = self._fields
        for name, value in patch.values.items():
            if name in fields:
                self._hold(value)
        for name, items in patch.appends.items():
            if name in fields:
                self._hold(items)

    def event(self, event: TransitionEvent) -> None:
        """Hold the values ``event`` commits (an event listener of the run)."""
        if not self._fields.isdisjoint(event.writes):
            self.patch(event.patch)

    def _hold(self, value: Any) -> None:
        texts = set(secret_texts(value)) - self._held
        if texts:
            self._held.update(hold_secrets(texts))

    def release(self) -> None:
        """Let every value held go (the run has ended)."""
        held, self._held = self._held, set()
        release_secrets(held)


def held_values(machine: Machine[Any], state: AgentState) -> HeldValues | None:
    """The values of ``state`` held for a run of ``machine`` (``None``: no sensitive field)."""
    fields = sensitive_fields(machine.state_type)
    if not fields:
        return None
    held = HeldValues(fields)
    held.state(state)
    return held
