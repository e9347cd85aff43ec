"""The errors of an agent's tools and of its model's replies."""

from __future__ import annotations

from ._base import ArkhonError, ConfigurationError
from ._stages import Fatal, Recoverable

__all__ = [
    "AmbiguousEffect",
    "AnswerUnavailable",
    "IsolationUnavailable",
    "MalformedModelOutput",
    "ToolCallHeld",
    "ToolError",
]


class ToolError(ArkhonError):
    """A tool call failed in a way the model should hear about, in so many words.

    Raise it from a tool to answer the call with exactly this message as an
    error result (an ordinary exception is answered as ``"Type: message"``).
    A sandbox raises it for a crash, a limit kill or refused output.
    """


class AnswerUnavailable(ArkhonError, ValueError):
    """A ReAct agent's typed answer was asked for and there is none of that type.

    ``ReactState.output_as(T)`` raises it when the agent has no answer (not
    yet, or it ended without one: stopped, out of steps) or when its answer does
    not validate as ``T`` (another type than the agent's ``answer_type``, or the
    plain text of an agent built without one). The message says which.
    """


class IsolationUnavailable(ConfigurationError):
    """A sandbox with ``isolation="require"`` cannot isolate its tool on this machine.

    The message says what is missing (bubblewrap, Linux, permission to create
    namespaces) and how to get it. Nothing was run.
    """


class MalformedModelOutput(Recoverable):
    """The model kept answering in a form the engine cannot use, past its format retries.

    Attributes:
        problem: What was wrong with the last reply.
    """

    def __init__(self, problem: str, *, retries: int) -> None:
        super().__init__(
            f"the model's reply could not be used after {retries} format retries: {problem}; "
            "check that the model supports tool calls (and JSON mode, if asked), or raise "
            "max_format_retries"
        )
        self.problem = problem


class ToolCallHeld(Fatal):
    """A tool call may not run before a human decides: it is held at a gate.

    A `Toolbox` raises it for a call of a tool whose run policy asks for approval
    (``reason="approval"``), and for a call whose side effect started and never
    finished, of a tool whose crash policy asks a human (``reason="ambiguous"``).
    A ReAct agent catches it: the session pauses at its ``"tool call"`` gate,
    showing the call's arguments. Anywhere else it fails the session (it is
    `Fatal`). Its ``args`` are ``(message, reason, attempts)``, all JSON, so a
    replay rebuilds it as recorded.

    Attributes:
        reason: ``"approval"`` or ``"ambiguous"``.
        attempts: How many times an ambiguous call was begun (0 for an approval).
    """

    def __init__(self, message: str, reason: str = "approval", attempts: int = 0) -> None:
        super().__init__(message)
        self.args = (message, reason, attempts)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    @property
    def reason(self) -> str:
        """Why the call is held: ``"approval"`` or ``"ambiguous"``."""
        return str(self.args[1]) if len(self.args) > 1 else "approval"

    @property
    def attempts(self) -> int:
        """How many times an ambiguous call was begun, as its effect ledger says."""
        return int(self.args[2]) if len(self.args) > 2 else 0


class AmbiguousEffect(Fatal):
    """A side effect started and never finished, and its tool says to fail rather than guess.

    The call's intent is in the session's effect ledger with no outcome: its
    process died while it ran (or it ran past its timeout), so it may or may not
    have happened. A tool declared ``effect="fail"`` fails the session then,
    never running the call twice.

    Attributes:
        tool: The tool.
        key: The call's idempotency key.
    """

    def __init__(self, *, tool: str, key: str) -> None:
        super().__init__(
            f"tool {tool!r}: a call (idempotency key {key!r}) started and never finished, so "
            "its side effect may or may not have happened; the tool's policy (effect='fail') "
            "fails the session rather than run it twice. Check the effect in the world, then "
            "fork or roll the session back; declare effect='idempotent' (run again) or "
            "effect='ask' (pause for a human) to go on by yourself"
        )
        self.tool = tool
        self.key = key
