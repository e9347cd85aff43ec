"""The errors of an agent's tools and of its model's replies."""

from __future__ import annotations

from ._base import ArkhonError, ConfigurationError
from ._stages import Recoverable

__all__ = ["IsolationUnavailable", "MalformedModelOutput", "ToolError"]


class ToolError(ArkhonError):
    """A tool call failed in a way the model should hear about, in so many words.

    Raise it from a tool to answer the call with exactly this message as an
    error result (an ordinary exception is answered as ``"Type: message"``).
    A sandbox raises it for a crash, a limit kill or refused output.
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
