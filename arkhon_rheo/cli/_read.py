"""Commands that read the store alone: ``sessions``, ``show`` and ``graph SESSION``.

They need no machine: the store keeps every session's record and events as
JSON (states by their names, patches as JSON, recorded calls in ``io``). A
`Sensitive` field's sealed value shows as ``[SENSITIVE]``; no key is read. Where
a machine is given (``graph SESSION --machine``) it is only checked against
the session's stored fingerprint and drawn under the path.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.table import Table

from .._errors import SessionsDamaged, StoreCorrupt
from ..core._seams import fingerprint, masked, reading, waits_for
from ..protocols import StateGraph
from ..session._seams import Owner, is_dead
from ..store._seams import StoreLocation
from ._common import (
    CommandError,
    ExitStatus,
    console,
    print_json,
    read_only_store,
    shown,
    styled,
)
from ._load import load_machine

if TYPE_CHECKING:
    import argparse

    from ..core._seams import WaitsFor
    from ..protocols import Machine, SessionRecord, StoredEvent

__all__ = ["graph", "list_sessions", "show"]


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _exit_reason(record: SessionRecord, last: StoredEvent | None) -> str:
    """Why a session stopped, from its status and its last event's failure."""
    if last is not None and last.error:
        error = last.error
        reason = error.get("exit_reason") or record.status
        return f"{reason}: {error.get('error_type')}: {error.get('message')}"
    return "" if record.status in ("running", "paused", "forked") else record.status


def _dead_owner(record: SessionRecord, owner: str | None) -> dict[str, Any] | None:
    """The dead process a running session's lease names (``{"pid", "host"}``), if it is dead.

    A lease names its owner's host, pid and start time: on this host a dead
    owner is known at once, long before its lease runs out.
    """
    if record.status != "running" or owner is None or not is_dead(owner):
        return None
    found = Owner.parse(owner)
    assert found is not None  # is_dead parsed it
    return {"pid": found.pid, "host": found.host}


def _row(record: SessionRecord, last: StoredEvent | None, owner: str | None) -> dict[str, Any]:
    """A session as ``sessions`` lists it; ``owner``: who holds its live lease, if anyone."""
    dead = _dead_owner(record, owner)
    return {
        "session_id": record.session_id,
        "machine": record.machine,
        "status": record.status,
        # Still "running" with no live lease, or one held by a dead process: its
        # process stopped mid-run.
        "orphaned": record.status == "running" and (owner is None or dead is not None),
        "owner_dead": dead,
        "steps": record.last_seq,
        "created_at": record.created_at,
        "last_commit": record.updated_at,
        "parent": record.parent,
        "exit_reason": _exit_reason(record, last),
        "waiting": record.waiting,
        "wake_at": record.wake_at,
    }


#: The columns of ``sessions`` after the id, and the least width of each (a date, a word).
_COLUMNS = (
    ("machine", None),
    ("status", 8),
    ("steps", None),
    ("last commit", 10),
    ("exit reason", None),
    ("waits for", None),
)


def _status(row: dict[str, Any]) -> str:
    """A row's status as the table shows it: an orphan says so, and names its dead owner."""
    if row["owner_dead"] is not None:
        return f"{row['status']} (orphaned: owner pid {row['owner_dead']['pid']} dead)"
    return f"{row['status']} (orphaned)" if row["orphaned"] else row["status"]


def _damaged_row(session_id: str, machine: str, reason: str) -> dict[str, Any]:
    """A session whose stored rows do not read, as ``sessions`` lists it: why, and no more."""
    return {
        "session_id": session_id,
        "machine": machine,
        "status": "damaged",
        "orphaned": False,
        "owner_dead": None,
        "steps": None,
        "created_at": None,
        "last_commit": None,
        "parent": None,
        "exit_reason": reason,
        "waiting": None,
        "wake_at": None,
        "waits_for": None,
        "damaged": reason,
    }


