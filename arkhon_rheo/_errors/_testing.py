"""The error of the crash harness (`arkhon_rheo.testing.crash_loop`)."""

from __future__ import annotations

from ._base import ArkhonError

__all__ = ["CrashRunFailed"]


class CrashRunFailed(ArkhonError):
    """The child process of a `crash_loop` failed on its own, not by the kill.

    The message carries the end of the child's output (its traceback, usually).

    Attributes:
        output: The child's stdout and stderr.
    """

    def __init__(self, problem: str, output: str) -> None:
        tail = output[-4000:]
        super().__init__(f"{problem}; the child's output ends:\n{tail}")
        self.output = output
