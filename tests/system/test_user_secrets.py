"""A user's own secrets: ``AgentSystem(redact=[...])`` masks them everywhere (issue 41, item 3).

A tool that fails quoting its own key (a payment key, a personal access token)
must not hand it to the model, nor to the session's state, its failure record,
the store or the logs.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from structlog.testing import capture_logs

from arkhon_rheo import AgentSystem, ConfigurationError, Fatal
from arkhon_rheo.protocols import AssistantMessage, ModelReply, ToolCall, ToolMessage, Usage
from arkhon_rheo.react import ReactState, react_agent
from arkhon_rheo.supervision import Backoff
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import Toolbox, tool
from tests.support.raw_store import stored_bytes

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

FAST = Backoff(base=0, cap=0)


def _calls(name: str) -> ModelReply:
    made = ToolCall(id="c1", name=name, arguments=json.dumps({}))
    message = AssistantMessage(content=None, tool_calls=(made,))
    return ModelReply(message=message, finish_reason="tool_calls", usage=Usage(), model="m")


def _fresh_keys() -> tuple[str, str]:
    """Keys no earlier test registered (the registry lasts as long as the process)."""
    return f"sk_live_{uuid.uuid4().hex}", f"ghp_{uuid.uuid4().hex}"


def _charge_tool(stripe: str, github: str) -> Any:
    @tool(retries=0)
    async def charge() -> str:
        """Charge the customer."""
        raise RuntimeError(f"payment API refused key {stripe} (and {github} for the repo)")

    return charge


def _deploy_tool(stripe: str) -> Any:
    @tool(retries=0)
    async def deploy() -> str:
        """Deploy."""
        raise Fatal(f"deploy refused: bad key {stripe}")

    return deploy


async def test_a_tool_error_quoting_a_declared_secret_reaches_no_model_record_log_or_row(
    tmp_path: Path,
) -> None:
    stripe, github = _fresh_keys()
    path = tmp_path / "secrets.db"
    model = ScriptedModel([_calls("charge"), "The payment failed."])
    failing = ScriptedModel([_calls("deploy"), "never asked"])
    with capture_logs() as logs:
        async with AgentSystem(path=path, redact=[stripe, github], backoff=FAST) as system:
            observed = await system.run(
                react_agent(model, [_charge_tool(stripe, github)]),
                ReactState(task="charge"),
                session_id="charge",
            )
            failed = await system.run(
                react_agent(failing, [_deploy_tool(stripe)]),
                ReactState(task="deploy"),
                session_id="deploy",
            )
    assert observed.ok, observed.failure
    (error,) = [m for m in observed.state.messages if isinstance(m, ToolMessage)]
    assert error.is_error
    assert error.content == (
        "RuntimeError: payment API refused key [REDACTED] (and [REDACTED] for the repo)"
    )
    # The model decided with the error in front of it, the keys masked.
    sent = "\n".join(repr(request) for request in model.requests)
    assert "payment API refused key [REDACTED]" in sent
    assert not failed.ok
    assert failed.failure is not None
    assert failed.failure.message.endswith("bad key [REDACTED]")
    shown = [repr(logs), sent, repr(observed.state), repr(failed.failure)]
    for text in shown:
        assert stripe not in text
        assert github not in text
    raw = stored_bytes(path)
    assert b"[REDACTED]" in raw
    assert stripe.encode() not in raw
    assert github.encode() not in raw


@pytest.mark.parametrize(
    ("redact", "said"),
    [
        ("sk_live_one", "redact takes a list of secret strings"),
        (42, "redact takes a list of secret strings"),
        (["sk_live_one", 7], "redact's value 2 is a int"),
        (["abc"], "redact's value 1 is shorter than four characters"),
    ],
)
async def test_redact_refuses_what_is_not_a_list_of_secrets(redact: Any, said: str) -> None:
    with pytest.raises(ConfigurationError, match=said) as info:
        AgentSystem(path=None, redact=redact)
    assert "sk_live_one" not in str(info.value)


async def test_a_toolbox_called_directly_masks_a_declared_secret_in_its_error() -> None:
    stripe, github = _fresh_keys()
    AgentSystem(path=None, redact=[stripe, github])
    answer = await Toolbox(_charge_tool(stripe, github)).call(
        ToolCall(id="c1", name="charge", arguments="{}")
    )
    assert answer.is_error
    assert answer.content == (
        "RuntimeError: payment API refused key [REDACTED] (and [REDACTED] for the repo)"
    )
