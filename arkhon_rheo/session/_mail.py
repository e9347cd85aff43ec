"""Messages to sessions: checked, stored, then delivered; parked sessions woken; timers served.

`send` takes one path for every message: it checks the message against the
kinds the session's machine accepts (a refusal stores nothing), stores it in
the session's inbox (acknowledged = as durable as a commit; the fields its kind
marks `Sensitive` sealed with the system's keyring), then delivers it:
a session that runs here, or in another live process, receives it when it
next waits; a parked one is woken here (leased, loaded and launched). A
session's park and a message's post are each one store transaction, and the
park refuses while an accepted message is due, so no message is ever left
behind a parked session.

`Postman.watch` serves timers: it sleeps (on the system's clock) until the
earliest wake-up time among the parked sessions, or for ``poll`` seconds at
most (a timer another process set), and wakes the sessions due whose machine
the system serves: every machine it has started, resumed, recovered or sent
to, and those it was given.
"""

from __future__ import annotations

import json
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel, ValidationError

from .._errors import (
    ArkhonError,
    ConfigurationError,
    LeaseLost,
    MessageRefused,
    SessionBusy,
    SessionLocked,
)
from .._log import get_logger
from ..protocols import Machine, NewMessage, message_kind
from ._decision import DECISIONS
from ._inbox import message_record
from ._journal import Journal
from ._options import check_positive
from ._secrets import seal_message

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from ..protocols import Clock, Store, StoredMessage
    from ._host import SessionHost
    from ._record import SessionHandle

__all__ = [
    "ENDED",
    "MAX_MESSAGE_BYTES",
    "Mailbox",
    "Postman",
    "Sent",
    "check_message_id",
    "decision_of",
    "encode_message",
    "message_record",
]

#: The largest payload a message sent to a session may have by default: 1 MiB of
#: JSON (compact, UTF-8); `AgentSystem`'s ``max_message_bytes`` changes it.
MAX_MESSAGE_BYTES = 1 << 20

_logger = get_logger("arkhon_rheo.system")

#: The statuses of a session that will not run again: a message to it is refused.
ENDED = frozenset({"finished", "failed", "aborted", "max_steps"})

#: How long a wake-up that finds another call of this system waking the same
#: session waits before looking again, in seconds.
_BUSY_RETRY = 0.005


@dataclass(frozen=True, slots=True)
class Sent:
    """A message stored in a session's inbox, and where it is delivered.

    Attributes:
        session_id: The session.
        message_id: The message's id in its inbox.
        position: Its place in the inbox (from 1, in the order messages were sent).
        duplicate: Whether the inbox had it already (the id was sent before):
            nothing was stored the second time.
        handle: The run of the session in this system that applies it (woken
            for it, or running already, the message pending), or ``None``: another
            process drives the session, it does not wait now (paused at a gate,
            say; it receives the message when it next waits), or the message was
            applied already (a re-sent id). Its result is the run's end, which may
            come turns later; for the reply to this message, use `AgentSystem.ask`.
    """

    session_id: str
    message_id: str
    position: int
    duplicate: bool
    handle: SessionHandle[Any] | None


def check_message_id(message_id: object) -> None:
    """Refuse a message id that is given but is no non-empty string.

    Raises:
        ConfigurationError: If it is.
    """
    if message_id is not None and (not isinstance(message_id, str) or not message_id):
        raise ConfigurationError(
            f"a message id is a non-empty string, got {message_id!r}; leave it out for a fresh one"
        )


