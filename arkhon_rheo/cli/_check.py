"""``arkhon-rheo check``: would this code read every stored session of its machine?

Before a deploy, run the new code's machine against the store: every session
stored under the machine's name is loaded and replayed as the new code would
(`StoredSession.replay`, then its history): checked against the machine's
fingerprint and upgrades, read in the new form, every stored digest verified.
Nothing is written. Each session is reported ok, or with the reason it would
fail; the exit status is 0 when every one is ok, 1 otherwise. A machine with
`Sensitive` fields is checked with the keyring in ``ARKHON_RHEO_KEY`` (as the
other commands read it): a key missing or wrong is no fault of a session's, so
the command stops there (exit 2, naming the key), as they do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

from .._errors import ArkhonError, KeyringError, SessionsDamaged
from ..core import Keyring
from ..core._seams import reading, version_of
from ..session._seams import compiled
from ..system import AgentSystem
from ._common import ExitStatus, console, print_json, read_only_store, shown, styled
from ._load import load_machine

if TYPE_CHECKING:
    import argparse

    from ..protocols import Machine, SessionRecord

__all__ = ["check", "check_sessions"]


def _reading(machine: Machine[Any], record: SessionRecord, mine: dict[str, Any]) -> str:
    """How the machine reads the session (as first stored): as it is, or through what.

    Raises:
        StoreCorrupt: If its stored fingerprint is damaged (of another shape, or
            JSON schemas that do not read): the session is reported damaged.
    """
    read = reading(record.session_id, record.fingerprint, mine, machine.state_type)
    if read.same:
        return "as stored"
    if read.found:
        return "changed, not declared"
    if read.version != mine["version"]:
        return f"upgraded from version {read.version}"
    return "compatible change"


async def check_sessions(system: AgentSystem, machine: Machine[Any]) -> list[dict[str, Any]]:
    """Load and replay every stored session of ``machine`` (by name); one row per session.

    Each row: ``session_id``, ``status``, ``version`` (the session's, as
    stored), ``reading`` (``"as stored"``, ``"compatible change"``,
    ``"upgraded from version N"``, ``"changed, not declared"`` or
    ``"damaged"``), ``events`` (folded), ``checked`` (digests verified), ``ok``
    and ``reason`` (why it would fail, ``None`` if it would not). A session
    whose stored rows are damaged fails with the `StoreCorrupt` that names it;
    the others are checked all the same.

    Raises:
        KeyringError: If the system's keyring does not open a session's
            sensitive values (no verdict is given on any).
    """
    store = system.store
    assert store is not None
    mine = compiled(machine).fingerprint
    damaged: tuple[tuple[str, str, str], ...] = ()
    try:
        records = await store.sessions()
    except SessionsDamaged as exc:  # each reported below, the others checked
        records, damaged = exc.records, exc.damaged
    rows = []
    for record in records:
        if record.machine != machine.name:
            continue
        row: dict[str, Any] = {
            "session_id": record.session_id,
            "status": record.status,
            "version": version_of(record.fingerprint),
            "reading": "damaged",
            "events": 0,
            "checked": 0,
            "ok": False,
            "reason": None,
        }
        stored = system.stored(machine, record.session_id)
        try:
            row["reading"] = _reading(machine, record, mine)
            report = await stored.replay()
            await stored.history()
        except KeyringError:
            raise  # the keyring given does not open the sessions: no verdict on any
        except ArkhonError as exc:
            row["reason"] = f"{type(exc).__name__}: {exc}"
        else:
            row.update(events=report.events, checked=report.checked, ok=report.ok)
            if report.divergence is not None:
                divergence = report.divergence
                row["reason"] = f"diverges at event {divergence.seq}: {divergence.reason}"
        rows.append(row)
    rows += [
        {
            "session_id": session_id,
            "status": None,
            "version": None,
            "reading": "damaged",
            "events": 0,
            "checked": 0,
            "ok": False,
            "reason": f"StoreCorrupt: {reason}",
        }
        for session_id, name, reason in damaged
        if name == machine.name
    ]
    return rows


def check(args: argparse.Namespace) -> ExitStatus:
    """``arkhon-rheo check --machine MODULE:ATTR``: would every stored session load and verify."""
    machine = load_machine(args.machine)

    async def go(path: str) -> list[dict[str, Any]]:
        async with AgentSystem(path=path, secrets=Keyring.from_env()) as system:
            return await check_sessions(system, machine)

    with read_only_store(args.store) as path:
        rows = args.run(go, path)
    failed = [row for row in rows if not row["ok"]]
    if args.json:
        print_json(
            {
                "machine": machine.name,
                "version": machine.version,
                "sessions": rows,
                "ok": not failed,
                "failed": len(failed),
            }
        )
    else:
        _print(args, machine, rows, len(failed))
    return ExitStatus.FAILED if failed else ExitStatus.OK


def _print(
    args: argparse.Namespace, machine: Machine[Any], rows: list[dict[str, Any]], failed: int
) -> None:
    out = console()
    title = f"machine {machine.name!r} version {machine.version} against {args.store}"
    if not rows:
        out.print(styled(f"no stored session of {title}"))
        return
    table = Table(title=shown(title))
    for column in ("session", "status", "version", "read", "digests", "result"):
        table.add_column(column, justify="right" if column in ("version", "digests") else "left")
    for row in rows:
        result = (
            styled(("ok", "green")) if row["ok"] else styled(("fails: ", "red"), str(row["reason"]))
        )
        table.add_row(
            shown(row["session_id"]),
            shown(row["status"]),
            str(row["version"]),
            row["reading"],
            f"{row['checked']}/{row['events']}",
            result,
        )
    out.print(table)
    if failed:
        out.print(
            styled(
                (f"{failed} of {len(rows)} session(s) would not load under this code", "red"),
                ": declare the change (Machine(version=..., upgrades=...)) and check again",
            )
        )
    else:
        out.print(styled((f"all {len(rows)} session(s) load and verify", "green")))
