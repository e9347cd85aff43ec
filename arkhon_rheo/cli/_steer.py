"""Commands that need the machine: run, resume, decide, rollback, fork and replay.

Each opens an `AgentSystem` on the store file (with the `Keyring` in the
``ARKHON_RHEO_KEY`` environment variable, for machines with `Sensitive`
fields) and calls the same method a program would, so the checks are the
library's own: the machine must match the session's stored fingerprint, a
decision is validated like any patch, a session driven elsewhere is
`SessionLocked`. A command that sets a session running (``run``, ``resume``,
``decide ... resume``) waits for it to end or pause, then reports how it
ended; a state it prints shows each `Sensitive` value as ``[SENSITIVE]``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from rich.table import Table

from .._errors import SessionBusy, SessionError
from ..core import Keyring
from ..core._seams import shown_state
from ..supervision import ExitReason
from ..system import AgentSystem
from ._common import (
    CommandError,
    ExitStatus,
    console,
    existing_store,
    parse_json,
    print_json,
    quoted,
    read_only_store,
    shown,
    store_file,
    styled,
)
from ._load import load_machine
from ._talk import first_message, report_reply

if TYPE_CHECKING:
    import argparse

    from ..protocols import AgentState, Machine, TransitionEvent
    from ..system import SessionHandle, SessionResult

__all__ = ["decide", "fork", "replay", "resume", "rollback", "run"]

#: How a session's end maps to the exit status: only a finished or paused one is a success.
_ENDED_OK = frozenset({ExitReason.FINISHED, ExitReason.PAUSED, ExitReason.WAITING})
_MASK = (1 << 64) - 1


def _system(path: str) -> AgentSystem:
    """The agent system on store file ``path``, with the keyring in ``ARKHON_RHEO_KEY`` if set."""
    return AgentSystem(path=path, secrets=Keyring.from_env())


def _result_data(result: SessionResult[Any]) -> dict[str, Any]:
    return {
        "session_id": result.session_id,
        "exit_reason": result.exit_reason.value,
        "steps": result.steps,
        "retries": result.retries,
        "restarts": result.restarts,
        "failure": None if result.failure is None else result.failure.model_dump(mode="json"),
        "state": shown_state(result.state),
    }


def _report(args: argparse.Namespace, result: SessionResult[Any]) -> ExitStatus:
    """Print how a session ended; its exit status."""
    if args.json:
        print_json(_result_data(result))
    else:
        out = console()
        colour = "green" if result.exit_reason in _ENDED_OK else "red"
        out.print(
            styled(
                "session ",
                (result.session_id, "bold"),
                ": ",
                (result.exit_reason.value, colour),
                f" after {result.steps} step(s), {result.retries} retry(ies), "
                f"{result.restarts} restart(s)",
            )
        )
        if result.failure is not None:
            out.print(styled(f"  {result.failure.error_type}: {result.failure.message}"))
        output = _output(result)
        if output is not None:
            out.print(styled(output))
        if result.exit_reason is ExitReason.PAUSED:
            out.print(
                styled(
                    f"  paused at a gate: arkhon-rheo decide {result.session_id} "
                    f"approve|abort|edit --machine {args.machine} --store {args.store}"
                )
            )
        out.print(styled(f"  history: arkhon-rheo show {result.session_id} --store {args.store}"))
    return ExitStatus.OK if result.exit_reason in _ENDED_OK else ExitStatus.FAILED


#: The most characters of a final state a report prints (``--json`` prints all of it).
_STATE_SHOWN = 400


def _output(result: SessionResult[Any]) -> str | None:
    """What the session produced, one line: its ``answer``, or else its final state's fields.

    ``None`` for a session that stopped without one (paused, or failed before an answer).
    """
    state = shown_state(result.state)
    answer = state.get("answer")
    if answer not in (None, ""):
        return f"  answer: {answer}"
    if result.exit_reason is not ExitReason.FINISHED:
        return None
    fields = {name: value for name, value in state.items() if name != "lifecycle"}
    text = json.dumps(fields, default=str, ensure_ascii=False)
    if len(text) > _STATE_SHOWN:
        text = text[:_STATE_SHOWN] + "... (--json prints all of it)"
    return f"  final state: {text}"


async def _wait(handle: SessionHandle[Any] | None) -> SessionResult[Any] | None:
    return None if handle is None else await handle.result()


def _initial_state(machine: Machine[Any], text: str | None) -> AgentState:
    data = {} if text is None else parse_json(text, what="--input")
    if not isinstance(data, dict):
        raise CommandError(
            f"--input must be a JSON object of {machine.state_type.__name__}'s fields, "
            f"got {quoted(str(text))}",
            code=ExitStatus.USAGE,
        )
    try:
        state: AgentState = machine.state_type.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(state)'}: {error['msg']}"
            for error in exc.errors()
        )
        raise CommandError(
            f"--input does not validate as {machine.state_type.__name__}: {problems}",
            code=ExitStatus.USAGE,
        ) from None
    return state


def run(args: argparse.Namespace) -> ExitStatus:
    """``arkhon-rheo run MODULE:ATTR``: start a session of a machine and wait for its end."""
    store = store_file(args.store)
    machine = load_machine(args.target)
    state = _initial_state(machine, args.input)
    if args.text is not None:
        state = first_message(machine, state, args.text)
    args.machine = args.target

    async def go() -> SessionResult[Any]:
        async with _system(store) as system:
            return await system.run(
                machine, state, session_id=args.session_id, max_steps=args.max_steps
            )

    result = args.run(go)
    if args.text is not None:
        return report_reply(args, result)
    return _report(args, result)


def resume(args: argparse.Namespace) -> ExitStatus:
    """``arkhon-rheo resume SESSION``: continue a stored session and wait for its end."""
    machine = load_machine(args.machine)

    async def go() -> SessionResult[Any] | None:
        async with _system(existing_store(args.store)) as system:
            try:
                handle = await system.resume(machine, args.session, max_steps=args.max_steps)
            except SessionError as exc:
                # The library's refusal names its Python API: the command line's is decide.
                record = await system.stored(machine, args.session).record()
                if isinstance(exc, SessionBusy) or record.status != "paused":
                    raise
                raise _paused(args) from exc
            return await _wait(handle)

    result = args.run(go)
    assert result is not None
    return _report(args, result)


def _paused(args: argparse.Namespace) -> CommandError:
    """``resume`` of a session paused at a gate: the ``decide`` commands that answer it."""
    where = f"--machine {args.machine} --store {args.store}"
    return CommandError(
        f"session {args.session!r} is paused at a gate: resume does not answer it. Run "
        f"`arkhon-rheo decide {args.session} approve {where}` (or abort, or edit --set "
        f"FIELD=JSON); `arkhon-rheo show {args.session} --store {args.store}` says what it "
        "waits for",
        code=ExitStatus.FAILED,
    )


def _edits(pairs: list[str]) -> dict[str, Any]:
    edit: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise CommandError(
                f"--set takes FIELD=JSON (like answer='\"42\"' or turns=3), got {pair!r}",
                code=ExitStatus.USAGE,
            )
        edit[name.strip()] = parse_json(text, what=f"the value of --set {name}")
    return edit


def decide(args: argparse.Namespace) -> ExitStatus:
    """``arkhon-rheo decide SESSION approve|abort|edit``: answer a session paused at a gate.

    ``resume`` is the old word for ``approve``, still taken.
    """
    if args.decision == "resume":
        args.decision = "approve"
    if args.decision != "edit" and args.set:
        raise CommandError(
            f"--set is for `edit`, not {args.decision!r}; use --value for the gate's answer",
            code=ExitStatus.USAGE,
        )
    if args.decision == "edit" and not args.set:
        raise CommandError("`edit` needs at least one --set FIELD=JSON", code=ExitStatus.USAGE)
    if args.decision != "approve" and args.value is not None:
        raise CommandError("--value is for `approve` only", code=ExitStatus.USAGE)
    value = None if args.value is None else parse_json(args.value, what="--value")
    edit = _edits(args.set or [])
    machine = load_machine(args.machine)

    async def go() -> SessionResult[Any] | None:
        async with _system(existing_store(args.store)) as system:
            stored = system.stored(machine, args.session)
            if args.decision == "approve":
                return await _wait(await stored.approve(value))
            if args.decision == "abort":
                await stored.abort()
            else:
                await stored.edit(edit)
            return None

    result = args.run(go)
    if result is not None:
        return _report(args, result)
    done = {"session_id": args.session, "decision": args.decision}
    if args.json:
        print_json({**done, "status": "aborted" if args.decision == "abort" else "paused"})
    elif args.decision == "abort":
        console().print(
            styled("session ", (args.session, "bold"), " aborted (moved to its failed state)")
        )
    else:
        console().print(
            styled(
                "session ",
                (args.session, "bold"),
                f" edited ({', '.join(edit)}); still paused: decide approve or abort next",
            )
        )
    return ExitStatus.OK


def _event_data(event: TransitionEvent) -> dict[str, Any]:
    return {
        "session_id": event.session_id,
        "seq": event.seq,
        "kind": event.kind.value,
        "from": event.from_state.name,
        "to": event.to_state.name,
        "writes": sorted(event.writes),
        "info": dict(event.info or {}),
    }


def rollback(args: argparse.Namespace) -> ExitStatus:
    """``arkhon-rheo rollback SESSION SEQ``: return a stopped session to its state after SEQ."""
    machine = load_machine(args.machine)

    async def go() -> TransitionEvent:
        async with _system(existing_store(args.store)) as system:
            return await system.stored(machine, args.session).rollback(args.seq)

    event = args.run(go)
    if args.json:
        print_json(_event_data(event))
    else:
        console().print(
            styled(
                "session ",
                (args.session, "bold"),
                f" rolled back to its state after event {args.seq} "
                f"(recorded as event {event.seq}, now in {event.to_state.name}); "
                f"`arkhon-rheo resume {args.session} --machine {args.machine}` goes on from there",
            )
        )
    return ExitStatus.OK


def fork(args: argparse.Namespace) -> ExitStatus:
    """``arkhon-rheo fork SESSION --at SEQ``: a new session from another's state after SEQ."""
    machine = load_machine(args.machine)

    async def go() -> str:
        async with _system(existing_store(args.store)) as system:
            stored = system.stored(machine, args.session)
            return (await stored.fork(at_seq=args.at, new_id=args.new_id)).session_id

    new_id = args.run(go)
    if args.json:
        print_json({"session_id": new_id, "parent": args.session, "at_seq": args.at})
    else:
        at = "its last event" if args.at is None else f"event {args.at}"
        console().print(
            styled(
                "forked ",
                (new_id, "bold"),
                f" from {args.session} at {at}; run it with "
                f"`arkhon-rheo resume {new_id} --machine {args.machine}`",
            )
        )
    return ExitStatus.OK