def encode_message(
    machine: Machine[Any], message: object, max_bytes: int = MAX_MESSAGE_BYTES
) -> tuple[str, Any]:
    """``message`` as a kind name and JSON payload, checked against what ``machine`` accepts.

    ``message`` is a model of a kind the machine accepts, or a mapping of its
    fields with the kind's name under ``"kind"`` (which may be left out when
    the machine accepts one kind only). Its payload must be storable JSON of
    at most ``max_bytes`` bytes (compact, UTF-8).

    Raises:
        MessageRefused: If the kind is not one the machine accepts, the fields
            fail its validation, or the payload cannot be stored (nested too
            deep, a string that is not valid Unicode, a value that is not JSON
            data) or is larger than ``max_bytes``.
    """
    try:
        name, payload = _encoded(machine, message)
        size = len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
    except MessageRefused:
        raise
    except RecursionError:
        raise _refused(machine, "it is nested too deep to store; send flatter data") from None
    except UnicodeError as exc:
        raise _refused(
            machine,
            f"a string in it is not valid Unicode ({getattr(exc, 'reason', exc)}: invalid "
            "UTF-8 bytes, or a lone surrogate); send text as str, valid UTF-8",
        ) from None
    except (TypeError, ValueError) as exc:  # PydanticSerializationError is a ValueError
        why = str(exc).splitlines()[0][:200]
        if "depth" in why or "recursion" in why.lower():
            raise _refused(machine, f"it is nested too deep to store ({why})") from None
        if "utf-8" in why.lower() or "unicode" in why.lower():
            raise _refused(
                machine, f"a string in it is not valid Unicode ({why}); send valid UTF-8"
            ) from None
        raise _refused(machine, f"it holds a value that is not JSON data ({why})") from None
    if size > max_bytes:
        raise _refused(
            machine,
            f"its payload is {size:,} bytes of JSON, more than the {max_bytes:,} a message "
            "may hold (AgentSystem(max_message_bytes=...)); store large data elsewhere and "
            "send a reference to it",
        )
    return name, payload


def _encoded(machine: Machine[Any], message: object) -> tuple[str, Any]:
    """``message`` as a kind name and JSON payload (see `encode_message`)."""
    kinds = machine.messages
    accepted = ", ".join(sorted(kinds)) or "none"
    if isinstance(message, BaseModel):
        name = message_kind(type(message))
        if kinds.get(name) is not type(message):
            raise _refused(machine, f"its kind {name!r} is not one it accepts ({accepted})")
        message = message.model_dump()  # validated again below: it may have been built unchecked
        fields = {"kind": name, **message}
    elif isinstance(message, Mapping):
        fields = dict(message)
    else:
        raise _refused(
            machine,
            f"a message is a pydantic model or a mapping of its fields, got "
            f"{type(message).__name__}",
        )
    name = fields.pop("kind", None)
    if name is None and len(kinds) == 1:
        name = next(iter(kinds))
    if isinstance(name, str):
        name = machine.message_aliases.get(name, name)  # a class name, as kinds were once named
    if not isinstance(name, str) or name not in kinds:
        raise _refused(
            machine, f"its kind {name!r} is not one it accepts ({accepted}); say which in 'kind'"
        )
    try:
        model = kinds[name].model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or '(message)'}: {error['msg']}"
            for error in exc.errors(include_url=False)
        )
        raise _refused(machine, f"a {name} message is invalid: {problems}") from None
    return name, model.model_dump(mode="json")


def decision_of(machine: Machine[Any], message: object) -> BaseModel | None:
    """``message`` as a gate decision (`Approve`, `Abort`, `Edit`), if it is one.

    A mapping whose ``"kind"`` names a decision (and no kind the machine's
    stages accept) is validated as that decision.

    Raises:
        MessageRefused: If it names a decision but its fields do not fit.
    """
    if isinstance(message, tuple(DECISIONS.values())):
        return message if isinstance(message, BaseModel) else None
    if not isinstance(message, Mapping):
        return None
    name = message.get("kind")
    if not isinstance(name, str) or name not in DECISIONS or name in machine.messages:
        return None
    fields = {key: value for key, value in message.items() if key != "kind"}
    try:
        return DECISIONS[name].model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or '(message)'}: {error['msg']}"
            for error in exc.errors(include_url=False)
        )
        raise _refused(machine, f"a {name} decision is invalid: {problems}") from None


#: The room a decision always has in an inbox: the messages waiting there cannot
#: be applied while the session is paused, so they must not keep its decision out.
_DECISION_ROOM = 2**31


class Mailbox:
    """One stored session's inbox, for the decisions a caller makes on it."""

    __slots__ = ("session_id", "store")

    def __init__(self, store: Store, session_id: str) -> None:
        self.store = store
        self.session_id = session_id

    async def known(self, message_id: str) -> StoredMessage | None:
        """The message of id ``message_id`` the inbox holds, if any."""
        for message in await self.store.messages(self.session_id):
            if message.message_id == message_id:
                return message
        return None

    async def post(
        self, decision: BaseModel, message_id: str, now: float
    ) -> tuple[StoredMessage, bool]:
        """Store ``decision`` in the inbox (whatever else waits there)."""
        posted = NewMessage(
            message_id, message_kind(type(decision)), decision.model_dump(mode="json"), now
        )
        return await self.store.post(self.session_id, posted, capacity=_DECISION_ROOM)


