"""A helper for facade modules: make re-exported names report the public module."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["publish"]


def publish(
    module: str,
    names: Iterable[str],
    namespace: Mapping[str, object],
    *,
    private: str | None = None,
) -> None:
    """Set ``__module__`` of each re-exported class or function to ``module``.

    Tracebacks and reprs then say ``arkhon_rheo.actors.ActorRef`` rather than the
    private file it lives in, as trio's and httpx's facades do. Only names from
    the facade's own private modules are touched, so a name re-exported from a
    public subpackage keeps that subpackage as its one home.

    Args:
        module: The public module's name (``__name__`` of the facade).
        names: The facade's ``__all__``.
        namespace: The facade's ``globals()``.
        private: The private package whose names the facade claims, when it is
            not the facade's own (``arkhon_rheo.errors`` claims ``arkhon_rheo._errors``).
    """
    prefix = (private + ".") if private is not None else module + "._"
    for name in names:
        obj = namespace[name]
        if getattr(obj, "__module__", "").startswith(prefix):
            with contextlib.suppress(AttributeError, TypeError):  # e.g. typing aliases
                obj.__module__ = module