def replay(args: argparse.Namespace) -> ExitStatus:
    """``arkhon-rheo replay SESSION``: fold a session's log and check every stored digest."""
    machine = load_machine(args.machine)

    async def go(path: str) -> Any:
        async with _system(path) as system:
            return await system.stored(machine, args.session).replay(reexecute=args.reexecute)

    with read_only_store(args.store) as path:
        report = args.run(go, path)
    divergence = report.divergence
    if args.json:
        print_json(
            {
                "session_id": report.session_id,
                "ok": report.ok,
                "events": report.events,
                "checked": report.checked,
                "reexecuted": report.reexecuted,
                "digest": f"{report.digest & _MASK:016x}",
                "divergence": None
                if divergence is None
                else {"seq": divergence.seq, "reason": divergence.reason},
            }
        )
    else:
        table = Table(title=shown(f"replay of {report.session_id}"), show_header=False)
        table.add_row("events folded", str(report.events))
        table.add_row("digests checked", str(report.checked))
        if args.reexecute:
            table.add_row("stages re-executed", str(report.reexecuted))
        table.add_row("final digest", f"{report.digest & _MASK:016x}")
        if divergence is None:
            table.add_row("result", styled(("ok: the log folds to every committed state", "green")))
        else:
            table.add_row("result", styled((f"diverged at event {divergence.seq}", "red")))
            table.add_row("reason", shown(divergence.reason))
        console().print(table)
    return ExitStatus.OK if report.ok else ExitStatus.FAILED
