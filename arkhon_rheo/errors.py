"""The whole exception tree of arkhon-rheo.

Every error the library raises on purpose derives from one base, so callers can
catch the lot with ``except ArkhonError``, or one branch at a time::

    ArkhonError
    ├── ConfigurationError        a value passed to a constructor or call is wrong
    │   ├── IsolationUnavailable  a sandbox that requires isolation cannot have it here
    │   └── KeyringError          no keyring, or not the key a sensitive value was sealed with
    ├── SystemNotRunning          the actor system is not inside its ``async with``
    ├── ResourceUnavailable       a machine's resource could not be opened (nothing started)
    ├── MailboxError              a mailbox could not take or give a message
    │   ├── MailboxFull           no room, and the caller would not wait
    │   └── MailboxClosed         the mailbox no longer accepts messages
    ├── ActorError                an operation on an actor failed
    │   ├── ActorStopped          the actor has terminated (or is draining)
    │   └── AskTimeout            no reply arrived within the ask's timeout
    ├── StageFailure              raised by stages to classify their own failure
    │   ├── Transient             retry after a backoff
    │   │   └── ToolTimeout       a tool ran past its timeout (a sandboxed one is killed)
    │   ├── Recoverable           restart the stage, record the error, go on
    │   │   ├── SubgraphFailed    a subgraph's child session ended without finishing
    │   │   └── MalformedModelOutput  the model's replies stayed unusable (react)
    │   └── Fatal                 fail the session
    │       ├── ToolCallHeld      a tool call waits for a human (react: the "tool call" gate)
    │       └── AmbiguousEffect   a side effect may have happened; its tool says fail
    ├── ContractViolation         the supervisor refused what a stage did
    │   ├── UndeclaredRead        read a field outside the read set
    │   ├── ReadOnlyState         tried to change the state through its view
    │   ├── UndeclaredWrite       patch writes a field outside the write set
    │   ├── InvalidPatch          a written value fails its field's validation
    │   ├── PreconditionFailed    the state does not meet a stage's precondition
    │   ├── InvariantViolation    a state would break an invariant of its lifecycle
    │   │   └── TransitionInvariantViolation  ...or of the transition that reaches it
    │   └── IllegalTransition     the machine does not allow the chosen transition
    ├── StageTimeout              a stage overran its state's deadline
    ├── RestartIntensityExceeded  too many restarts in the window: escalates to fatal
    ├── RecordedCallFailed        a recorded call failed; replayed, its class not rebuilt
    ├── ToolError                 a tool's error answer to the model, in so many words
    ├── AnswerUnavailable         no typed answer of the type asked (react: output_as)
    ├── SessionError              a session could not be started or run
    │   ├── SessionBusy           it runs in this system, or another call here changes it
    │   ├── SessionNotFound       no session has that id
    │   ├── MessageRefused        a message's kind or payload is not one the session takes
    │   ├── NoReply               an ask timed out, or the session ended before its message
    │   ├── PoisonSession         claimed again and again without a commit: failed, not rerun
    │   └── ReplayDiverged        a re-executed stage called out unlike the recorded run
    ├── StoreError                the store failed, or refused what was asked
    │   ├── StoreUnavailable      unreachable, or the connection dropped: the run stops, resumable
    │   ├── StoreUpgrading        another process upgrades the file's schema: waited, not done
    │   ├── StoreCorrupt          not our file, another schema version, or damaged
    │   │   └── SessionsDamaged   some sessions' records are damaged: the rest listed in it
    │   ├── DuplicateEvent        an event number is taken or out of order
    │   ├── UnserializablePatch   a patch value cannot be stored (refused before commit)
    │   ├── UnrecordableCall      a recorded call's request or response cannot be stored
    │   ├── InboxFull             a session's inbox is full: the message was not stored
    │   ├── SessionLocked         another owner holds the session's lease
    │   └── LeaseLost             a write's owner lost its lease to another: stop driving
    ├── CommandError              a command of ``arkhon-rheo`` cannot go on (its exit status)
    └── CrashRunFailed            a `crash_loop` child failed on its own, not by the kill

An exception raised by an actor's own handler during an ``ask`` is not wrapped:
it is re-raised at the caller as it is, with a note naming the actor.

Classification (`Transient`, `Recoverable`, `Fatal`) applies to ``Exception``
only: cancellation is never classified and always propagates, and any other
``BaseException`` a stage raises crashes its session and leaves the
``AgentSystem`` block in a ``BaseExceptionGroup``.

The most common of them are also importable from ``arkhon_rheo`` itself, and
those of a layer from its namespace, as the same classes: ``ToolError``,
``ToolTimeout``, ``ToolCallHeld``, ``AmbiguousEffect`` and ``IsolationUnavailable``
from `arkhon_rheo.tools`,
``MalformedModelOutput`` and ``AnswerUnavailable`` from `arkhon_rheo.react`, ``CrashRunFailed`` from
`arkhon_rheo.testing`.
"""

from __future__ import annotations

# Every name of the private tree, listed once there (`arkhon_rheo._errors.__all__`).
from ._errors import *  # noqa: F403
from ._errors import __all__ as __all__
from ._exports import publish

publish(__name__, __all__, globals(), private="arkhon_rheo._errors")
del publish
