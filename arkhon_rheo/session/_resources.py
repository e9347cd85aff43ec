"""`Resources`: what an agent system opens of its machines' resources, once each, until it stops.

A machine declares named resources (``Machine(resources=...)``; `react_agent`
declares its model client). Before the system stores, resumes or launches a
session it opens every resource of the machine (and of the machines its
subgraph stages run) that is an async context manager, does not report itself
open (``is_open``) unless it counts its opens (``counts_opens``: a model
client, which other systems may hold open at the same time), and is not open
here already: each object once, by identity, however many machines or sessions
share it.

Each resource is entered and left by a keeper task of its own in the system's
task group, not by the caller's task: a resource whose ``async with`` opens a
cancel scope or a task group (an MCP session, a connection pool with a
background task) must be left by the task that entered it, and `start` may be
called from any task (a web request's) while the system is left by the task
that entered it. The keepers leave their resources when the system stops,
after its sessions have.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import ResourceUnavailable, SystemNotRunning
from .._log import get_logger
from .._redact import scrub
from ..protocols._seams import is_async_context_manager
from ._subgraph import SubgraphStage

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

    from anyio.abc import TaskGroup, TaskStatus

    from ..protocols import Machine

__all__ = ["Resources"]

_logger = get_logger("arkhon_rheo.system")


def reports_open(resource: object) -> bool:
    """Whether ``resource`` says it is open already (its ``is_open`` is ``True``).

    A resource that may be entered by its user (like `OpenAIChatClient`) tells
    the system so with an ``is_open`` attribute; the system enters only the
    resources that do not report themselves open.
    """
    return getattr(resource, "is_open", False) is True


def counts_opens(resource: object) -> bool:
    """Whether ``resource`` counts its opens (its ``counts_opens`` is ``True``).

    Such a resource (like `OpenAIChatClient`) may be entered by any number of
    users at once and stays open until the last of them leaves it, so the
    system enters it even when it reports itself open: a client opened by its
    user or by another system stays open while this system needs it.
    """
    return getattr(resource, "counts_opens", False) is True


def _not_running() -> SystemNotRunning:
    return SystemNotRunning(
        "cannot open a machine's resources: the agent system is not running; "
        "start sessions inside its `async with` block"
    )


def _subgraphs(machine: Machine[Any]) -> Iterator[Machine[Any]]:
    for stage in machine.stages.values():
        child = getattr(stage, "machine", None) if issubclass(stage, SubgraphStage) else None
        if child is not None:
            yield child


def _declared(machine: Machine[Any], seen: set[int] | None = None) -> Iterator[tuple[str, object]]:
    """The machine's resources to open, then its subgraphs' (each machine once)."""
    seen = set() if seen is None else seen
    if id(machine) in seen:
        return
    seen.add(id(machine))
    for name, resource in machine.resources.items():
        if is_async_context_manager(resource):
            yield name, resource
    for child in _subgraphs(machine):
        yield from _declared(child, seen)


class Resources:
    """The resources one agent system opened, kept open until it stops.

    Args:
        close_timeout: Seconds each resource may take to close when the system stops.
    """

    __slots__ = ("_close_timeout", "_closing", "_failures", "_group", "_held", "_lock")

    def __init__(self, close_timeout: float) -> None:
        self._close_timeout = close_timeout
        self._held: dict[int, object] = {}  # by id; the object is kept, so its id stays its own
        self._lock: anyio.Lock | None = None
        self._group: TaskGroup | None = None
        self._closing: anyio.Event | None = None
        self._failures: list[BaseException] = []

    def __len__(self) -> int:
        """How many resources the system holds open."""
        return len(self._held)

    async def __aenter__(self) -> Resources:
        """Start holding resources: from now on `open` may open them."""
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group, self._closing, self._lock = group, anyio.Event(), anyio.Lock()
        self._failures = []
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Close every resource opened here (each in its keeper task), then stop holding them.

        Raises:
            Exception: The first error a resource raised while closing, if the
                block raised none (every one is logged).
        """
        group, closing = self._group, self._closing
        assert group is not None
        assert closing is not None
        self._group = None
        closing.set()
        try:
            # The keepers raise nothing (each closes within its deadline, shielded),
            # so the group is left as if the block raised nothing: the block's own
            # error then goes on as it was raised, in no group of ours.
            await group.__aexit__(None, None, None)
        finally:
            self._held.clear()
        if self._failures and exc is None:
            raise self._failures[0]
        return None

    async def open(self, machine: Machine[Any]) -> None:
        """Open every resource of ``machine`` (and its subgraphs') not open yet.

        Raises:
            ResourceUnavailable: If one fails to open (its error is the cause);
                those opened before it stay open.
            SystemNotRunning: Outside the system's ``async with`` block.
        """
        if not any(self._wanted(resource) for _, resource in _declared(machine)):
            return
        lock = self._lock
        if lock is None:
            raise _not_running()
        async with lock:
            for name, resource in _declared(machine):
                if self._wanted(resource):
                    await self._open(machine, name, resource)

    def _wanted(self, resource: object) -> bool:
        if id(resource) in self._held:
            return False
        return counts_opens(resource) or not reports_open(resource)

    async def _open(self, machine: Machine[Any], name: str, resource: object) -> None:
        group = self._group
        if group is None:
            raise _not_running()
        try:
            await group.start(self._keep, name, resource)
        except Exception as exc:
            cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise ResourceUnavailable(
                scrub(
                    f"resource {name!r} of machine {machine.name!r} could not be opened "
                    f"({cause}); nothing was started or stored: fix the resource and try again"
                ),
                resource=name,
                machine=machine.name,
            ) from exc
        _logger.debug("resource_opened", resource=name, machine=machine.name)

    async def _keep(
        self, name: str, resource: Any, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Enter ``resource``, report it open, and leave it when the system stops.

        Its whole life is inside one cancel scope of this task (a resource that
        opens scopes of its own must leave them in the order they were
        entered): shielded once the resource is open, so that it closes when
        the system stops and not before, and given a deadline then.
        """
        closing = self._closing
        assert closing is not None
        with anyio.CancelScope() as scope:
            await resource.__aenter__()  # what it returns is not used: the machine holds it
            self._held[id(resource)] = resource  # even if the caller is cancelled from here on
            task_status.started()
            scope.shield = True
            await closing.wait()
            if math.isfinite(self._close_timeout):
                scope.deadline = anyio.current_time() + self._close_timeout
            try:
                await resource.__aexit__(None, None, None)
            except Exception as exc:
                _logger.warning("resource_close_failed", resource=name, error=scrub(repr(exc)))
                self._failures.append(exc)
        if scope.cancelled_caught:
            _logger.warning("resource_close_timeout", resource=name, timeout=self._close_timeout)
