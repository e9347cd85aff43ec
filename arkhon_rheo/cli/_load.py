"""``MODULE:ATTR``: the user's machine, loaded as the command line and the inspector load it.

The loader is the package's one (the leaf ``_load``), which the inspector and
the crash harness use too; here it loads a `Machine`, with the command line's
one-line errors (`CommandError`, its exit status).
"""

from __future__ import annotations

from typing import Any

from .._load import load_target
from ..protocols import Machine

__all__ = ["load_machine"]


def load_machine(target: str) -> Machine[Any]:
    """The `Machine` named by ``MODULE:ATTR``: the attribute, or what calling it returns.

    Raises:
        CommandError: If the target is malformed (2), is missing (3), is neither
            a machine nor a factory of one taking no arguments (2), or if the
            user's module or factory raised (1: the exception is the cause).
    """
    machine: Machine[Any] = load_target(target, Machine)
    return machine
