"""`Messaging`: an agent system's two verbs for a session, tell (`send`) and `ask`.

`AgentSystem` inherits them. `send` stores a message in a session's inbox and
delivers it (`Postman`); `ask` stores it the same way, then waits for the
reply to that message (`Replies`), here or from another process.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from .._errors import ConfigurationError, NoReply
from ..protocols import AgentState, Machine
from ._ask import END, Replies, Reply, check_on_busy, next_partial
from ._mail import Postman, Sent, check_message_id, decision_of
from ._options import check_positive

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ..protocols import Partial, SessionStream
    from ._stored import StoredSession

__all__ = ["Messaging"]

S = TypeVar("S", bound=AgentState)


class Messaging:
    """Tell and ask: what an agent system does with a message for a session."""

    _postman: Postman
    _replies: Replies

    if TYPE_CHECKING:

        def stored(self, machine: Machine[S], session_id: str) -> StoredSession[S]:
            """`AgentSystem.stored`."""
            raise NotImplementedError

    async def send(
        self,
        machine: Machine[Any],
        session_id: str,
        message: object,
        *,
        message_id: str | None = None,
        drive: bool = True,
        on_busy: str = "enqueue",
    ) -> Sent:
        """Send ``message`` to session ``session_id`` of ``machine``: store it, then deliver it.

        The message is checked first: a model of a kind the machine's `Receive`
        stages accept (or a mapping of its fields, its kind's name under
        ``"kind"``), or a decision on a session paused at a gate (`Approve`,
        `Abort`, `Edit`: see `StoredSession.decide`). It is then stored in the
        session's inbox, as durable as a commit, and delivered: a parked session
        is woken here; one running here or in another live process receives it
        when it next waits. Messages are applied one per step, in the order they
        were sent (a timer once due), each exactly once, each an event.

        Args:
            machine: The session's machine.
            session_id: The session.
            message: The message.
            message_id: Its id: sending the same id again stores nothing (a
                retried delivery is harmless). A fresh one by default.
            drive: ``False``: store it only, never wake the session here; a parked
                session it wakes becomes due, for a `Worker` to claim.
            on_busy: What it does when the session is busy with a turn (running
                here or elsewhere, paused, or with messages queued):
                ``"enqueue"`` (the default) waits for the turn, applied in order
                after it; ``"reject"`` refuses it (`SessionBusy`, nothing stored);
                ``"interrupt"`` cuts the turn under way at its next commit (a turn
                this process drives; another process's finishes first), recorded
                as a rollback to where the turn began, then applies the messages
                in order.

        Returns:
            Where it went: ``sent.handle`` is the run here that applies it, if
                any. Use `ask` for the reply to this message.

        Raises:
            MessageRefused: If the machine does not accept the message, or the
                session has ended (nothing is stored).
            SessionBusy: With ``on_busy="reject"``, if the session is busy.
            InboxFull: If the session has ``inbox_capacity`` messages waiting.
            SessionNotFound: If the store has no such session.
            ConfigurationError: Without a store, or if ``machine`` is not the session's.
            SystemNotRunning: Outside the ``async with`` block.
        """
        check_on_busy(on_busy)
        decision = decision_of(machine, message)
        if decision is not None:  # to a gate: answered on the paused session
            return await self.stored(machine, session_id).decide(decision, message_id=message_id)
        return await self._post(machine, session_id, message, message_id, drive, on_busy)

    async def _post(
        self,
        machine: Machine[Any],
        session_id: str,
        message: object,
        message_id: str | None,
        drive: bool,
        on_busy: str,
    ) -> Sent:
        replies = self._replies

        async def refuse_if_busy() -> None:
            await replies.check_not_busy(machine, session_id)

        if on_busy == "interrupt" and message_id is None:
            message_id = uuid.uuid4().hex
        if on_busy == "interrupt" and drive:
            replies.interrupt(session_id, message_id)  # type: ignore[arg-type]
        return await self._postman.send(
            machine,
            session_id,
            message,
            message_id,
            drive=drive,
            before_post=refuse_if_busy if on_busy == "reject" else None,
        )

    def interrupt(self, session_id: str, *, by: str) -> bool:
        """Cut the turn this process drives on session ``session_id`` at its next commit.

        As a message sent with ``on_busy="interrupt"`` does, without a message:
        the turn is recorded as a rollback to where it began (``info``:
        ``interrupted_by`` is ``by``), and its ask's `Reply` is ``interrupted``.
        A turn driven by another process (a worker, another replica) is not
        reached; nor is a session between turns.

        Args:
            session_id: The session.
            by: Who cuts it, recorded in the rollback (a cancel's id, say).

        Returns:
            Whether a turn under way here was asked to be cut.
        """
        check_message_id(by)
        return self._replies.interrupt(session_id, by)

    async def ask(
        self,
        machine: Machine[S],
        session_id: str,
        message: object,
        *,
        message_id: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline for the reply alone
        on_busy: str = "enqueue",
        drive: bool = True,
    ) -> Reply[S]:
        """Send ``message`` to session ``session_id`` and return the session's reply to it.

        The message is stored exactly as `send` stores it; then the call waits
        for the turn it begins to end (the session waiting for its next
        message, paused at a gate, or ended) and returns the state as of then,
        with what the machine answers (`Reply.value`: a ReAct agent's answer).
        It works wherever the session runs: here (woken for it if parked), in
        another process on the same store, on a worker; parked, running, or
        busy with earlier messages (the message waits for them). Asking again
        with the same ``message_id`` returns the same reply and applies
        nothing twice.

        Args:
            machine: The session's machine.
            session_id: The session.
            message: The message (as for `send`).
            message_id: Its id; a fresh one by default. Give one to ask again
                safely (after a timeout, a crash, a retried request).
            timeout: The longest wait for the reply, in seconds (``None``: no limit).
            on_busy: ``"enqueue"``, ``"reject"`` or ``"interrupt"`` (see `send`).
            drive: ``False``: never wake the session here (a `Worker` applies it).

        Returns:
            The reply.

        Raises:
            NoReply: If ``timeout`` ran out (the message stays in the inbox and
                will be applied: ask again with its id for the reply), or the
                session ended before applying it.
            MessageRefused: If the machine does not accept the message, or the
                session has ended (nothing is stored).
            SessionBusy: With ``on_busy="reject"``, if the session is busy.
            InboxFull: If the session has ``inbox_capacity`` messages waiting.
            SessionNotFound: If the store has no such session.
            ConfigurationError: Without a store, or with a bad argument.
            SystemNotRunning: Outside the ``async with`` block.
        """
        reply: Reply[S] | None = None
        async for item in self._asking(
            machine, session_id, message, message_id, timeout, on_busy, drive, stream=False
        ):
            reply = item
        assert reply is not None
        return reply

    def ask_stream(
        self,
        machine: Machine[S],
        session_id: str,
        message: object,
        *,
        message_id: str | None = None,
        timeout: float | None = None,
        on_busy: str = "enqueue",
    ) -> AsyncIterator[Partial | Reply[S]]:
        """Ask, as `ask` does, and yield the reply's partial output as it is made, then the reply.

        The partial output (`Partial` items: a model's `ReplyDelta`, say) of
        the turn this message begins reaches the caller when this process
        drives the turn; when another process does, only the reply comes
        (the last item, always a `Reply`).
        """
        return self._asking(
            machine, session_id, message, message_id, timeout, on_busy, True, stream=True
        )

    async def _asking(
        self,
        machine: Machine[S],
        session_id: str,
        message: object,
        message_id: str | None,
        timeout: float | None,  # noqa: ASYNC109 - as ask's
        on_busy: str,
        drive: bool,
        *,
        stream: bool,
    ) -> AsyncIterator[Any]:
        check_on_busy(on_busy)
        if timeout is not None:
            check_positive("timeout", timeout)
        if decision_of(machine, message) is not None:
            raise ConfigurationError(
                "a gate decision is not asked: send it (system.send) or use "
                "system.stored(...).approve/abort/edit"
            )
        check_message_id(message_id)
        message_id = message_id or uuid.uuid4().hex
        replies = self._replies
        # A deadline, not a scope: no cancel scope may span a yield of this generator.
        deadline = anyio.current_time() + timeout if timeout is not None else float("inf")
        watch = replies.watch(machine, session_id, message_id)
        # A run here may apply the message (and stream) before the post returns: its
        # partial output is subscribed to first (what comes of other turns is left out),
        # the run under way's, or that of a run the post launches.
        host = replies.host
        early = host.running(session_id) if stream else None
        subscription = early.partials() if early is not None else None
        launched = host.presubscribe(session_id) if stream else []
        try:
            sent = await self._post(machine, session_id, message, message_id, drive, on_busy)
            try:
                if sent.handle is not early:  # not the run under way: the one launched
                    if subscription is not None:
                        subscription.close()
                    subscription = launched.pop() if launched and sent.handle else None
                if stream and sent.handle is not None:
                    subscription = subscription or sent.handle.partials()
                    try:
                        while True:
                            ended = message_id in watch.replies
                            item = await _partial(subscription, watch.changed, deadline, ended)
                            if item is END:
                                break
                            if item is not None and _of_turn(item, watch, message_id):
                                yield item
                    finally:
                        subscription.close()
                with anyio.fail_after(deadline - anyio.current_time()):
                    reply = await replies.wait(
                        watch, machine, session_id, message_id, sent.position, sent.duplicate
                    )
            except TimeoutError:
                raise NoReply(
                    f"no reply from session {session_id!r} to message {message_id!r} within "
                    f"{timeout} s; the message is stored and will be applied: ask again with "
                    f"message_id={message_id!r} for its reply",
                    session_id=session_id,
                    message_id=message_id,
                    timed_out=True,
                ) from None
        finally:
            if subscription is not None:
                subscription.close()
            if stream:
                host.unsubscribe_next(session_id, launched)
            replies.unwatch(session_id, message_id)
        yield reply


async def _partial(
    subscription: SessionStream[Partial], changed: anyio.Event, deadline: float, ended: bool
) -> Any:
    """The next partial of an asked turn; ``None`` at a commit; ``END`` after its end.

    Once the turn has ended (``ended``), what the subscription has buffered
    still comes, without waiting.
    """
    if ended:
        try:
            return subscription.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream):
            return END
    with anyio.fail_after(deadline - anyio.current_time()):
        return await next_partial(subscription, changed)


def _of_turn(partial: Partial, watch: Any, message_id: str) -> bool:
    """Whether ``partial`` is part of the turn message ``message_id`` began."""
    applied = watch.applied.get(message_id)
    end = watch.replies.get(message_id)
    return applied is not None and applied < partial.seq and (end is None or partial.seq <= end.seq)