def _refused(machine: Machine[Any], why: str, session_id: str = "") -> MessageRefused:
    return MessageRefused(
        f"message refused by machine {machine.name!r}: {why}; nothing was stored",
        session_id=session_id,
    )


class Postman:
    """An agent system's deliveries: `send`, `wake`, and the timer watch.

    Args:
        host: The system's sessions (messages and timers are timed by its clock).
        capacity: The most pending messages an inbox holds.
        poll: The longest the timer watch sleeps, in seconds.
        machines: The machines to serve from the start (held for good).
        max_bytes: The largest payload a message sent may have, in bytes of JSON.

    Raises:
        ConfigurationError: If ``capacity``, ``poll`` or ``max_bytes`` is not
            positive, or a machine is not a `Machine`.
    """

    __slots__ = (
        "_delivering",
        "_kick",
        "capacity",
        "clock",
        "given",
        "host",
        "max_bytes",
        "poll",
        "resume",
        "served",
    )

    def __init__(
        self,
        host: SessionHost,
        capacity: int,
        poll: float,
        machines: Iterable[Machine[Any]],
        max_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        check_positive("inbox_capacity", capacity, integer=True)
        check_positive("max_message_bytes", max_bytes, integer=True)
        self.max_bytes = max_bytes
        check_positive("poll_interval", poll)
        self.host = host
        self.clock: Clock = host.clock
        self.capacity = capacity
        self.poll = poll
        #: The machines whose parked sessions this system wakes, by name: held
        #: weakly (a machine dropped by its program is no longer served)...
        self.served: weakref.WeakValueDictionary[str, Machine[Any]] = weakref.WeakValueDictionary()
        #: ...but for those the system was given to serve.
        self.given: list[Machine[Any]] = []
        #: Sessions a `send` of this system is delivering to, with how many sends:
        #: the timer watch leaves them to it (a post brings a parked session's
        #: wake-up time forward, for a sender that dies before it wakes it).
        self._delivering: dict[str, int] = {}
        self._kick = anyio.Event()
        #: How a cancelled session a message reaches is resumed here (set by the system).
        self.resume: Callable[[Machine[Any], str], Awaitable[SessionHandle[Any]]] | None = None
        host.on_park(self.kick)
        for machine in machines:
            if not isinstance(machine, Machine):
                raise ConfigurationError(f"machines=... takes Machine objects, got {machine!r}")
            self.given.append(machine)
            self.serve(machine)

    def serve(self, machine: Machine[Any]) -> None:
        """Wake the parked sessions of ``machine`` when their timers fall due, from now on."""
        if self.served.get(machine.name) is not machine:
            self.served[machine.name] = machine
            self.kick()

    def kick(self) -> None:
        """Make the timer watch look again now (a session parked, a machine is served)."""
        self._kick.set()

    async def send(
        self,
        machine: Machine[Any],
        session_id: str,
        message: object,
        message_id: str | None,
        *,
        drive: bool = True,
        before_post: Callable[[], Awaitable[None]] | None = None,
    ) -> Sent:
        """Check, store and deliver ``message`` (see `AgentSystem.send`).

        ``drive=False``: store it only (its post brings a parked session's wake
        time forward, so a worker claims it). ``before_post``: awaited once the
        message is checked, before it is stored (a refusal there stores nothing).
        """
        host = self.host
        store = host.require_store("send a message")
        host.check_running()
        check_message_id(message_id)
        try:
            kind, payload = encode_message(machine, message, self.max_bytes)
        except MessageRefused as refused:
            raise MessageRefused(str(refused), session_id=session_id) from None
        # Its Sensitive fields are sealed before it is stored (a KeyringError without keys).
        payload = seal_message(machine.messages[kind], kind, payload, host.secrets, session_id)
        record = await Journal(store, machine, session_id, secrets=self.host.secrets).record()
        if record.status in ENDED:
            if message_id is not None:  # sent before it ended: a re-send stores nothing
                known = await Mailbox(store, session_id).known(message_id)
                if known is not None:
                    return Sent(session_id, known.message_id, known.position, True, None)
            raise _refused(
                machine,
                f"session {session_id!r} has ended ({record.status}); fork it to go on",
                session_id,
            )
        if before_post is not None:
            await before_post()
        posted = NewMessage(message_id or uuid.uuid4().hex, kind, payload, self.clock.now())
        if not drive:
            stored, new = await store.post(session_id, posted, capacity=self.capacity)
            return Sent(session_id, stored.message_id, stored.position, not new, None)
        delivering = self._delivering
        delivering[session_id] = delivering.get(session_id, 0) + 1
        try:
            stored, new = await store.post(session_id, posted, capacity=self.capacity)
            self.serve(machine)
            handle = await self.wake(machine, session_id)
        finally:
            if delivering[session_id] == 1:
                del delivering[session_id]
            else:
                delivering[session_id] -= 1
        if stored.applied_seq is not None:
            handle = None  # applied already (a re-sent id): no run applies it now
        return Sent(session_id, stored.message_id, stored.position, not new, handle)

    async def wake(self, machine: Machine[Any], session_id: str) -> SessionHandle[Any] | None:
        """Make sure session ``session_id`` gets its messages: woken here if it is parked.

        Returns:
            The handle of its run here (woken now, or running already), or
            ``None`` if another process drives it or it does not wait.
        """
        host = self.host
        store = host.require_store("wake a session")
        while True:
            live = host.running(session_id)
            record = await store.record(session_id)
            if live is not None:
                if record.status != "waiting":
                    return live  # it runs here, and receives the message when it next waits
                await live.result()  # it parked just now: its run is ending
                continue
            if record.status == "cancelled" and self.resume is not None:
                # Stopped with its process's system (a deploy, a restart) between two
                # commits: a message goes on with it here, unless a live owner holds it.
                try:
                    return await self.resume(machine, session_id)
                except SessionLocked:
                    return None
                except SessionBusy:
                    await anyio.sleep(_BUSY_RETRY)
                    continue
            if record.status != "waiting":
                return None  # driven elsewhere, paused at a gate, or not running at all
            try:
                return await self._launch(machine, session_id)
            except (SessionLocked, LeaseLost):
                return None  # another process woke it: it receives the message there
            except SessionBusy:
                await anyio.sleep(_BUSY_RETRY)  # another call here is waking it

    async def _launch(self, machine: Machine[Any], session_id: str) -> SessionHandle[Any] | None:
        """Wake parked ``session_id``: lease, load, launch it (`LeaseLost`: stalled past lease)."""
        host = self.host
        store = host.require_store("wake a session")
        journal = Journal(store, machine, session_id, secrets=host.secrets)
        async with host.claim(session_id) as claim:
            await claim.lease()
            loaded = await journal.load()
            record = loaded.record
            if record.status != "waiting":
                return host.running(session_id)  # woken and parked again meanwhile, or ended
            state = journal.current(loaded)
            last = await journal.settle(record)  # an upgrade goes before the run's first commit
            await store.append(session_id, [], status="running", owner=claim.owner)
            host.drop(session_id)
            return await host.launch(
                machine,
                state,
                host.config,
                session_id,
                base_seq=last,
                gates_passed=isinstance(record.waiting, dict) and "child" in record.waiting,
                claim=claim,
                journal=journal,
            )

    async def wake_due(self, machine: Machine[Any] | None = None) -> list[SessionHandle[Any]]:
        """Wake the parked sessions whose timers are due (of ``machine``, or of those served)."""
        store = self.host.require_store("wake sessions")
        due, _ = await store.waking(self.clock.now())
        handles = []
        for record in due:
            target = self.served.get(record.machine) if machine is None else machine
            if target is None or target.name != record.machine:
                continue
            if record.session_id in self._delivering:
                continue  # a send here is waking it
            try:
                handle = await self.wake(target, record.session_id)
            except ArkhonError as exc:  # one session's trouble never stops the others'
                _logger.error("session_not_woken", session_id=record.session_id, error=repr(exc))
                continue
            if handle is not None:
                handles.append(handle)
        return handles

    async def watch(self) -> None:
        """Serve timers until cancelled: wake due sessions, sleep until the next is due."""
        store = self.host.require_store("serve timers")
        while True:
            self._kick = anyio.Event()
            if self.served:
                await self.wake_due()
            now = self.clock.now()
            _, next_at = await store.waking(now)
            deadline = now + self.poll if next_at is None else min(next_at, now + self.poll)
            async with anyio.create_task_group() as group:
                group.start_soon(self._sleep_until, deadline, group.cancel_scope)
                await self._kick.wait()
                group.cancel_scope.cancel()

    async def _sleep_until(self, deadline: float, scope: anyio.CancelScope) -> None:
        await self.clock.sleep_until(deadline)
        self._kick.set()
        scope.cancel()
