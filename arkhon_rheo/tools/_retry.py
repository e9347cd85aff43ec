"""A tool call that keeps failing: the options and the backoff of its retries.

A tool that raises `Transient` (a rate limit, a service that is down for a
moment) or runs past its timeout (`ToolTimeout`) is tried again by the
`Toolbox`, within the call, after a backoff: ``@tool(retries=...)`` times.
What happens when those retries are used up is the tool's ``on_exhausted``
(or, for a tool that does not say, its caller's: the ReAct engine's
``tool_failures``):

- ``"observe"``: the call is answered with an error result, ``"Error after N
  attempts: <message>"`` (scrubbed of secrets), and the model decides what to
  do (another tool, other arguments, an answer without it). The answer is the
  call's recorded response: a replay gives the model the same observation.
- ``"escalate"``: the failure goes to the supervisor at once (no retries here):
  its backoff retries the step, its restarts follow, and at last the session
  fails; as every tool did before this option.

The once-only rule: only a failure that says the call did not happen becomes
an observation. A `Transient` the tool raised itself did not happen (its effect
ledger entry is marked failed, so the next attempt may run). A timeout of a
read-only tool changed nothing. A timeout of a tool with side effects (effect
``idempotent``, ``ask`` or ``fail``) leaves its effect ambiguous: it may have
happened; it is never turned into an error result (the model could then make
a new call, under a new idempotency key, and the effect happen twice). It
escalates as before, and the effect ledger decides on the next attempt by the
tool's effect (run again under the same key, ask a human, or fail).
"""

from __future__ import annotations

import math
import random
from typing import Literal

from .._errors import ConfigurationError, ToolTimeout, Transient
from ._effects import Effect

__all__ = [
    "ESCALATE",
    "OBSERVE",
    "OnExhausted",
    "backoff_delay",
    "observes",
    "on_exhausted_of",
    "retries_of",
]

#: What a tool call that keeps failing transiently gets after its retries.
OnExhausted = Literal["observe", "escalate"]
OBSERVE: OnExhausted = "observe"
ESCALATE: OnExhausted = "escalate"

#: The first ceiling of a retry's wait, and the largest, in seconds (the
#: supervisor's default backoff: full jitter, doubling).
_BASE = 0.1
_CAP = 10.0

#: Jitter only: what a call waits is not recorded and changes no outcome.
_jitter = random.Random()


def on_exhausted_of(value: object, *, tool: str | None) -> OnExhausted:
    """``value`` as an `OnExhausted`.

    Raises:
        ConfigurationError: It is neither ``"observe"`` nor ``"escalate"``.
    """
    if value == OBSERVE:
        return OBSERVE
    if value == ESCALATE:
        return ESCALATE
    where = f"tool {tool!r}: " if tool is not None else ""
    raise ConfigurationError(
        f"{where}on_exhausted must be 'observe' (the model hears the error) or 'escalate' "
        f"(the supervisor retries the step, then fails the session), got {value!r}"
    )


def observes(on_exhausted: OnExhausted, effect: Effect, failure: Transient) -> bool:
    """Whether a transient failure is observed (else it escalates), by the once-only rule.

    By ``on_exhausted``, except a timeout of a tool with side effects: it
    escalates whatever ``on_exhausted`` says (see the module's docstring).
    `Toolbox` decides so for a Python tool, `MCPToolbox` for a server's tool.
    """
    if on_exhausted == ESCALATE:
        return False
    return not (isinstance(failure, ToolTimeout) and effect is not Effect.READ)


def retries_of(value: object, *, tool: str) -> int:
    """``value`` as a number of retries.

    Raises:
        ConfigurationError: It is not an int >= 0.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(
            f"tool {tool!r}: retries must be an int >= 0 (the attempts after the first), "
            f"got {value!r}"
        )
    return value


def backoff_delay(attempt: int, at_least: float | None = None) -> float:
    """The wait after failed attempt ``attempt`` (from 1): full jitter, doubling, capped.

    ``at_least`` (a failure's ``retry_after``) is honoured even above the cap.
    """
    drawn = _jitter.uniform(0.0, min(_CAP, _BASE * 2 ** (attempt - 1)))
    if at_least is not None and math.isfinite(at_least) and at_least > drawn:
        return at_least
    return drawn
