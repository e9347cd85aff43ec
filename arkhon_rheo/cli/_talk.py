"""Commands that talk to a session: ``run --text`` starts a conversation; ``ask``, ``send`` go on.

``ask`` asks a session (`AgentSystem.ask`): the message is stored, then the
command waits for the reply to *that* message, wherever the session runs
(here, another process, a worker), and prints it. ``send`` takes the
library's one path for a message (`AgentSystem.send`):
checked against the kinds the machine accepts (a refusal stores nothing and
exits 1), stored in the session's inbox, then delivered: the session is
woken here and driven until it parks or ends, and its reply (a ReAct
agent's ``answer``) or its outcome is printed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core import Keyring
from ..core._seams import shown_state
from ..protocols._seams import json_data
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
    styled,
)
from ._load import load_machine

if TYPE_CHECKING:
    import argparse

    from ..protocols import AgentState, Machine
    from ..system import Reply, SessionResult

__all__ = ["ask", "first_message", "report_reply", "send"]

#: The runs that went well: one that finished, parked for the next message, or paused.
_OK = frozenset({ExitReason.FINISHED, ExitReason.WAITING, ExitReason.PAUSED})


def first_message(machine: Machine[Any], state: AgentState, text: str) -> AgentState:
    """``state`` with ``text`` as its ``task`` (the first user message of a conversation).

    Raises:
        CommandError: If the machine's state has no ``task`` (usage: exit 2).
    """
    if "task" not in machine.state_type.model_fields:
        raise CommandError(
            f"--text gives a conversational agent its first message (its 'task'); "
            f"{machine.state_type.__name__} has no 'task' field: use --input JSON",
            code=ExitStatus.USAGE,
        )
    return state.model_copy(update={"task": text})


def report_reply(args: argparse.Namespace, result: SessionResult[Any] | None) -> ExitStatus:
    """Print the reply of a run (or that another process drives the session); its exit status."""
    if result is None:
        if args.json:
            print_json({"session_id": args.session, "delivered": "elsewhere"})
        else:
            console().print(
                styled(
                    "message stored; another process drives session ",
                    (args.session, "bold"),
                    ": it applies the message there",
                )
            )
        return ExitStatus.OK
    reply = shown_state(result.state).get("answer")
    ok = result.exit_reason in _OK
    if args.json:
        print_json(
            {
                "session_id": result.session_id,
                "exit_reason": result.exit_reason.value,
                "reply": reply,
                "steps": result.steps,
                "failure": None
                if result.failure is None
                else result.failure.model_dump(mode="json"),
            }
        )
        return ExitStatus.OK if ok else ExitStatus.FAILED
    out = console()
    if reply is not None and ok:
        out.print(styled((str(reply), "")))
    colour = "green" if ok else "red"
    out.print(
        styled("session ", (result.session_id, "bold"), ": ", (result.exit_reason.value, colour))
    )
    if result.failure is not None:
        out.print(styled(f"  {result.failure.error_type}: {result.failure.message}"))
    if result.exit_reason is ExitReason.WAITING:
        out.print(
            styled(
                f"  waiting: arkhon-rheo send {result.session_id} --text '...' "
                f"--machine {args.machine} --store {args.store}"
            )
        )
    return ExitStatus.OK if ok else ExitStatus.FAILED


def _message(args: argparse.Namespace) -> object:
    if (args.text is None) == (args.message is None):
        raise CommandError(
            "give the message as --message JSON or --text TEXT", code=ExitStatus.USAGE
        )
    if args.text is not None:
        return {"kind": "user_input", "text": args.text}
    data = parse_json(args.message, what="--message")
    if not isinstance(data, dict):
        raise CommandError(
            f"--message must be a JSON object (the message's fields, its kind under 'kind'), "
            f"got {quoted(args.message)}",
            code=ExitStatus.USAGE,
        )
    return data


def send(args: argparse.Namespace) -> ExitStatus:
    """``arkhon-rheo send SESSION``: store a message for a session, drive it, print its reply."""
    machine = load_machine(args.machine)
    message = _message(args)
    store = existing_store(args.store)

    async def go() -> SessionResult[Any] | None:
        async with AgentSystem(path=store, secrets=Keyring.from_env()) as system:
            sent = await system.send(machine, args.session, message, message_id=args.message_id)
            return None if sent.handle is None else await sent.handle.result()

    return report_reply(args, args.run(go))


def ask(args: argparse.Namespace) -> ExitStatus:
    """``arkhon-rheo ask SESSION``: store a message, wait for the reply to it, print it.

    Exit status 0 with the reply; 1 if the message was refused, the turn
    failed, or no reply came within ``--timeout``; 3 for an unknown session.
    """
    machine = load_machine(args.machine)
    message = _message(args)
    store = existing_store(args.store)

    async def go() -> Reply[Any]:
        async with AgentSystem(path=store, secrets=Keyring.from_env()) as system:
            return await system.ask(
                machine,
                args.session,
                message,
                message_id=args.message_id,
                timeout=args.timeout,
                drive=not args.no_drive,
            )

    reply = args.run(go)
    value = reply.value
    if args.json:
        print_json(
            {
                "session_id": reply.session_id,
                "message_id": reply.message_id,
                "status": reply.status,
                "reply": json_data(value),
                "applied_seq": reply.applied_seq,
                "seq": reply.seq,
                "interrupted": reply.interrupted,
                "duplicate": reply.duplicate,
            }
        )
        return ExitStatus.OK if reply.ok else ExitStatus.FAILED
    out = console()
    if value is not None:
        out.print(styled((reply.text, "")))
    colour = "green" if reply.ok else "red"
    out.print(
        styled(
            "session ",
            (reply.session_id, "bold"),
            f" (message {reply.message_id}): ",
            (reply.status, colour),
        )
    )
    return ExitStatus.OK if reply.ok else ExitStatus.FAILED
