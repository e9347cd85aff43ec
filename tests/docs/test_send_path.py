"""The Architecture page's list of the modules a message crosses, checked by a trace."""

from __future__ import annotations

from pathlib import Path

from tests.docs.send_path import page_block, send_path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "explanation" / "architecture.md"
START, END = "<!-- send-path -->\n", "<!-- /send-path -->\n"


def test_the_architecture_page_lists_the_path_a_message_takes() -> None:
    text = PAGE.read_text(encoding="utf-8")
    listed = text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    traced = page_block()
    assert listed == traced, (
        "the path from AgentSystem.send to its commit changed: paste the output of "
        f"`python -m tests.docs.send_path` between the page's send-path markers:\n{traced}"
    )


def test_the_trace_starts_at_send_and_reaches_the_commit() -> None:
    path = send_path("memory")
    assert path[0] == "arkhon_rheo.session._messaging"  # AgentSystem.send
    assert "arkhon_rheo.session._supervisor" in path  # the commit (Committing)...
    assert "arkhon_rheo.store._memory" in path  # ...written to the store
