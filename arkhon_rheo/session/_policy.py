"""Failure policies as pure functions of ``now`` and a seeded RNG: classify, back off, restart.

Nothing here touches an event loop, so every rule is testable without one.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._errors import (
    ConfigurationError,
    ContractViolation,
    Fatal,
    InvalidPatch,
    Recoverable,
    RestartIntensityExceeded,
    StageTimeout,
    StoreError,
    Transient,
)
from ..protocols import ErrorClass

if TYPE_CHECKING:
    import random
    from collections.abc import Iterable, Mapping, Sequence

__all__ = ["Backoff", "Classifier", "RestartIntensity", "RestartStrategy", "RestartWindow"]


class Classifier:
    """Maps an exception to its `ErrorClass`.

    The order of precedence: the `Transient`/`Recoverable`/`Fatal` an exception
    is (wrap a third-party error with ``raise Transient(...) from exc``); then,
    walking its MRO from the most specific class, the first class with a
    registered rule or a framework default (contract violations and store
    failures are fatal, except an invalid patch value, which is recoverable;
    timeouts are transient); then ``default``. Only ``Exception`` is ever classified:
    cancellation always propagates.

    Args:
        rules: Exception types and the class each maps to.
        default: The class of anything else (recoverable: restart and go on).
    """

    _BUILTIN: Mapping[type[BaseException], ErrorClass] = {
        InvalidPatch: ErrorClass.RECOVERABLE,
        ContractViolation: ErrorClass.FATAL,
        RestartIntensityExceeded: ErrorClass.FATAL,
        StoreError: ErrorClass.FATAL,
        StageTimeout: ErrorClass.TRANSIENT,
        TimeoutError: ErrorClass.TRANSIENT,
    }

    def __init__(
        self,
        rules: Mapping[type[BaseException], ErrorClass] | None = None,
        *,
        default: ErrorClass = ErrorClass.RECOVERABLE,
    ) -> None:
        self._rules: dict[type[BaseException], ErrorClass] = {}
        self.default = default
        for exc_type, error_class in (rules or {}).items():
            self.register(exc_type, error_class)

    def register(self, exc_type: type[BaseException], error_class: ErrorClass) -> None:
        """Map ``exc_type`` (and its subclasses) to ``error_class``.

        Raises:
            ConfigurationError: If ``exc_type`` is not an ``Exception`` subclass (cancellation
                and other ``BaseException``s are never classified) or the class is not an
                `ErrorClass`.
        """
        if not (isinstance(exc_type, type) and issubclass(exc_type, Exception)):
            raise ConfigurationError(
                f"only Exception subclasses can be classified, got {exc_type!r}; "
                "cancellation always propagates"
            )
        if not isinstance(error_class, ErrorClass):
            raise ConfigurationError(f"expected an ErrorClass, got {error_class!r}")
        self._rules[exc_type] = error_class

    def classify(self, exc: Exception) -> ErrorClass:
        """Return how the supervisor should treat ``exc``."""
        explicit = _explicit(exc)
        if explicit is not None:
            return explicit
        # The most specific class wins; at the same class a registered rule beats
        # the framework's default, so ``{Exception: ...}`` cannot turn a contract
        # violation into a retry.
        for klass in type(exc).__mro__:
            if klass in self._rules:
                return self._rules[klass]
            if klass in self._BUILTIN:
                return self._BUILTIN[klass]
        return self.default


def _explicit(exc: BaseException) -> ErrorClass | None:
    if isinstance(exc, Fatal):
        return ErrorClass.FATAL
    if isinstance(exc, Recoverable):
        return ErrorClass.RECOVERABLE
    if isinstance(exc, Transient):
        return ErrorClass.TRANSIENT
    return None


@dataclass(frozen=True, slots=True)
class Backoff:
    """Bounded exponential backoff with full jitter, for transient failures.

    Attempt ``n`` (1-based) that failed waits a uniform random time in
    ``[0, min(cap, base * 2 ** (n - 1))]`` before attempt ``n + 1``. After
    ``max_attempts`` failed attempts the failure escalates to recoverable.

    Attributes:
        base: The first ceiling, in seconds.
        cap: The largest ceiling, in seconds.
        max_attempts: How many attempts in all, the first included.
    """

    base: float = 0.1
    cap: float = 10.0
    max_attempts: int = 3

    def __post_init__(self) -> None:
        if not (self.base >= 0 and self.cap >= 0 and math.isfinite(self.cap)):
            raise ConfigurationError(
                f"backoff base and cap must be finite non-negative seconds, got {self}"
            )
        if isinstance(self.max_attempts, bool) or self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be at least 1, got {self.max_attempts}")

    def delay(self, attempt: int, rng: random.Random, *, at_least: float | None = None) -> float:
        """The wait after failed attempt ``attempt`` (1-based), drawn from ``rng``.

        Args:
            attempt: The attempt that failed, from 1.
            rng: The session's seeded RNG (the jitter).
            at_least: A minimum wait the failure asked for (`Transient.retry_after`,
                from a rate limit's ``Retry-After``). It is honoured even above
                ``cap``: retrying sooner would only be refused again.
        """
        ceiling = min(self.cap, self.base * 2 ** (attempt - 1))
        drawn = rng.uniform(0.0, ceiling)
        if at_least is not None and math.isfinite(at_least) and at_least > drawn:
            return at_least
        return drawn


class RestartStrategy(enum.Enum):
    """Which stage actors of a session restart when one of them fails (as in OTP)."""

    #: Only the failed stage's actor.
    ONE_FOR_ONE = "one_for_one"
    #: Every stage actor of the session.
    ONE_FOR_ALL = "one_for_all"
    #: The failed one and every one started after it (the machine's stage order).
    REST_FOR_ONE = "rest_for_one"

    def affected(self, order: Sequence[str], failed: str) -> list[str]:
        """The names of the stages to restart, in start order, each named once.

        A name repeated in ``order`` (one stage serving several states) counts at
        its first place.

        Raises:
            ConfigurationError: If ``failed`` is not in ``order``.
        """
        if failed not in order:
            raise ConfigurationError(f"unknown stage {failed!r}; stages are {list(order)}")
        order = list(dict.fromkeys(order))
        if self is RestartStrategy.ONE_FOR_ONE:
            return [failed]
        if self is RestartStrategy.ONE_FOR_ALL:
            return list(order)
        return list(order[order.index(failed) :])


@dataclass(frozen=True, slots=True)
class RestartIntensity:
    """At most ``max_restarts`` restarts within ``within`` seconds; one more escalates.

    Attributes:
        max_restarts: Restarts allowed in the window.
        within: The window, in seconds.
    """

    max_restarts: int = 3
    within: float = 5.0

    def __post_init__(self) -> None:
        if isinstance(self.max_restarts, bool) or self.max_restarts < 0:
            raise ConfigurationError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if not self.within > 0:
            raise ConfigurationError(f"the restart window must be positive, got {self.within}")

    def window(self) -> RestartWindow:
        """A fresh tracker for this intensity."""
        return RestartWindow(self)


class RestartWindow:
    """Tracks restart times and says when the intensity is exceeded.

    Its queue of times is made at the first restart: most sessions never
    restart, and an empty ``deque`` is most of a kilobyte each.
    """

    __slots__ = ("_intensity", "_times")

    def __init__(self, intensity: RestartIntensity, times: Iterable[float] = ()) -> None:
        self._intensity = intensity
        self._times: deque[float] | None = deque(times) or None

    def allow(self, now: float) -> bool:
        """Record a restart at ``now``; false if it exceeds the intensity (not recorded then)."""
        horizon = now - self._intensity.within
        times = self._times
        if times is None:
            times = self._times = deque()
        while times and times[0] <= horizon:
            times.popleft()
        if len(times) >= self._intensity.max_restarts:
            return False
        times.append(now)
        return True

    def __len__(self) -> int:
        return 0 if self._times is None else len(self._times)
