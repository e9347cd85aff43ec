"""Tell and ask: an agent system's two verbs for a session, and the wait for a reply.

`Messaging` holds the verbs, and `AgentSystem` inherits them. `send` (tell)
stores a message in a session's inbox and delivers it (`Postman`, in
``_mail``); `ask` stores it the same way, then waits for the reply to *that*
message (`Replies`), here or from another process.

The reply to a message is the session's state at the end of the turn the
message began: the first commit, from the one that applied the message on,
that leaves the session at rest (in a state that waits for messages, paused
at a gate, or ended). Whatever ran the turn, the reply is the same: it is
read from the session's own log, so asking again with the same message id
(after a timeout, a crash, a retried request) returns it again and applies
nothing twice.

How a waiting ask learns that its reply is there:

* the session runs in this process: each commit of a session somebody asks
  is offered to `Replies.saw` (a listener of every session's commits: one
  dictionary lookup for sessions nobody asks), which keeps the turn's end in
  memory and wakes the ask at once;
* it runs elsewhere (another process on the same SQLite file, a worker on
  PostgreSQL): the ask reads the session's record, cheaply, at an interval
  that starts at ``_FIRST_POLL`` and grows to ``poll`` while nothing changes,
  and reads the log only when the record moved. On PostgreSQL, each commit
  batch also notifies the ids of the sessions it changed (``LISTEN/NOTIFY``,
  `Replies.follow`): the ask reads the store as soon as its session moved.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

import anyio

from .._errors import ConfigurationError, NoReply, SessionBusy
from ..protocols import AgentState, EventKind, Machine
from ._journal import Journal
from ._mail import ENDED, Mailbox, Postman, Sent, check_message_id, decision_of
from ._options import check_positive

if TYPE_CHECKING:
    import enum
    from collections.abc import AsyncIterator, Awaitable, Callable

    from ..protocols import Partial, SessionRecord, SessionStream, TransitionEvent
    from ._host import SessionHost
    from ._stored import StoredSession

__all__ = ["END", "ON_BUSY", "Messaging", "Replies", "Reply", "check_on_busy", "next_partial"]


S = TypeVar("S", bound=AgentState)

#: What a message does when its session is busy with a turn.
ON_BUSY = ("enqueue", "reject", "interrupt")

#: The first interval between two reads of the record of a session another process
#: drives, in seconds; it grows by half at each read that finds nothing new.
_FIRST_POLL = 0.002


def check_on_busy(on_busy: object) -> str:
    """``on_busy``, checked.

    Raises:
        ConfigurationError: If it is not one of ``ON_BUSY``.
    """
    if on_busy not in ON_BUSY:
        raise ConfigurationError(
            f"on_busy={on_busy!r} is not a policy; use 'enqueue' (the default: the message "
            "waits for the turn under way), 'reject' (refused, nothing stored) or 'interrupt' "
            "(the turn under way is cut at its next commit)"
        )
    return str(on_busy)


@dataclass(frozen=True, slots=True)
class Reply(Generic[S]):
    """A session's reply to one message: its state at the end of the turn the message began.

    Attributes:
        session_id: The session.
        message_id: The message.
        position: Its place in the session's inbox (from 1).
        applied_seq: The number of the event that applied it.
        seq: The number of the event that ended its turn (the state is as of it).
        state: The session's state at the end of the turn.
        status: Where the turn left the session: ``"waiting"`` (for its next
            message), ``"paused"`` (at a gate, for a human), ``"finished"``,
            ``"failed"``, or the status it ended with (``"max_steps"``, ``"aborted"``).
        value: What the machine answers (its ``reply``: for a ReAct agent, the
            typed output or the answer's text); ``None`` if it names nothing.
        interrupted: Whether a later message cut the turn (``on_busy="interrupt"``):
            the state is then the one the session waited in before the turn.
        duplicate: Whether the message had been sent before (this ask stored nothing).
    """

    session_id: str
    message_id: str
    position: int
    applied_seq: int
    seq: int
    state: S
    status: str
    value: Any
    interrupted: bool = False
    duplicate: bool = False

    @property
    def ok(self) -> bool:
        """Whether the session came through the turn (waiting, paused or finished)."""
        return self.status in ("waiting", "paused", "finished") and not self.interrupted

    @property
    def text(self) -> str:
        """The reply's value as text (``""`` when there is none)."""
        value = self.value
        if value is None:
            return ""
        return value if isinstance(value, str) else str(value)


class _TurnEnd(NamedTuple):
    """Where the turn of an asked message ended."""

    applied_seq: int
    seq: int
    state: AgentState
    status: str
    interrupted: bool


def rest_status(machine: Machine[Any], kind: EventKind, to_state: enum.Enum) -> str | None:
    """The status an event of ``kind`` into ``to_state`` leaves the session at rest in, if any.

    ``None``: the session works on (the turn goes on).
    """
    if kind is EventKind.PAUSE:
        return "paused"
    if to_state in machine.terminal:
        return "failed" if to_state is machine.failed else "finished"
    return "waiting" if machine.waits_in(to_state) else None


def _interrupted(event: TransitionEvent) -> bool:
    info = event.info
    return event.kind is EventKind.ROLLBACK and bool(info and info.get("interrupted_by"))


class _Watch:
    """The asks waiting on one session here, and the turns they saw end in this process."""

    __slots__ = ("applied", "asks", "changed", "closes", "machine", "replies", "turn")

    def __init__(self, machine: Machine[Any]) -> None:
        self.machine = machine
        #: The message ids asked, with how many asks wait for each.
        self.asks: dict[str, int] = {}
        #: The asked messages seen applied here, with their event numbers.
        self.applied: dict[str, int] = {}
        #: The asked messages applied in the turn under way here.
        self.turn: list[str] = []
        #: The turns of asked messages seen ending here.
        self.replies: dict[str, _TurnEnd] = {}
        #: Set (and replaced) at each change an ask may be waiting for.
        self.changed = anyio.Event()
        #: How many runs of the session ended here (an ask then reads the store).
        self.closes = 0

    def saw(self, event: TransitionEvent, state: AgentState) -> None:
        info = event.info
        message = info.get("message") if info else None
        if message is not None:
            message_id = message.get("id")
            if message_id in self.asks:
                self.applied[message_id] = event.seq
                self.turn.append(message_id)
        if self.turn:
            status = rest_status(self.machine, event.kind, event.to_state)
            if status is not None:
                interrupted = _interrupted(event)
                for message_id in self.turn:
                    self.replies[message_id] = _TurnEnd(
                        self.applied[message_id], event.seq, state, status, interrupted
                    )
                self.turn.clear()
        self.wake()

    def wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


class Replies:
    """The asks waiting in one agent system, and how they learn of their replies.

    Args:
        host: The system's sessions.
        poll: The longest interval between two reads of the record of a
            session another process drives, in seconds.
    """

    __slots__ = ("_wanted", "_watches", "host", "poll")

    def __init__(self, host: SessionHost, poll: float) -> None:
        self.host = host
        self.poll = poll
        self._watches: dict[str, _Watch] = {}
        #: Set once an ask waits: the store's change notifications are followed from then on.
        self._wanted = anyio.Event()

    async def follow(self, changes: Callable[[float], Awaitable[list[str] | None]]) -> None:
        """Wake the asks on the sessions the store says changed, until cancelled.

        ``changes`` is the store's ``changed_sessions`` (PostgreSQL's
        ``LISTEN/NOTIFY``). It is first called once an ask waits, then without
        pause (its notifications are read as they come, never left to pile up
        on the server); should it fail, the asks' polling goes on meanwhile.
        """
        await self._wanted.wait()
        while True:
            ids = await changes(1.0)
            if ids is None:
                await anyio.sleep(self.poll)
                continue
            for session_id in ids:
                watch = self._watches.get(session_id)
                if watch is not None:
                    watch.closes += 1  # it changed elsewhere: the asks read the store
                    watch.wake()

    # -- what the sessions run here tell ----------------------------------------------

    def listener(self, event: TransitionEvent) -> None:
        """Offered every commit of every session run here: asks on its session see it."""
        watch = self._watches.get(event.session_id)
        if watch is not None:
            handle = self.host.running(event.session_id)
            if handle is not None:
                watch.saw(event, handle.state)

    def closed(self, session_id: str) -> None:
        """A run of ``session_id`` here ended (parked, paused, ended, handed over)."""
        watch = self._watches.get(session_id)
        if watch is not None:
            watch.closes += 1
            watch.wake()

    # -- asking -----------------------------------------------------------------------

    def watch(self, machine: Machine[Any], session_id: str, message_id: str) -> _Watch:
        """Start watching for the reply to ``message_id`` (before it is posted)."""
        watch = self._watches.get(session_id)
        if watch is None:
            watch = self._watches[session_id] = _Watch(machine)
        watch.asks[message_id] = watch.asks.get(message_id, 0) + 1
        self._wanted.set()
        return watch

    def unwatch(self, session_id: str, message_id: str) -> None:
        """Stop watching for it (the ask returned, failed or was cancelled)."""
        watch = self._watches.get(session_id)
        if watch is None:
            return
        left = watch.asks.get(message_id, 0) - 1
        if left > 0:
            watch.asks[message_id] = left
            return
        watch.asks.pop(message_id, None)
        watch.applied.pop(message_id, None)
        watch.replies.pop(message_id, None)
        if not watch.asks:
            del self._watches[session_id]

    async def check_not_busy(self, machine: Machine[Any], session_id: str) -> None:
        """Refuse (``on_busy="reject"``) a message to a session busy with a turn.

        Busy: running (here or in another process), paused at a gate, or with
        messages waiting to be applied.

        Raises:
            SessionBusy: If it is.
        """
        store = self.host.require_store("send a message")
        record = await store.record(session_id)
        waiting = await store.pending(session_id) if record.status == "waiting" else ()
        if record.status in ("running", "paused") or any(
            message.kind in machine.messages for message in waiting
        ):
            raise SessionBusy(
                f"session {session_id!r} is busy with a turn ({record.status}"
                f"{', messages queued' if waiting else ''}) and the message was sent with "
                "on_busy='reject': nothing was stored; send it again later, or with "
                "on_busy='enqueue' to have it wait for the turn",
                session_id=session_id,
            )

    def interrupt(self, session_id: str, message_id: str) -> bool:
        """Ask the turn under way here to be cut at its next commit (``on_busy="interrupt"``).

        A session driven by another process is not reached: the message waits
        for its turn there. Returns whether a turn under way here was asked.
        """
        handle = self.host.running(session_id)
        if handle is not None:
            session = self.host.held(session_id)
            if session.turn_start is not None:
                session.interrupt = message_id
                return True
        return False

    async def wait(
        self,
        watch: _Watch,
        machine: Machine[S],
        session_id: str,
        message_id: str,
        position: int,
        duplicate: bool,
    ) -> Reply[S]:
        """The reply to ``message_id``, once its turn has ended (see the module's docstring).

        Raises:
            NoReply: If the session ended before applying the message.
        """
        host = self.host
        seen: tuple[int, str] | None = None
        # A message new to the inbox is applied after this watch began: seen here, if this
        # process drives the session, or found in the store once it moves elsewhere. One
        # sent before may be applied already: the store says.
        check = duplicate or host.running(session_id) is None
        closes, interval = watch.closes, _FIRST_POLL
        while True:
            changed = watch.changed
            end = watch.replies.get(message_id)
            if end is None and check:
                record = await host.require_store("ask a session").record(session_id)
                if (record.last_seq, record.status) != seen:
                    seen = (record.last_seq, record.status)
                    interval = _FIRST_POLL
                    end = await self._stored(machine, session_id, message_id, record)
            if end is not None:
                value = None if machine.reply is None else machine.reply(end.state)  # type: ignore[arg-type]
                return Reply(
                    session_id,
                    message_id,
                    position,
                    end.applied_seq,
                    end.seq,
                    end.state,  # type: ignore[arg-type]
                    end.status,
                    value,
                    end.interrupted,
                    duplicate,
                )
            here = host.running(session_id) is not None
            with anyio.move_on_after(math.inf if here else interval) as timer:
                await changed.wait()
            interval = min(interval * 1.5, self.poll)
            check = timer.cancelled_caught or watch.closes != closes
            closes = watch.closes

    async def next_run(
        self,
        watch: _Watch,
        session_id: str,
        message_id: str,
        launched: list[Any],
        deadline: float,
    ) -> SessionStream[Partial] | None:
        """The partial output of the next run here that may take the asked message.

        For a stream whose run ended before the turn did: the run under way when
        it asked may park without taking the message (it found none due just
        before the post), which the next run launched here then takes.
        ``launched`` gets that run's subscription before the run starts
        (`SessionHost.presubscribe`, asked before the post), so none of its
        partial output is missed (its buffer is bounded, as every subscription's).

        Returns:
            The earliest such subscription (taken out of ``launched``), or
            ``None`` if the message was applied with no run here to follow (by
            another process, or by the run that ended), the session ended, or
            ``deadline`` passed: the reply is then waited for as `ask` waits.
        """
        store = self.host.require_store("ask a session")
        closes, interval = watch.closes, _FIRST_POLL
        while not launched:
            changed = watch.changed
            if message_id in watch.replies:
                return None
            left = deadline - anyio.current_time()
            if left <= 0:
                return None
            with anyio.move_on_after(min(interval, left)) as timer:
                await changed.wait()
            elsewhere = timer.cancelled_caught or watch.closes != closes  # a run's end, a notice
            closes = watch.closes
            if elsewhere and not launched:  # nothing launched here yet: the store says
                record = await store.record(session_id)
                found = await Mailbox(store, session_id).known(message_id)
                applied = found is not None and found.applied_seq is not None
                if (applied or record.status in ENDED) and not launched:
                    return None
                interval = min(interval * 1.5, self.poll)
        following: SessionStream[Partial] = launched.pop(0)
        return following

    async def _stored(
        self, machine: Machine[Any], session_id: str, message_id: str, record: SessionRecord
    ) -> _TurnEnd | None:
        """Where the turn of ``message_id`` ended, read from the store; ``None``: not yet."""
        store = self.host.require_store("ask a session")
        found = await Mailbox(store, session_id).known(message_id)
        if found is None or found.applied_seq is None:
            if record.status in ENDED:
                raise NoReply(
                    f"session {session_id!r} ended ({record.status}) before it applied message "
                    f"{message_id!r}; it never will: fork the session to go on",
                    session_id=session_id,
                    message_id=message_id,
                    timed_out=False,
                )
            return None
        applied = found.applied_seq
        journal = Journal(store, machine, session_id, secrets=self.host.secrets)
        for event in await journal.history(after=applied - 1):
            status = rest_status(machine, event.kind, event.to_state)
            if status is not None:
                state, _ = await journal.state(event.seq)
                return _TurnEnd(applied, event.seq, state, status, _interrupted(event))
        if record.status in ENDED:  # ended with no event of its own (out of steps, say)
            state, _ = await journal.state(None)
            return _TurnEnd(applied, record.last_seq, state, record.status, False)
        return None


async def next_partial(subscription: SessionStream[Partial], changed: anyio.Event) -> Any:
    """The subscription's next item; ``None`` if ``changed`` is set first; ``_END`` at its end."""
    got: Any = None
    async with anyio.create_task_group() as group:

        async def receive() -> None:
            nonlocal got
            try:
                got = await subscription.receive()
            except anyio.EndOfStream:
                got = END
            group.cancel_scope.cancel()

        group.start_soon(receive)
        await changed.wait()
        group.cancel_scope.cancel()
    return got


#: What `next_partial` returns once the subscription ended.
END = object()


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
        (the last item, always a `Reply`). It follows the turn, not a run: a
        run under way that parks without taking the message (a session asked
        as it starts) hands over to the run here that takes it, whose output
        was subscribed to from its start (bounded: see `SessionStream`).
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
        _check_ask(machine, message, message_id, timeout, on_busy)
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
                            if item is END and not ended:
                                # The run followed ended (parked: it read its clock before
                                # the post) short of the turn: follow the one taking it.
                                following = await replies.next_run(
                                    watch, session_id, message_id, launched, deadline
                                )
                                if following is not None:
                                    subscription.close()
                                    subscription = following
                                    continue
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


def _check_ask(
    machine: Machine[Any],
    message: object,
    message_id: str | None,
    timeout: float | None,
    on_busy: str,
) -> None:
    """Refuse an ask's bad arguments before anything is stored (`ConfigurationError`)."""
    check_on_busy(on_busy)
    if timeout is not None:
        check_positive("timeout", timeout)
    if decision_of(machine, message) is not None:
        raise ConfigurationError(
            "a gate decision is not asked: send it (system.send) or use "
            "system.stored(...).approve/abort/edit"
        )
    check_message_id(message_id)


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
