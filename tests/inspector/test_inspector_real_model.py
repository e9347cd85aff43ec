"""The inspector's decision drives a real-model agent named by ``MODULE:ATTR``, with no user code.

The machine is loaded as ``arkhon-rheo inspect --machine MODULE:ATTR`` loads it;
its `OpenAIChatClient` is never opened by hand: the inspector's agent system
opens it when a decision resumes the session, and closes it with the app.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import httpx
import pytest

from arkhon_rheo import AgentSystem
from arkhon_rheo.cli._load import load_machine
from arkhon_rheo.react import ReactState
from tests.support.chat_server import Canned, open_chat_server
from tests.support.real_agent import URL_VARIABLE

pytest.importorskip("starlette", reason="the inspector extra is not installed")
pytest.importorskip("hypercorn", reason="the inspector extra is not installed")

from arkhon_rheo.inspector import create_app

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

TOKEN = "real-model-token"
GATED = "tests.support.real_agent:gated_agent"


async def test_a_decision_in_the_inspector_runs_a_real_model_agent_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "store.db"
    async with open_chat_server() as server:
        monkeypatch.setenv(URL_VARIABLE, server.url)
        server.add(Canned.completion(tool_calls=[("c-1", "add", '{"a": 20, "b": 22}')]))
        async with AgentSystem(path=db) as system:  # another program paused it at the gate
            paused = await system.run(
                load_machine(GATED), ReactState(task="20 + 22?"), session_id="p"
            )
        assert paused.exit_reason.value == "paused", paused.failure

        machine = load_machine(GATED)  # a fresh client, as the inspector's process has
        app = create_app(db, machines=[machine], token=TOKEN)
        server.add(Canned.completion("42"))
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
            ) as client,
        ):
            answer = await client.post(
                "/sessions/p/decide", data={"token": TOKEN, "decision": "resume"}
            )
            assert answer.status_code == 303, answer.text
            inspector_system = app.state.inspector.system
            result = await inspector_system.session("p").result()
            model = machine.resources["model"]
            assert model.is_open  # type: ignore[attr-defined]
        assert not model.is_open  # type: ignore[attr-defined]  # closed with the app

    assert result.exit_reason.value == "finished", result.failure
    assert result.state.answer == "42"
    tool = next(m for m in result.state.messages if m.role == "tool")
    seen = json.loads(tool.content)
    assert seen == {
        "sum": 42,
        "session": "p",
        "step": seen["step"],
        "call": "c-1",
        "model_open": True,
    }
    assert len(server.requests) == 2
