"""The root of the tree, configuration, and the actor runtime's errors."""

from __future__ import annotations

__all__ = [
    "ActorError",
    "ActorStopped",
    "ArkhonError",
    "AskTimeout",
    "ConfigurationError",
    "KeyringError",
    "MailboxClosed",
    "MailboxError",
    "MailboxFull",
    "ResourceUnavailable",
    "SystemNotRunning",
]


class ArkhonError(Exception):
    """Base class of every error arkhon-rheo raises on purpose."""


class ConfigurationError(ArkhonError, ValueError):
    """A value given to a constructor or a call is invalid.

    The message names the offending value and what is accepted instead.
    """


class KeyringError(ConfigurationError):
    """A sensitive value cannot be sealed or opened with the keyring given.

    There is no keyring (``AgentSystem(secrets=...)`` was not passed), or the
    value was sealed under a key the keyring does not hold. Nothing was
    written. The message names the session, the field and the key id it needs.

    Attributes:
        session_id: The session concerned ("" if none).
        field: The sensitive field ("" if none).
        key_id: The id of the key the value was sealed under ("" if none).
    """

    def __init__(
        self, message: str, *, session_id: str = "", field: str = "", key_id: str = ""
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.field = field
        self.key_id = key_id


class SystemNotRunning(ArkhonError, RuntimeError):
    """The actor system is not running: not entered yet, stopping, or closed.

    The message names the state it is in.
    """


class ResourceUnavailable(ArkhonError):
    """A resource a machine declares could not be opened, so nothing was started.

    Raised by the agent system (`start`, `resume`, `recover`, a decision that
    resumes) before it stores or leases anything: no session is stored as
    failed because of it. The resource's own error is the ``__cause__``.

    Attributes:
        resource: The resource's name in ``Machine(resources=...)``.
        machine: The name of the machine that declares it.
    """

    def __init__(self, message: str, *, resource: str, machine: str) -> None:
        super().__init__(message)
        self.resource = resource
        self.machine = machine


class MailboxError(ArkhonError):
    """A mailbox could not accept or deliver a message.

    Attributes:
        mailbox: The name of the mailbox (the actor's name for an actor's mailbox).
    """

    def __init__(self, message: str, *, mailbox: str) -> None:
        super().__init__(message)
        self.mailbox = mailbox


class MailboxFull(MailboxError):
    """The mailbox is at capacity and the caller asked not to wait.

    Attributes:
        mailbox: The name of the mailbox.
        capacity: How many messages the mailbox holds at most.
    """

    def __init__(self, *, mailbox: str, capacity: int) -> None:
        super().__init__(
            f"mailbox {mailbox!r} is full ({capacity} queued messages); use the awaiting "
            "send (tell) to wait for room, or raise the mailbox capacity",
            mailbox=mailbox,
        )
        self.capacity = capacity


class MailboxClosed(MailboxError):
    """The mailbox has been closed and accepts no more messages.

    Attributes:
        mailbox: The name of the mailbox.
    """

    def __init__(self, *, mailbox: str) -> None:
        super().__init__(
            f"mailbox {mailbox!r} is closed and accepts no more messages", mailbox=mailbox
        )


class ActorError(ArkhonError):
    """An operation on an actor failed.

    Attributes:
        actor: The name of the actor concerned.
    """

    def __init__(self, message: str, *, actor: str) -> None:
        super().__init__(message)
        self.actor = actor


class ActorStopped(ActorError):
    """The actor has terminated, or is stopping and accepts no new messages.

    Attributes:
        actor: The name of the actor.
    """

    def __init__(self, *, actor: str, detail: str = "") -> None:
        suffix = f" ({detail})" if detail else ""
        super().__init__(
            f"actor {actor!r} has stopped{suffix}; spawn a new actor or watch it to learn why",
            actor=actor,
        )


class AskTimeout(ActorError, TimeoutError):
    """No reply arrived within the ask's timeout.

    The request is withdrawn if the actor has not started on it yet; if it has,
    its late reply is discarded and never delivered to anybody else.

    Attributes:
        actor: The name of the actor asked.
        timeout: The timeout that expired, in seconds.
    """

    def __init__(self, *, actor: str, timeout: float) -> None:
        super().__init__(
            f"actor {actor!r} did not reply within {timeout:g} s; raise the timeout, or check "
            "that the actor is not blocked or its mailbox backed up",
            actor=actor,
        )
        self.timeout = timeout