async def _sessions(path: str) -> list[dict[str, Any]]:
    """Every session's row; one whose rows are damaged is listed as such, after the others."""
    async with StoreLocation(path).open() as store:
        damaged: tuple[tuple[str, str, str], ...] = ()
        try:
            records = await store.sessions()
        except SessionsDamaged as exc:
            records, damaged = exc.records, exc.damaged
        owners = {lease.session_id: lease.owner for lease in await store.leases()}
        rows = []
        for record in records:
            try:
                events = await store.history(record.session_id) if record.last_seq else ()
                waiting = waits_for(record, events)
            except StoreCorrupt as exc:
                rows.append(_damaged_row(record.session_id, record.machine, str(exc)))
                continue
            row = _row(record, events[-1] if events else None, owners.get(record.session_id))
            row["waits_for"] = None if waiting is None else waiting.describe()
            row["damaged"] = None
            rows.append(row)
        rows += [_damaged_row(*found) for found in damaged]
        return rows


def list_sessions(args: argparse.Namespace) -> ExitStatus:
    """``arkhon-rheo sessions``: every stored session, newest last.

    A session whose stored rows are damaged is listed with status ``damaged``
    and why (after the others); the exit status is then 1.
    """
    with read_only_store(args.store) as path:
        rows = args.run(_sessions, path)
    status = ExitStatus.FAILED if any(row["damaged"] for row in rows) else ExitStatus.OK
    total = len(rows)
    if args.status:
        rows = [row for row in rows if row["status"] in args.status]
    if args.limit:
        rows = rows[-args.limit :]
    if args.json:
        print_json(masked(rows))
        return status
    count = f"{total}" if len(rows) == total else f"{len(rows)} of {total}"
    table = Table(title=shown(f"{count} session{'' if total == 1 else 's'} in {args.store}"))
    # Ids are what a user copies into the next command: never cut; other columns wrap.
    widest = max((len(shown(row["session_id"])) for row in rows), default=7)
    table.add_column("session", no_wrap=True, min_width=widest, overflow="ignore")
    for column, least in _COLUMNS:
        table.add_column(
            column,
            justify="right" if column == "steps" else "left",
            overflow="fold",
            min_width=least,
        )
    for row in rows:
        table.add_row(
            shown(row["session_id"]),
            shown(row["machine"]),
            shown(_status(row)),
            "" if row["steps"] is None else str(row["steps"]),
            "" if row["last_commit"] is None else _when(row["last_commit"]),
            shown(row["exit_reason"]),
            shown(row["waits_for"] or ""),
        )
    console().print(table)
    for row in rows:
        if row["damaged"]:
            console(stderr=True).print(shown(f"arkhon-rheo sessions: {row['damaged']}"))
    return status


async def _history(path: str, session_id: str) -> tuple[SessionRecord, tuple[StoredEvent, ...]]:
    async with StoreLocation(path).open() as store:
        record = await store.record(session_id)
        return record, await store.history(session_id)


async def _session(
    path: str, session_id: str
) -> tuple[SessionRecord, tuple[StoredEvent, ...], str | None]:
    """A session's record, its events, and who holds its live lease (``None``: nobody)."""
    async with StoreLocation(path).open() as store:
        record = await store.record(session_id)
        owners = [lease.owner for lease in await store.leases() if lease.session_id == session_id]
        return record, await store.history(session_id), owners[0] if owners else None


def _session_machine(record: SessionRecord, target: str) -> Machine[Any]:
    """The machine ``target`` names, checked against the session's stored fingerprint.

    Raises:
        CommandError: If it is not the session's machine (exit status 2).
        StoreCorrupt: If the session's stored fingerprint is damaged.
    """
    machine = load_machine(target)
    found = reading(record.session_id, record.fingerprint, fingerprint(machine)).found
    if found:
        raise CommandError(
            f"session {record.session_id!r} runs machine {record.machine!r}, not "
            f"{machine.name!r}: {'; '.join(found)}",
            code=ExitStatus.USAGE,
        )
    return machine


def _waits_line(waiting: WaitsFor, machine: Machine[Any] | None) -> str:
    """The ``waits for`` line of ``show``: what the session waits for, and how to learn more."""
    text = waiting.describe()
    if waiting.kind == "decision" and not waiting.resolved and machine is None:
        text += " (--machine MODULE:ATTR names the field a value goes to)"
    return text


def _calls(event: StoredEvent) -> list[dict[str, Any]]:
    io = event.io if isinstance(event.io, dict) else {}
    calls = io.get("io") or []
    return [call for call in calls if isinstance(call, dict)]


