"""`StoredSession`: a session as its store keeps it, and what a caller may do with it.

Read it (`record`, `state`, `history`), check it (`replay`), branch it (`fork`,
`rollback`), run it again (`resume`) and answer the gate it is paused at
(`approve`, `abort`, `edit`). Each write happens under the session's lease and
the agent system's claim on it, so nothing else drives or changes it meanwhile.
What it needs of the agent system is the `SessionHost` the system hands it.

A decision takes one path (`_decide`), for a stored session and for one paused
in memory alike: the session is claimed (and, with a store, leased), its record
(a `Ledger`: its journal, or the session itself) says where it is paused, the
decision is checked (`decision_updates`), its event is committed to that record,
and a resume launches the run.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar, cast

from .._construct import internal_only, make
from .._errors import ConfigurationError, SessionError
from ..protocols import Abort, AgentState, Approve, Edit, EventKind, Machine
from ._children import linked_history, parked_on_child
from ._decision import (
    MemoryJournal,
    decision_of_message,
    decision_updates,
    out_of_band_event,
    recorded_decision,
)
from ._journal import Journal
from ._mail import Mailbox, Sent, message_record
from ._poison import check_poison
from ._replay import verify_stored

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..protocols import SessionRecord, TransitionEvent
    from ._decision import Ledger
    from ._host import Claim, SessionHost
    from ._record import SessionHandle
    from ._replay import ReplayReport

__all__ = ["StoredSession", "new_stored"]

S = TypeVar("S", bound=AgentState)

#: The status a decision leaves the session in: an edit leaves it paused.
_STATUS = {"approve": "running", "abort": "aborted"}


class StoredSession(Generic[S]):
    """A session of ``machine`` kept by an `AgentSystem`'s store (`AgentSystem.stored`).

    Making one reads nothing: each method reads the store then, and checks the
    session was stored by this machine (`ConfigurationError` otherwise).
    Without a store only the gate operations work, on a session paused in the
    system's memory.

    Attributes:
        machine: The session's machine.
        session_id: The session.
    """

    __slots__ = ("_host", "machine", "session_id")

    _host: SessionHost
    machine: Machine[S]
    session_id: str

    __init__ = internal_only("use AgentSystem.stored(machine, id)")

    def __repr__(self) -> str:
        return f"<StoredSession {self.session_id!r} of {self.machine.name!r}>"

    def _journal(self, purpose: str) -> Journal:
        store = self._host.require_store(purpose)
        return Journal(store, self.machine, self.session_id, secrets=self._host.secrets)

    async def record(self) -> SessionRecord:
        """The session's record: its status, last event number, parent, owner...

        Raises:
            ConfigurationError: Without a store, or if the machine is not the session's.
            SessionNotFound: If the store has no such session.
        """
        return await self._journal("read a session").record()

    async def state(self, at_seq: int | None = None) -> S:
        """The state after event ``at_seq`` (the last by default), as stored.

        Raises:
            ConfigurationError: Without a store, if the machine is not the
                session's, or if ``at_seq`` is out of range.
            SessionNotFound: If the store has no such session.
        """
        state, _ = await self._journal("read a session").state(at_seq)
        return cast("S", state)

    async def history(self, *, children: bool = False) -> list[TransitionEvent]:
        """Every event of the session, from the store, in order, with patches and timings.

        With ``children``, the events of the child sessions its subgraph stages
        ran (see `subgraph`) come too, each child's right before the parent's
        event for that step (a child still running last); a child's events
        carry ``info["parent"]``: the parent session, stage and event number.

        Raises:
            ConfigurationError: Without a store, or if the machine is not the session's.
            SessionNotFound: If the store has no such session.
        """
        journal = self._journal("read a session's history")
        if children:
            return await linked_history(journal)
        await journal.record()
        return await journal.history()

    async def replay(self, *, reexecute: bool = False) -> ReplayReport[S]:
        """Fold the session's whole log from its start and check it against what was committed.

        Each event's replayed state is compared with the digest the event was
        stored with, and the end result with the stored state a resume would
        run from; the first event that does not fit is reported with the
        reason. A session running meanwhile is checked as it was when the replay
        began. With ``reexecute``, every step's stage also runs again, on a fresh
        instance and the replayed state, its model and tool calls answered from
        the calls the event recorded (see `record_call`): it must make the same
        calls, propose the same patch and choose the same next state. Nothing is
        written; stage code runs, but the model and the tools are not called in
        so far as the stages call them through `record_call`.

        Events an earlier version stored (or stored before a compatible change)
        are checked on the values it stored, before any upgrade, not re-executed;
        the report's state is the session's state as this machine reads it.

        Returns:
            The report: ``report.ok``, or ``report.divergence`` (the event number
                and what differed), and the replayed state.

        Raises:
            ConfigurationError: Without a store, if the machine does not read the
                session (another machine, or a change its upgrades do not cover),
                or if the session's upgraded state does not validate.
            SessionNotFound: If the store has no such session.
            StoreCorrupt: If the session's first snapshot does not decode.
        """
        report = await verify_stored(self._journal("replay a session"), reexecute=reexecute)
        return cast("ReplayReport[S]", report)

    async def fork(
        self, *, at_seq: int | None = None, new_id: str | None = None
    ) -> StoredSession[S]:
        """Start a new stored session from this one's state after event ``at_seq`` (the last).

        The fork's first snapshot is that state, its parent is this session;
        this one is untouched. Resume the fork to run it.

        Returns:
            The fork.

        Raises:
            ConfigurationError: Without a store, if ``at_seq`` is out of range, or
                if ``new_id`` is not a non-empty string.
            SessionNotFound: If the store has no such session.
            SessionError: If ``new_id`` is taken (or another call here is starting it).
        """
        source = self._journal("fork a session")
        if new_id is None:
            new_id = uuid.uuid4().hex[:12]
        elif not isinstance(new_id, str) or not new_id:
            raise ConfigurationError(
                f"fork(new_id=...) takes a non-empty string, got {new_id!r}; "
                "leave it out for a fresh id"
            )
        host = self._host
        async with host.claim(new_id):
            state, _ = await source.state(at_seq)
            state = state.model_copy(update={"session_id": new_id})
            fork = Journal(source.store, self.machine, new_id, secrets=host.secrets)
            await fork.create(state, parent=self.session_id, status="forked")
        return new_stored(host, self.machine, new_id)

    async def rollback(self, to_seq: int) -> TransitionEvent:
        """Return the stopped session's state to what it was after event ``to_seq``.

        The audit log stays append-only: the rollback is a new event whose patch
        sets every field to its value at ``to_seq`` and whose ``info`` records
        ``rolled_back_from`` and ``rolled_back_to``. Resume the session to go on.

        Returns:
            The rollback event.

        Raises:
            ConfigurationError: Without a store, or if ``to_seq`` is out of range.
            SessionNotFound: If the store has no such session.
            SessionError: If the session is running here, or another call here is
                starting or changing it.
            SessionLocked: If another system drives it.
        """
        journal = self._journal("roll a session back")
        async with self._host.claim(self.session_id) as claim:
            await claim.lease()  # nobody drives it
            current, record = await journal.state(None)
            target, _ = await journal.state(to_seq)
            fields = {
                name: getattr(target, name)
                for name in self.machine.state_type.model_fields
                if name != "session_id"
            }
            return await journal.append(
                record,
                EventKind.ROLLBACK,
                current,
                target,
                fields,
                info={"rolled_back_from": record.last_seq, "rolled_back_to": to_seq},
                status="rolled_back",
            )

    async def resume(self, *, max_steps: int | None = None) -> SessionHandle[S]:
        """Rebuild the session from the store and continue it from its last commit.

        A stage that was running when its process died runs again: stages run at
        least once, commits exactly once (event numbers are unique per session).
        The resume is recorded as a `RESUME` event that changes no state.

        Args:
            max_steps: The step budget for this run; the system's default otherwise.

        Returns:
            The session's handle; it runs on its own from its last committed state.

        Raises:
            ConfigurationError: Without a store, or if the machine is not the session's.
            SessionNotFound: If the store has no such session.
            SessionError: If the session is running here already (or another call
                here is starting or changing it), is paused at a gate, or has ended.
            SessionLocked: If a live owner elsewhere drives it.
            LeaseLost: If this resume was held past its lease (a paused process)
                and another owner took the session on meanwhile: nothing is written.
            PoisonSession: If a worker's resume found the session claimed its
                limit of times since its last commit: it is failed instead.
            StoreCorrupt: If what is stored does not decode.
            ResourceUnavailable: If a resource of the machine could not be
                opened (nothing is recorded).
        """
        host = self._host
        journal = self._journal("resume a session")
        host.check_running()
        config = host.config_for(max_steps)
        await host.open_resources(self.machine)  # before the resume is recorded
        async with host.claim(self.session_id) as claim:
            await journal.exists()  # SessionNotFound before any lease
            taken_over = await claim.lease()
            loaded = await journal.load()  # again, now that nobody else can write
            record = loaded.record
            if record.status == "paused":
                raise SessionError(
                    f"session {self.session_id!r} is paused at a gate; answer it with "
                    "approve(), abort() or edit() on system.stored(machine, id)",
                    session_id=self.session_id,
                )
            state = cast("S", journal.current(loaded))
            machine = self.machine
            if machine.is_terminal(state.lifecycle):
                await self._refuse_ended(journal, record, state, claim.owner)
            stage = machine.stages.get(state.lifecycle)
            info = {
                "resumed_by": host.owner.describe(),
                "from_seq": record.last_seq,
                "previous_status": record.status,
                "taken_over": taken_over,
                # Still "running": its driver stopped without a word, in (or just
                # before) this state's stage, which runs again from its start.
                "rerun": stage.name if stage is not None and record.status == "running" else None,
            }
            anchor = await journal.last_seq(excluding=EventKind.RESUME, loaded=loaded)
            if host.poison_after is not None and info["rerun"] is not None:
                await check_poison(journal, record, state, anchor, host.poison_after)
            event = await journal.append(
                record, EventKind.RESUME, state, state, {}, info=info, status="running"
            )
            host.drop(self.session_id)
            return await host.launch(
                machine,
                state,
                config,
                self.session_id,
                base_seq=event.seq,
                gates_passed=parked_on_child(record),  # past the gate that let it through
                claim=claim,
                anchor_seq=anchor,
                journal=journal,
            )

    async def _refuse_ended(
        self, journal: Journal, record: SessionRecord, state: S, owner: str
    ) -> NoReturn:
        """Refuse to resume an ended session, its record repaired first if a crash left it behind.

        The repair is fenced by ``owner``'s lease (``LeaseLost``, nothing written,
        if another owner took the session on meanwhile).
        """
        machine = self.machine
        ended = "failed" if state.lifecycle is machine.failed else "finished"
        if record.status not in (ended, "max_steps", "cancelled", "crashed"):
            await journal.set_status(ended, owner=owner)
        raise SessionError(
            f"session {self.session_id!r} has ended in {state.lifecycle.name}; "
            "fork it or roll it back to go on",
            session_id=self.session_id,
        )

    async def approve(
        self, value: Any = None, *, message_id: str | None = None
    ) -> SessionHandle[S]:
        """Let the session paused at a gate go on, writing ``value`` to the gate's field.

        The decision is an `Approve` message through the session's inbox (see
        `decide`). The value is checked against the gate's ``answer`` type, if
        it declares one, then validated like any patch (the gate's ``field`` is
        its only write) and the invariants checked, before anything is written.
        With a store the decision is stored and works across processes; without
        one it applies to the paused session this system holds in memory.

        Args:
            value: The value for a gate with a ``field``; a gate without one takes none.
            message_id: The decision's id: sending it again stores nothing.

        Returns:
            The running session's handle.

        Raises:
            SessionNotFound: If there is no such session.
            SessionError: If it is not paused (or runs here, or another call here
                is starting or changing it).
            SessionLocked: If a live owner elsewhere holds the session's lease.
            MessageRefused: If the value is not of the gate's answer type.
            ConfigurationError: If the gate takes no value but one was given, or
                the machine is not the session's.
            InvalidPatch: If the value fails validation (the session stays paused).
            InvariantViolation: If the resulting state breaks an invariant.
            ResourceUnavailable: If a resource of the machine could not be
                opened (nothing is recorded; the session stays paused).
        """
        sent = await self.decide(Approve(value=value), message_id=message_id)
        handle = sent.handle
        if handle is None:  # a decision made before, sent again: the session went on then
            raise SessionError(
                f"session {self.session_id!r} had this decision ({sent.message_id!r}) already",
                session_id=self.session_id,
            )
        return handle

    async def abort(self, *, message_id: str | None = None) -> None:
        """End the session paused at a gate: it moves to the machine's failed state.

        The decision is an `Abort` message through the session's inbox (see `decide`).

        Raises:
            SessionNotFound: If there is no such session.
            SessionError: If it is not paused (or runs here, or another call here
                is starting or changing it).
            SessionLocked: If a live owner elsewhere holds the session's lease.
            ConfigurationError: If the machine is not the session's.
        """
        await self.decide(Abort(), message_id=message_id)

    async def edit(self, fields: Mapping[str, Any], *, message_id: str | None = None) -> None:
        """Change fields of the session paused at a gate; it stays paused.

        The decision is an `Edit` message through the session's inbox (see `decide`).

        Args:
            fields: New values by field name; validated like a patch that may
                write any field but the supervisor's.
            message_id: The decision's id: sending it again stores nothing.

        Raises:
            SessionNotFound: If there is no such session.
            SessionError: If it is not paused (or runs here, or another call here
                is starting or changing it).
            SessionLocked: If a live owner elsewhere holds the session's lease.
            ConfigurationError: If ``fields`` is not a non-empty mapping of field
                names, or the machine is not the session's.
            InvalidPatch: If a value fails validation (nothing is written).
            UndeclaredWrite: If a field is one the supervisor owns (``lifecycle``,
                ``session_id``, ``iteration``, ``last_error``, ``metadata``): an edit
                cannot forge the failure it recorded. Nothing is written.
            InvariantViolation: If the edited state breaks an invariant.
        """
        if not isinstance(fields, Mapping) or not fields:
            raise ConfigurationError(
                f"edit() takes a non-empty mapping of field names to new values, got {fields!r}"
            )
        if not all(isinstance(name, str) for name in fields):
            raise ConfigurationError(
                f"edit() takes field names as strings, got {sorted(map(repr, fields))}"
            )
        await self.decide(Edit(fields=dict(fields)), message_id=message_id)

    async def decide(self, decision: BaseModel, *, message_id: str | None = None) -> Sent:
        """Answer the gate the session is paused at with ``decision``: one path for all three.

        The decision (an `Approve`, `Abort` or `Edit`) is checked against the paused
        state first: a refusal stores nothing. With a store it is stored in the
        session's inbox and applied, once, by the event that records it (the message
        marked applied in the same transaction); an `Approve` launches the session's
        run here. Sending the same ``message_id`` again does nothing.

        Returns:
            Where it went; ``sent.handle`` is the run an approval launched.

        Raises:
            SessionError: If the session is not paused; this and every other error
                raised are those listed by `approve`, `abort` and `edit`.
        """
        host, machine, session_id = self._host, self.machine, self.session_id
        host.check_running()
        if isinstance(decision, Approve):
            await host.open_resources(machine)  # before the decision is recorded
        async with host.claim(session_id) as claim:
            ledger = await _ledger(host, machine, session_id, claim)
            inbox = None if host.store is None else Mailbox(host.store, session_id)
            if inbox is not None and message_id is not None:
                known = await inbox.known(message_id)
                if known is not None and known.applied_seq is not None:
                    return Sent(session_id, message_id, known.position, True, None)
            paused = await ledger.paused()
            state, gate = paused.state, paused.gate
            name, value, edit = decision_of_message(machine, gate, decision, session_id)
            updates, kind, error = decision_updates(machine, state, gate, name, value, edit)
            decided = cast("S", state.model_copy(update=updates))
            info: dict[str, Any] = {"decision": name, "gate": gate}
            if (link := host.link_of(session_id, getattr(ledger, "parent", None))) is not None:
                info["parent"] = link  # a child's decision names its parent's step, as its steps
            event = out_of_band_event(
                session_id, paused.next_seq, kind, state, decided, updates, info, error
            )
            position, new, message_id = 0, True, message_id or uuid.uuid4().hex
            if inbox is not None:
                recorded = recorded_decision(machine, gate, decision)
                stored, new = await inbox.post(recorded, message_id, host.clock.now())
                position = stored.position
                event = event._replace(info={**info, "message": message_record(stored)})
            # An edit leaves it paused: its record goes on saying what for, in the
            # same write as the edit's event.
            await ledger.commit(
                event,
                decided,
                status=_STATUS.get(name, "paused"),
                applied=position or None,
                waiting=paused.waiting if name == "edit" else None,
            )
            handle = None
            if name == "approve":
                handle = await host.launch(
                    machine,
                    decided,
                    host.config,
                    session_id,
                    base_seq=paused.base_seq,
                    gates_passed=True,
                    claim=claim,
                    history=paused.history,
                    journal=ledger if isinstance(ledger, Journal) else None,
                )
            elif name == "abort" and isinstance(ledger, Journal):
                await host.child_ended(session_id, ledger.parent, "aborted")  # if a child
            return Sent(session_id, message_id, position, not new, handle)


async def _ledger(
    host: SessionHost, machine: Machine[Any], session_id: str, claim: Claim
) -> Ledger:
    """A session's record: its journal, leased (with a store), or the session held here."""
    store = host.store
    if store is None:
        return MemoryJournal(host.held(session_id), machine)
    journal = Journal(store, machine, session_id, secrets=host.secrets)
    await journal.exists()  # SessionNotFound before any lease
    await claim.lease()
    return journal


def new_stored(host: SessionHost, machine: Machine[S], session_id: str) -> StoredSession[S]:
    """``session_id`` of ``machine`` as ``host``'s system stores it (its only way to make one)."""
    if not isinstance(machine, Machine):
        raise ConfigurationError(
            f"stored() takes the machine first, then the session id: got {machine!r}"
        )
    if not isinstance(session_id, str) or not session_id:
        raise ConfigurationError(f"a session id is a non-empty string, got {session_id!r}")
    stored: StoredSession[S] = make(
        StoredSession, _host=host, machine=machine, session_id=session_id
    )
    return stored
