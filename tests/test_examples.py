"""Every script in examples/ runs to completion on both backends.

Each command line runs once (`Runs`): the test that a script runs and the test of
what it prints read the same process's output.
"""

from __future__ import annotations

import ast
import os
import shlex
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


def test_there_are_examples() -> None:
    assert EXAMPLES


class Runs:
    """Each example run once per command line, in a folder of its own, offline.

    The test that an example runs and the test of what it prints share the run:
    the same command, so one process.
    """

    def __init__(self, folders: pytest.TempPathFactory) -> None:
        self.folders = folders
        self.done: dict[tuple[str, ...], tuple[subprocess.CompletedProcess[str], Path]] = {}

    def run(self, stem: str, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
        """The finished process of ``python examples/STEM.py ARGS`` and its working folder."""
        key = (stem, *args)
        if key not in self.done:
            script = next(path for path in EXAMPLES if path.stem == stem)
            cwd = self.folders.mktemp(stem)
            result = subprocess.run(
                [sys.executable, str(script), *args],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                cwd=cwd,
                env=_offline(script),
            )
            self.done[key] = (result, cwd)
        return self.done[key]

    def lines(self, stem: str, *args: str) -> list[str]:
        """What the example printed, after checking that it ran to completion."""
        result, _ = self.run(stem, *args)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda path: path.stem)
def test_example_runs(script: Path, backend: str, runs: Runs) -> None:
    result, _ = runs.run(script.stem, backend)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "an example should show what it did"


