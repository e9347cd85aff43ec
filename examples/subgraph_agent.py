"""A hierarchical machine: Thought -> AuthSubgraph -> Process.

The authentication subgraph (ValidateCredentials -> GenerateToken) is a machine
of its own, run as a supervised child session of the main one; its result
reaches the main state only through the subgraph stage's declared writes.

Run it with ``python examples/subgraph_agent.py [asyncio|trio]``.
"""

from __future__ import annotations

import enum
import sys
import tempfile
from pathlib import Path

import anyio

from arkhon_rheo import AgentState, AgentSystem, Machine, Patch, StateView, stage, subgraph


class Auth(enum.Enum):
    VALIDATE = "validate_credentials"
    GENERATE = "generate_token"
    DONE = "done"
    FAILED = "failed"


class AuthState(AgentState):
    lifecycle: Auth = Auth.VALIDATE
    user: str = ""
    valid: bool = False
    token: str = ""


@stage(reads={"user"}, writes={"valid"}, next=Auth.GENERATE)
async def validate_credentials(view: StateView[AuthState]) -> Patch:
    return Patch(valid=view.user in {"alice", "bob"})


@stage(
    reads={"user"},
    writes={"token"},
    next=Auth.DONE,
    preconditions=[lambda s: s.valid],  # an unknown user fails the child session
)
async def generate_token(view: StateView[AuthState]) -> Patch:
    return Patch(token=f"tok-{view.user}")


auth = Machine(
    name="auth",
    state_type=AuthState,
    initial=Auth.VALIDATE,
    transitions={Auth.VALIDATE: {Auth.GENERATE}, Auth.GENERATE: {Auth.DONE}},
    stages={Auth.VALIDATE: validate_credentials, Auth.GENERATE: generate_token},
    terminal={Auth.DONE, Auth.FAILED},
    failed=Auth.FAILED,
)


class Main(enum.Enum):
    THOUGHT = "thought"
    AUTH = "auth_subgraph"
    PROCESS = "process"
    DONE = "done"
    DENIED = "denied"
    FAILED = "failed"


class MainState(AgentState):
    lifecycle: Main = Main.THOUGHT
    user: str = ""
    plan: str = ""
    token: str = ""
    answer: str = ""


@stage(reads={"user"}, writes={"plan"}, next=Main.AUTH)
async def thought(view: StateView[MainState]) -> Patch:
    return Patch(plan=f"authenticate {view.user}, then process")


authenticate = subgraph(
    auth,
    name="auth_subgraph",
    reads={"user"},
    writes={"token"},  # the only field of the main state the child's result may set
    input=lambda view: AuthState(user=view.user),
    output=lambda child, view: Patch(token=child.token),
    next=Main.PROCESS,
)


@stage(reads={"user", "token"}, writes={"answer"}, next=Main.DONE)
async def process(view: StateView[MainState]) -> Patch:
    return Patch(answer=f"{view.user} is in with {view.token}")


main_machine = Machine(
    name="main",
    state_type=MainState,
    initial=Main.THOUGHT,
    transitions={
        Main.THOUGHT: {Main.AUTH},
        Main.AUTH: {Main.PROCESS, Main.DENIED},
        Main.PROCESS: {Main.DONE},
    },
    stages={Main.THOUGHT: thought, Main.AUTH: authenticate, Main.PROCESS: process},
    terminal={Main.DONE, Main.DENIED, Main.FAILED},
    failed=Main.FAILED,
    error_routes={Main.AUTH: Main.DENIED},  # a failed child: record it and deny
)


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        async with AgentSystem(path=Path(folder) / "sessions.db") as system:
            ok = await system.run(main_machine, MainState(user="alice"), session_id="s1")
            print(f"s1: {ok.exit_reason.value} in {ok.state.lifecycle.name}: {ok.state.answer}")
            for event in await system.stored(main_machine, "s1").history(children=True):
                parent = (event.info or {}).get("parent")
                indent = "    " if parent else "  "
                print(
                    f"{indent}{event.session_id} #{event.seq} {event.stage}: "
                    f"{event.from_state.name} -> {event.to_state.name}"
                )
            report = await system.stored(main_machine, "s1").replay(reexecute=True)
            verdict = "ok" if report.ok else report.divergence
            print(f"replay: {verdict}; {report.reexecuted} stages re-executed, the child's run")
            print("  answered from the step's record, not run again")

            denied = await system.run(main_machine, MainState(user="mallory"), session_id="s2")
            error = denied.state.last_error
            assert error is not None
            print(
                f"s2: {denied.state.lifecycle.name}: {error.error_type} ({error.error_class.value})"
            )


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
