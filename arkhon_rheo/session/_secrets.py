"""Sealing the `Sensitive` fields of a message on its way to a session's inbox, and opening them.

A message kind marks a field as a state type does::

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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from .._errors import KeyringError
from ..core._seams import opener
from ..protocols._seams import sensitive_fields

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..core import Keyring

__all__ = ["open_message", "seal_message"]


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