def _offline(script: Path) -> dict[str, str]:
    """The environment of an example run offline, on the tree under test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    return {**env, "PYTHONPATH": str(script.parents[1])}


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_phase_example_shows_each_stuck_policy(backend: str, runs: Runs) -> None:
    hard = runs.lines("phase_agent", backend)  # its default policy: hard
    assert "stuck_search (hard): init->searching -> searching->stuck_search -> " in " ".join(hard)
    assert (
        "  exit: answered, stuck: repeated_tool; answer: No quantum module is documented." in hard
    )
    soft = runs.lines("phase_agent", backend, "soft")
    assert (
        "  calculator: not run: this moves the agent from searching to deciding, which is not "
        "allowed. From searching you may: analyzing (analyze); finishing (answer in text); "
        "searching (context_fts_search)."
    ) in soft
    assert "  exit: answered; answer: 4" in soft
    auto = runs.lines("phase_agent", backend, "auto_finish")
    assert "  context_fts_search: not run: the agent was stuck" in auto
    for lines in (hard, soft, auto):
        assert lines.count("  replay without the model: ok") == 4


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_validate_example_retries_then_ends_on_a_terminal_rule(
    backend: str, runs: Runs
) -> None:
    lines = runs.lines("thought_validate_agent", backend)
    assert (
        "  wikipedia: rejected by rule known_tool: unknown tool 'wikipedia'; use one of "
        "['search', 'calculator']. Revise your step."
    ) in lines
    assert "  exit: answered; answer: About 1.28 seconds." in lines
    assert (
        "  exit: violation; answer: None; violation: blocked function '__import__' in the "
        "tool input"
    ) in lines
    assert lines.count("  replay without the model: ok") == 2


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_budget_example_shows_the_overdraft_and_the_wrapup(backend: str, runs: Runs) -> None:
    lines = runs.lines("budgeted_decision_agent", backend)
    overdraft = [line for line in lines if line.endswith("exploit_overdraft 0/1")]
    assert len(overdraft) == 2  # the round the overdraft opened, in each scenario
    assert sum(line.endswith(", wrapup active") for line in lines) == 2
    assert "  calculate: 210" in lines  # the overdraft round ran
    assert any(
        line.startswith("  web_search: not run: exploit_overdraft_blocked") for line in lines
    )
    assert lines.count("  replay without the model: ok") == 2


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_main_job_stores_its_history_and_replays_it(backend: str, runs: Runs) -> None:
    lines = runs.lines("lifecycle_agent", backend)
    _, folder = runs.run("lifecycle_agent", backend)
    assert "exit: finished, iteration 2, answer 42" in lines
    assert "  #5 act: ACTING -> OBSERVING (recorded calls: tool:calculator)" in lines
    assert (
        "replay: ok; 6 events folded, 6 stages re-executed on their recorded calls, "
        "without the model" in lines
    )
    assert (folder / "arkhon-rheo.db").exists()  # the embedded SQLite default


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_subgraph_example_links_the_child_to_its_parent_step(backend: str, runs: Runs) -> None:
    lines = runs.lines("subgraph_agent", backend)
    assert "s1: finished in DONE: alice is in with tok-alice" in lines
    child = [line for line in lines if line.startswith("    s1/auth_subgraph/2 ")]
    assert child == [
        "    s1/auth_subgraph/2 #1 validate_credentials: VALIDATE -> GENERATE",
        "    s1/auth_subgraph/2 #2 generate_token: GENERATE -> DONE",
    ]
    assert lines.index(child[-1]) + 1 == lines.index("  s1 #2 auth_subgraph: AUTH -> PROCESS")
    assert "replay: ok; 3 stages re-executed, the child's run" in lines
    assert "s2: DENIED: SubgraphFailed (recoverable)" in lines


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_react_example_answers_with_both_tools_and_replays(backend: str, runs: Runs) -> None:
    lines = runs.lines("react_agent", backend)
    # The two calls run concurrently: trio may start either first.
    act = "  #3 act: ACTING -> THINKING (recorded calls: {})"
    assert any(
        act.format(order) in lines
        for order in ("tool:calculate, tool:count_words", "tool:count_words, tool:calculate")
    ), lines
    assert "  tool count_words -> 4" in lines  # from the sandboxed child process
    assert "exit: finished (answered)" in lines
    assert "replay: ok; 4 stages re-executed on their recorded calls, without the model" in lines


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_mcp_example_calls_its_servers_tools_and_replays_without_it(
    backend: str, runs: Runs
) -> None:
    lines = runs.lines("mcp_agent", backend)
    assert lines[lines.index("tools:") + 1 :][:4] == [
        "  thousands(number)",
        "  population(city)",
        "  compare(a, b)",
        "  #1 start: INITIALIZED -> THINKING",
    ]
    assert "  #5 act: ACTING -> THINKING (recorded calls: tool:compare)" in lines
    assert '  tool compare -> {"larger":"b","factor":1.844}' in lines
    assert any("no data for 'Atlantis'" in line and "observation" in line for line in lines)
    assert "exit: finished (answered)" in lines
    assert "toolbox open after the system stopped: False (the server process ended)" in lines
    assert (
        "replay: ok; 8 stages re-executed on their recorded calls, without the model or the "
        "MCP server" in lines
    )


@pytest.mark.anyio
async def test_the_react_example_talks_to_a_real_server_when_configured(tmp_path: Path) -> None:
    from tests.support.chat_server import Canned, open_chat_server

    script = next(path for path in EXAMPLES if path.stem == "react_agent")
    async with open_chat_server() as server:
        server.add(
            Canned.completion(tool_calls=[("t1", "calculate", '{"expression": "6 * 7"}')]),
            Canned.completion("6 * 7 = 42", usage=(30, 7)),
        )
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")},
            "OPENAI_BASE_URL": server.url,
            "OPENAI_API_KEY": "sk-example-key-0000",
            "ARKHON_MODEL": "test-model",
            # The tree under test, not whatever is installed: the example relies on
            # the agent system opening its client.
            "PYTHONPATH": str(script.parents[1]),
        }
        result = await anyio.run_process(
            [sys.executable, str(script)], cwd=tmp_path, env=env, check=False
        )
        requests = [received.json for received in server.requests]
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert "answer: 6 * 7 = 42" in out
    assert "usage: 45 tokens, 2 turns, 1 tool calls" in out  # (3 + 5) + (30 + 7)
    assert [r["model"] for r in requests] == ["test-model", "test-model"]
    assert {t["function"]["name"] for t in requests[0]["tools"]} == {"calculate", "count_words"}


@pytest.mark.anyio
async def test_the_react_example_talks_to_anthropic_when_configured(tmp_path: Path) -> None:
    from tests.support.anthropic_server import message
    from tests.support.chat_server import open_chat_server

    script = next(path for path in EXAMPLES if path.stem == "react_agent")
    async with open_chat_server() as server:
        server.add(
            message(tool_uses=[("tu_1", "calculate", {"expression": "6 * 7"})]),
            message("6 * 7 = 42", usage=(30, 7, 0, 100)),
        )
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")},
            "ANTHROPIC_BASE_URL": server.root,
            "ANTHROPIC_API_KEY": "sk-ant-example-key-0000",
            "ARKHON_MODEL": "claude-test",
            "PYTHONPATH": str(script.parents[1]),
        }
        result = await anyio.run_process(
            [sys.executable, str(script)], cwd=tmp_path, env=env, check=False
        )
        received = list(server.requests)
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert "answer: 6 * 7 = 42" in out
    assert "usage: 145 tokens, 2 turns, 1 tool calls" in out  # (3 + 5) + (30 + 100 + 7)
    assert [r.path for r in received] == ["/v1/messages"] * 2
    assert {r.headers["x-api-key"] for r in received} == {"sk-ant-example-key-0000"}
    bodies = [r.json for r in received]
    assert [b["model"] for b in bodies] == ["claude-test", "claude-test"]
    assert {t["name"] for t in bodies[0]["tools"]} == {"calculate", "count_words"}
    assert bodies[1]["messages"][-1]["content"][0]["type"] == "tool_result"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_decision_agent_ends_each_scenario_on_its_exit_reason(backend: str, runs: Runs) -> None:
    lines = runs.lines("decision_agent", backend)
    reasons = [
        "complete",
        "clarify",
        "max_iterations",
        "context_reads_exhausted",
        "decision_no_progress",
        "decision_reruns_exhausted",
        "wrapup_no_decision_rerun",
        "exploit_overdraft_blocked",
        "incomplete_contract",
    ]
    assert [line for line in lines if line.startswith("== scenario ")] == [
        f"== scenario {reason}" for reason in reasons
    ]
    assert [line for line in lines if line.startswith("  exit: ")] == [
        f"  exit: {reason}" for reason in reasons
    ]
    assert "  answer: Paris; slots: capital=a2" in lines  # complete: the page mapped
    assert "  answer: Which France do you mean?; slots: capital=pending" in lines
    assert "  answer: Paris, I think; slots: capital=pending" in lines  # incomplete_contract
    assert "      exit_reason=None (wrap-up round)" in lines
    assert (
        lines.count(
            "      a2 fetch_page [document]: Paris is the capital of France "
            "(population 2.1 million)."
        )
        == 1
    )
    assert "      BUDGET_STATE: global(decisions left 6/6," in "\n".join(lines)
    assert lines[-1] == (
        "replay: 9/9 sessions re-executed on their recorded calls, without the model"
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_decision_agent_runs_one_scenario_by_name(backend: str, runs: Runs) -> None:
    lines = runs.lines("decision_agent", backend, "clarify")
    assert lines[0] == "== scenario clarify"
    assert "      decided: clarify (pending_exit_reason=clarify)" in lines
    assert (
        lines[-1] == "replay: 1/1 sessions re-executed on their recorded calls, without the model"
    )
    result, _ = runs.run("decision_agent", backend, "teleport")
    assert result.returncode == 1
    assert "no scenario 'teleport'; the scenarios are complete, clarify," in result.stderr


#: What ``examples/conversation.py`` prints, whichever model answers (the scripted
#: one offline, or a server answering the same).
CONVERSATION = [
    "user: hi",
    "agent: Hello! Ask me anything.",
    "user: what is 6 * 7?",
    "agent: 6 * 7 = 42.",
    "user: thanks!",
    "agent: You're welcome. Goodbye!",
    "conversation: finished, 3 messages applied, 9 events",
    "replay: ok",
    "reminder: waiting, due in 7200 s",
    "after the restart: finished, fired: call the dentist",
]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_conversation_example_goes_on_in_a_new_system_and_fires_its_reminder(
    backend: str, runs: Runs
) -> None:
    assert runs.lines("conversation", backend) == CONVERSATION


@pytest.mark.anyio
async def test_the_conversation_example_talks_to_a_real_server_when_configured(
    tmp_path: Path, anyio_backend: str
) -> None:
    # Its docstring says so: with OPENAI_BASE_URL set it talks to that server,
    # through one module-level client that each of its two systems opens.
    from tests.support.chat_server import Canned, open_chat_server

    script = next(path for path in EXAMPLES if path.stem == "conversation")
    async with open_chat_server() as server:
        server.add(
            Canned.completion("Hello! Ask me anything."),
            Canned.completion(tool_calls=[("m1", "multiply", '{"a": 6, "b": 7}')]),
            Canned.completion("6 * 7 = 42."),
            Canned.completion("You're welcome. Goodbye!"),
        )
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")},
            "OPENAI_BASE_URL": server.url,
            "OPENAI_API_KEY": "sk-example-key-0000",
            "ARKHON_MODEL": "test-model",
            "PYTHONPATH": str(script.parents[1]),
        }
        result = await anyio.run_process(
            [sys.executable, str(script), anyio_backend], cwd=tmp_path, env=env, check=False
        )
        requests = [received.json for received in server.requests]
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().splitlines() == CONVERSATION
    assert [r["model"] for r in requests] == ["test-model"] * 4  # every answer from the server
    assert requests[2]["messages"][-1]["role"] == "tool"  # the tool's result went to it


def test_the_conversation_examples_command_lines_run_as_its_docstring_says(
    tmp_path: Path,
) -> None:
    script = next(path for path in EXAMPLES if path.stem == "conversation")
    docstring = ast.get_docstring(ast.parse(script.read_text())) or ""
    commands = [shlex.split(line) for line in docstring.splitlines() if "arkhon-rheo " in line]
    assert [argv[:2] for argv in commands] == [
        ["arkhon-rheo", "run"],
        ["arkhon-rheo", "send"],
        ["arkhon-rheo", "sessions"],
    ]
    printed = []
    for argv in commands:
        done = subprocess.run(
            [sys.executable, "-m", "arkhon_rheo", *argv[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=tmp_path,
            env={**_offline(script), "COLUMNS": "200"},
        )
        assert done.returncode == 0, f"{shlex.join(argv)}: {done.stderr}"
        printed.append(done.stdout)
    assert "Hello! Ask me anything." in printed[0]
    assert "6 * 7 = 42." in printed[1]
    assert "chat" in printed[2]
    assert "waiting" in printed[2]