def _call_summary(event: StoredEvent) -> str:
    calls = _calls(event)
    failed = sum(1 for call in calls if "error" in call or call.get("cancelled"))
    kinds: dict[str, int] = {}
    for call in calls:
        kinds[str(call.get("kind"))] = kinds.get(str(call.get("kind")), 0) + 1
    text = ", ".join(f"{kind} x{n}" if n > 1 else kind for kind, n in kinds.items())
    return f"{text} ({failed} failed)" if failed else text


def _event_json(event: StoredEvent) -> dict[str, Any]:
    """The event as JSON data; a sealed sensitive value shows as ``[SENSITIVE]``."""
    data = dataclasses.asdict(event)
    data["reads"], data["writes"] = list(event.reads), list(event.writes)
    shown: dict[str, Any] = masked(data)
    return shown


def show(args: argparse.Namespace) -> ExitStatus:
    """``arkhon-rheo show SESSION``: a session's record, what it waits for, its event history.

    With ``--machine``, checked against the session, a paused session's gate
    names the field an approve value goes to and its type.
    """
    with read_only_store(args.store) as path:
        record, events, owner = args.run(_session, path, args.session)
    row = _row(record, events[-1] if events else None, owner)
    machine = _session_machine(record, args.machine) if args.machine else None
    waiting = waits_for(record, events, machine)
    if args.json:
        print_json(
            {
                "session": row,
                "waits_for": waiting.as_json() if waiting is not None else None,
                "events": [_event_json(event) for event in events],
            }
        )
        return ExitStatus.OK
    out = console()
    out.print(
        styled(
            "session ",
            (record.session_id, "bold"),
            f" of machine {record.machine!r}: {_status(row)}, "
            f"{record.last_seq} event(s), created {_when(record.created_at)}, last commit "
            f"{_when(record.updated_at)}"
            + (f", {_parent_word(record)} {record.parent}" if record.parent else ""),
        )
    )
    if waiting is not None:
        out.print(styled("  waits for ", (_waits_line(waiting, machine), "yellow")))
    table = Table()
    for column in ("seq", "kind", "stage", "from → to", "wrote", "attempt", "calls", "at", "ms"):
        table.add_column(column, justify="right" if column in ("seq", "attempt", "ms") else "left")
    for event in events:
        kind = styled(event.kind)
        if event.error:
            kind = styled(event.kind, " ", (event.error.get("error_type"), "red"))
        table.add_row(
            str(event.seq),
            kind,
            shown(event.stage or ""),
            shown(f"{event.from_state} → {event.to_state}"),
            shown(", ".join(event.writes)),
            str(event.attempt),
            shown(_call_summary(event)),
            datetime.fromtimestamp(event.started_at).strftime("%H:%M:%S.%f")[:-3],
            f"{(event.finished_at - event.started_at) * 1000:.1f}",
        )
    out.print(table)
    return ExitStatus.OK


def _graph_json(graph: StateGraph) -> dict[str, Any]:
    """The ``--json`` answer of ``graph``: the Mermaid text, the visits, every edge."""
    return {
        "mermaid": graph.mermaid(),
        "initial": graph.initial,
        "visits": dict(graph.visits),
        "edges": [
            {
                "from": edge.source,
                "to": edge.target,
                "stages": list(edge.stages),
                "taken": edge.taken,
                "declared": edge.declared,
            }
            for edge in graph.edges
        ],
    }


def graph(args: argparse.Namespace) -> ExitStatus:
    """``arkhon-rheo graph TARGET``: Mermaid of a machine (MODULE:ATTR) or of a session's path."""
    target: str = args.target
    if ":" in target and not args.session:
        drawn = load_machine(target).graph()
    else:
        with read_only_store(args.store) as path:
            record, events = args.run(_history, path, target)
        if args.machine:
            drawn = _session_machine(record, args.machine).graph(events)
        else:
            drawn = StateGraph.from_events(events)
    if args.json:
        print_json(_graph_json(drawn))
        return ExitStatus.OK
    text = drawn.mermaid()
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write(text)
        console(stderr=True).print(shown(f"wrote {args.output} ({time.strftime('%H:%M:%S')})"))
    else:
        console().out(shown(text), end="")
    return ExitStatus.OK


def _parent_word(record: SessionRecord) -> str:
    """How a session's record names its parent: a subgraph's child's, or a fork's source."""
    child = record.session_id.startswith(f"{record.parent}/")
    return "child session of" if child else "forked from"
