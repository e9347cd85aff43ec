"""A session's secrets: sealed in the messages it is sent, held for scrubbing while it runs.

**Sealed mail.** A message kind marks a field as a state type does::

    class Login(BaseModel):
        user: str
        token: Annotated[str, Sensitive()]

`AgentSystem.send` and `AgentSystem.ask` seal each such field's JSON value
(`seal_message`) with the system's `Keyring` before the message is stored,
bound to the session, the kind and the field (copied elsewhere, it is refused
as damaged): the inbox row holds the token, and so does the event that applies
the message (``info["message"]``), which ``arkhon-rheo show`` and the
inspector print as ``[SENSITIVE]`` (`masked`). The supervisor opens them
(`open_message`) when it decodes the message for its stage, and a replay that
re-executes the step opens them the same way. Without a keyring, a message with
such a field is refused (`KeyringError`), nothing stored.

**Held values.** The sensitive values of a session's run are masked in all the library
shows while it runs.

A session of a machine with `Sensitive` fields holds secrets in its state. While
it runs (or is replayed), each value its state holds, and each one a commit
writes, is held for scrubbing (``_redact.hold_secrets``): a log line, a span's
exception, a failure record, a gate's question or a recorded call that holds
one shows ``[REDACTED]`` there. The run's end lets them go, so the registry
holds the values of the sessions running, not of every session ever run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from .._errors import KeyringError
from .._redact import hold_secrets, release_secrets
from ..core._seams import opener
from ..protocols._seams import secret_texts, sensitive_fields

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..core import Keyring
    from ..protocols import AgentState, Machine, Patch, TransitionEvent

__all__ = ["HeldValues", "held_values", "open_message", "seal_message"]


def _name(kind: str, field: str) -> str:
    """The name a message's field is sealed for (no state field has it)."""
    return f"(message {kind}).{field}"


def seal_message(
    kind_type: type[BaseModel],
    kind: str,
    payload: Any,
    keyring: Keyring | None,
    session_id: str,
) -> Any:
    """``payload``, a message of ``kind`` to ``session_id``, its `Sensitive` fields sealed.

    ``payload`` itself when the kind has no such field.

    Raises:
        KeyringError: If it has one and there is no keyring.
    """
    fields = sensitive_fields(kind_type)
    if not fields or not isinstance(payload, dict):
        return payload
    if keyring is None:
        named = ", ".join(repr(name) for name in sorted(fields))
        raise KeyringError(
            f"a {kind} message has sensitive fields ({named}), which are sealed before they "
            f"are stored, and no keyring was given: pass AgentSystem(secrets=Keyring(key)); "
            "nothing was stored",
            session_id=session_id,
            field=min(fields),
        )
    sealer = opener(keyring, session_id)
    return {
        name: sealer.seal(_name(kind, name), to_json(value)) if name in fields else value
        for name, value in payload.items()
    }


def open_message(
    kind_type: type[BaseModel], kind: str, payload: Any, keyring: Keyring | None, session_id: str
) -> Any:
    """A stored message's ``payload`` with its sealed fields opened (see `seal_message`).

    Raises:
        KeyringError: If a field is sealed and the keyring is missing or lacks its key.
        StoreCorrupt: If a sealed field was changed, or copied from another message.
    """
    fields = sensitive_fields(kind_type)
    if not fields or not isinstance(payload, dict):
        return payload
    sealer = opener(keyring, session_id)
    return {
        name: sealer.open(_name(kind, name), value) if name in fields else value
        for name, value in payload.items()
    }


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
