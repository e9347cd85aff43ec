"""The checks of `AgentSystem`'s options: each refuses a bad value, saying what it expects."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError
from .._redact import register_secret
from ._record import SessionConfig, StageMode

if TYPE_CHECKING:
    from ..protocols import AgentState, Machine

__all__ = [
    "DEFAULT_KEEP_ENDED",
    "check_budget",
    "check_initial",
    "check_keyring",
    "check_lease_ttl",
    "check_positive",
    "check_snapshot_every",
    "kept",
    "register_redacted",
    "session_config",
]

#: Ended sessions an `AgentSystem` without a store keeps in memory by default.
DEFAULT_KEEP_ENDED = 1000


def check_budget(max_steps: int) -> None:
    """Refuse a step budget that is not a positive integer."""
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigurationError(
            f"max_steps must be a positive integer, got {max_steps!r}: every session needs "
            "a bound on its steps"
        )


def check_snapshot_every(snapshot_every: int | None) -> None:
    """Refuse a snapshot interval that is neither ``None`` nor a positive integer."""
    if snapshot_every is None:
        return
    if isinstance(snapshot_every, bool) or not isinstance(snapshot_every, int):
        raise ConfigurationError(f"snapshot_every must be an integer, got {snapshot_every!r}")
    if snapshot_every < 1:
        raise ConfigurationError(f"snapshot_every must be at least 1, got {snapshot_every}")


def check_lease_ttl(lease_ttl: float) -> float:
    """The lease's time to live in seconds, as a float; refused unless positive."""
    if not (isinstance(lease_ttl, int | float) and lease_ttl > 0):
        raise ConfigurationError(f"lease_ttl must be positive seconds, got {lease_ttl!r}")
    return float(lease_ttl)


def session_config(
    max_steps: int,
    mailbox_capacity: int,
    stage_mode: StageMode | None,
    **overrides: Any,
) -> SessionConfig:
    """The sessions' configuration from `AgentSystem`'s options (checked); ``None`` keeps a default.

    ``stage_mode`` is deprecated: given, it warns, and is otherwise ignored (every
    stage is an actor, asked in its supervisor's task while it is idle).

    Raises:
        ConfigurationError: If ``stage_mode`` is not a `StageMode` or the step budget is wrong.
    """
    if stage_mode is not None:
        if not isinstance(stage_mode, StageMode):
            raise ConfigurationError(f"stage_mode must be a StageMode, got {stage_mode!r}")
        warnings.warn(
            "AgentSystem(stage_mode=...) is deprecated and ignored: every stage is an actor of "
            "its own, asked in its supervisor's task while it is idle (one way to run a stage)",
            DeprecationWarning,
            stacklevel=3,
        )
    check_budget(max_steps)
    config = SessionConfig(max_steps=max_steps, mailbox_capacity=mailbox_capacity)
    return replace(config, **{k: v for k, v in overrides.items() if v is not None})


def check_positive(name: str, value: float, *, integer: bool = False) -> None:
    """Refuse ``value`` for option ``name`` unless it is a positive (integer) number."""
    kinds: type | tuple[type, ...] = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:
        what = "a positive integer" if integer else "a positive number"
        raise ConfigurationError(f"{name} must be {what}, got {value!r}")


def kept(keep_ended: int | None, *, with_store: bool) -> int:
    """How many ended sessions to keep: ``keep_ended`` checked, or the default."""
    if keep_ended is None:
        return 0 if with_store else DEFAULT_KEEP_ENDED
    if isinstance(keep_ended, bool) or not isinstance(keep_ended, int) or keep_ended < 0:
        raise ConfigurationError(
            f"keep_ended must be a non-negative integer (ended sessions kept), got {keep_ended!r}"
        )
    return keep_ended


def check_initial(machine: Machine[Any], state: AgentState) -> None:
    """Refuse a start state that is not of the machine's state type or not in its initial state."""
    if not isinstance(state, machine.state_type):
        raise ConfigurationError(
            f"machine {machine.name!r} runs on {machine.state_type.__name__}, "
            f"got {type(state).__name__}"
        )
    if state.lifecycle is not machine.initial:
        raise ConfigurationError(
            f"a session of {machine.name!r} starts in {machine.initial!r}, "
            f"but the state is in {state.lifecycle!r}"
        )


def check_keyring(secrets: object) -> None:
    """Refuse ``AgentSystem(secrets=...)`` that is neither ``None`` nor a `Keyring`."""
    from ..core import Keyring

    if secrets is not None and not isinstance(secrets, Keyring):
        raise ConfigurationError(
            f"secrets must be a Keyring (Keyring(key)), got {type(secrets).__name__}"
        )


def register_redacted(values: object) -> None:
    """Register each of ``AgentSystem(redact=[...])``'s values for scrubbing (see ``_redact``).

    From then on, in this process, each is masked as ``[REDACTED]`` wherever the
    library writes or shows it: a tool's error before the model sees it, log
    lines, failure records and what the store keeps of them.

    Raises:
        ConfigurationError: If ``values`` is a single string or not an iterable of
            strings, or one of them is shorter than four characters (masking it
            would mangle ordinary text). No value is shown in the message.
    """
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise ConfigurationError(
            f"redact takes a list of secret strings (redact=[token, ...]), got a "
            f"{type(values).__name__}"
        )
    checked: list[str] = []
    for number, value in enumerate(values, start=1):
        if not isinstance(value, str):
            raise ConfigurationError(
                f"redact's value {number} is a {type(value).__name__}; each is a secret string"
            )
        if len(value) < 4:
            raise ConfigurationError(
                f"redact's value {number} is shorter than four characters: too short to mask "
                "without mangling ordinary text (no real key is that short)"
            )
        checked.append(value)
    for value in checked:
        register_secret(value)
