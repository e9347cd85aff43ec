"""The command line's error: what it prints, and the exit status it ends with."""

from __future__ import annotations

from ._base import ArkhonError

__all__ = ["CommandError"]


class CommandError(ArkhonError):
    """A command of ``arkhon-rheo`` cannot go on; its message says why and what to do.

    Attributes:
        code: The exit status the command ends with (an ``Exit`` of the command line).
    """

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code
