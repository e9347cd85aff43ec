"""The fault-injection seam: where the library asks an installed injector for faults.

Four places consult it: a session's stage just before it runs (target
``"stage:<name>"``), a `Toolbox` call before the tool runs (``"tool:<name>"``),
the ReAct engine's model call (``"model"``) and a store's write (``"store"``).
Each reads one context variable and goes on at once when it is ``None``: with
no injector installed, the seam costs one ``ContextVar.get`` and an ``is None``
check. `arkhon_rheo.testing.FaultPlan` is the injector users install; this
module holds the contract and the context variables, low enough that every
layer that calls out can hold the seam.

An injector acts a fault out itself (raises, sleeps, hangs) and may return a
function that alters the call's result (a model reply made malformed).
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

__all__ = [
    "FaultInjector",
    "current_injector",
    "current_session",
    "enter_session",
    "install",
    "installed",
    "uninstall",
]


class FaultInjector(Protocol):
    """What the library's seams call when an injector is installed."""

    async def inject(
        self, target: str, session_id: str | None, detail: Mapping[str, Any]
    ) -> Callable[[Any], Any] | None:
        """Act out the fault planned for this call of ``target``, if any.

        Args:
            target: ``"stage:<name>"``, ``"tool:<name>"``, ``"model"`` or ``"store"``.
            session_id: The session making the call, when known.
            detail: What identifies the call (a tool's arguments, a store operation).

        Returns:
            ``None``, or a function the seam applies to the call's result.
        """
        ...


_INJECTOR: ContextVar[FaultInjector | None] = ContextVar("arkhon_rheo_faults", default=None)
_SESSION: ContextVar[str | None] = ContextVar("arkhon_rheo_fault_session", default=None)

#: The installed injector (``None`` almost always): ``current_injector()``.
current_injector = _INJECTOR.get
#: The session whose stage runs in this task, as its supervisor or the stage seam noted it.
current_session = _SESSION.get


def enter_session(session_id: str) -> None:
    """Note the session whose stage runs in this task.

    A session's supervisor calls it as it starts (its stages' tasks inherit
    it), and so does the stage seam while an injector is installed; tool and
    model seams deeper in the same task read it, and so does `ScriptedModel`
    (which answers each session by its own place in the script).
    """
    if _SESSION.get() != session_id:
        _SESSION.set(session_id)


def install(injector: FaultInjector | None) -> Any:
    """Install ``injector`` in this context; returns the token to reset it with."""
    return _INJECTOR.set(injector)


def uninstall(token: Any) -> None:
    """Undo `install`."""
    _INJECTOR.reset(token)


@contextlib.contextmanager
def installed(injector: FaultInjector | None) -> Iterator[None]:
    """Install ``injector`` for the block; ``None`` leaves whatever is installed."""
    if injector is None:
        yield
        return
    token = _INJECTOR.set(injector)
    try:
        yield
    finally:
        _INJECTOR.reset(token)
