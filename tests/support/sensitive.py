"""A machine whose state holds secrets (`Sensitive` fields), for the tests that look for them.

``vault`` logs in with the token it starts with (sent in a recorded model
request), exchanges it for a new one at a recorded tool (the new token comes
back in the response and is written in the same step), fails twice with the
token in its error (transient, then recoverable), then pauses at a gate whose
question quotes the token, and finishes once approved. Every secret it
handles is one of `SECRETS`: a test looks for each, and finds none, in whatever
must not show them.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

from arkhon_rheo import (
    AgentState,
    Gate,
    History,
    Machine,
    Patch,
    Recoverable,
    StateView,
    Transient,
    record_call,
    stage,
)
from arkhon_rheo.protocols import Sensitive

#: The token a session starts with.
TOKEN = "tok-7f3a9c2e51b84d60"
#: The token the exchange tool hands back (written in the step that gets it).
NEW_TOKEN = "tok-n3w5b6c7d8e9f012"
#: A PIN (a sensitive number).
PIN = 482_913_7
#: A note appended to a sensitive sequence.
NOTE = "note-c0ffee-4242-secret"
#: Every secret, as the text it would show up as.
SECRETS = (TOKEN, NEW_TOKEN, str(PIN), NOTE)


class V(enum.Enum):
    START = "start"
    EXCHANGE = "exchange"
    CHECK = "check"
    SEND = "send"
    DONE = "done"
    FAILED = "failed"


class Vault(AgentState):
    lifecycle: V = V.START
    user: str = "ann"
    token: Annotated[str, Sensitive()] = ""
    pin: Annotated[int, Sensitive()] = 0
    notes: Annotated[History[str], Sensitive()] = History()
    reply: str = ""
    checked: int = 0


#: How many times each session's `check` failed: it fails twice in each (a transient
#: failure, retried, then a recoverable one, restarted), then passes.
FAILURES: dict[str, int] = {}


async def _model(user: str) -> dict[str, Any]:
    return {"text": f"hello {user}"}


async def _exchange() -> dict[str, Any]:
    return {"new": NEW_TOKEN, "expires": 3600}


@stage(reads={"token", "user"}, writes={"reply", "notes"}, next=V.EXCHANGE)
async def login(view: StateView[Vault]) -> Patch:
    request = {"authorization_header": f"Token {view.token}", "user": view.user}
    reply = await record_call("model", request, lambda: _model(view.user), returns=dict)
    return Patch(reply=reply["text"]).append("notes", NOTE)


@stage(reads={"token"}, writes={"token", "pin"}, next=V.CHECK)
async def exchange(view: StateView[Vault]) -> Patch:
    answer = await record_call("tool:exchange", {"old": view.token}, _exchange, returns=dict)
    return Patch(token=answer["new"], pin=PIN)


@stage(reads={"token", "session_id", "checked"}, writes={"checked"}, next=V.SEND)
async def check(view: StateView[Vault]) -> Patch:
    failed = FAILURES.get(view.session_id, 0)
    if failed < 2:
        FAILURES[view.session_id] = failed + 1
        kind = Transient if failed == 0 else Recoverable
        raise kind(f"the bank refused token {view.token} (pin check)")
    return Patch(checked=view.checked + 1)


@stage(reads={"user"}, writes={"reply"}, next=V.DONE)
async def send(view: StateView[Vault]) -> Patch:
    return Patch(reply=f"sent for {view.user}")


def _question(state: Vault) -> str:
    return f"send with token {state.token} for {state.user}?"


def vault_machine() -> Machine[Vault]:
    """START -> EXCHANGE -> CHECK -> (gate) SEND -> DONE."""
    return Machine(
        name="vault",
        state_type=Vault,
        initial=V.START,
        transitions={
            V.START: {V.EXCHANGE},
            V.EXCHANGE: {V.CHECK},
            V.CHECK: {V.SEND},
            V.SEND: {V.DONE},
        },
        stages={V.START: login, V.EXCHANGE: exchange, V.CHECK: check, V.SEND: send},
        terminal={V.DONE, V.FAILED},
        failed=V.FAILED,
        gates=[Gate.before("send", question=_question)],
    )


vault = vault_machine()
