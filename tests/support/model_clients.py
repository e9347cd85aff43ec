"""What the model-client tests share: client factories, stream collection, the secret scans.

The OpenAI and Anthropic client tests (tests/models/test_models_*.py and
test_anthropic_*.py) use these, each against a real loopback server
(`tests.support.chat_server.open_chat_server`).
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any

from arkhon_rheo import AgentState, AgentSystem, Lifecycle, Machine, Patch, StateView, stage
from arkhon_rheo.models import AnthropicClient, OpenAIChatClient
from arkhon_rheo.protocols import UserMessage
from arkhon_rheo.supervision import Backoff

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from tests.support.chat_server import ChatServer

#: The keys of the clients `openai_client` and `anthropic_client` make.
OPENAI_KEY = "sk-test-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-0123456789abcdef"
HELLO = [UserMessage(content="hello")]


def openai_client(server: ChatServer, **options: object) -> OpenAIChatClient:
    """An `OpenAIChatClient` for ``test-model`` on ``server``, with `OPENAI_KEY`."""
    return OpenAIChatClient("test-model", api_key=OPENAI_KEY, base_url=server.url, **options)  # type: ignore[arg-type]


def anthropic_client(server: ChatServer, **options: object) -> AnthropicClient:
    """An `AnthropicClient` for ``claude-test`` on ``server``, with `ANTHROPIC_KEY`."""
    return AnthropicClient("claude-test", api_key=ANTHROPIC_KEY, base_url=server.root, **options)  # type: ignore[arg-type]


async def collect(chunks: AsyncIterator[object], into: list[object]) -> None:
    """Take ``chunks`` into ``into`` until the stream ends or fails."""
    async for chunk in chunks:
        into.append(chunk)  # noqa: PERF401 - each chunk kept before the stream fails


def leaks(secret: str, *texts: str, size: int = 8) -> list[str]:
    """The pieces of ``secret`` at least ``size`` characters long found in ``texts``."""
    pieces = {secret[i : i + size] for i in range(len(secret) - size + 1)}
    return sorted(piece for piece in pieces if any(piece in text for text in texts))


def exception_texts(exc: BaseException) -> list[str]:
    """Everything an exception shows: its traceback, and each link's str, repr, args and notes."""
    texts = ["".join(traceback.format_exception(exc))]
    seen: set[int] = set()
    stack = [exc]
    while stack:
        link = stack.pop()
        if id(link) in seen:
            continue
        seen.add(id(link))
        texts += [str(link), repr(link), repr(link.args), repr(getattr(link, "__notes__", ""))]
        stack += [e for e in (link.__cause__, link.__context__) if e is not None]
        if isinstance(link, BaseExceptionGroup):
            stack += list(link.exceptions)
    return texts


async def failure_of(call: Callable[[], Awaitable[Any]]) -> Exception:
    """The exception ``call`` raises (the test fails if it returns)."""
    try:
        await call()
    except Exception as exc:
        return exc
    raise AssertionError("the call did not fail")


def long_page(key: str, pad: int) -> str:
    """An error page with ``key`` ``pad`` characters in, across any cut near there."""
    return "<html>" + "x" * pad + key + "y" * 2000 + "</html>"


class Chat(AgentState):
    """The state of `one_stage`'s machine."""

    lifecycle: Lifecycle = Lifecycle.INITIALIZED
    answer: str = ""


def one_stage(body: Callable[[], Awaitable[str]]) -> Machine[Chat]:
    """A machine of one stage whose answer is what ``body`` returns."""

    @stage(reads=set(), writes={"answer"}, next=Lifecycle.FINISHED, name="ask")
    async def ask(view: StateView[Chat]) -> Patch:
        return Patch(answer=await body())

    return Machine(
        name="ask",
        state_type=Chat,
        initial=Lifecycle.INITIALIZED,
        terminal={Lifecycle.FINISHED, Lifecycle.FAILED},
        failed=Lifecycle.FAILED,
        transitions={Lifecycle.INITIALIZED: {Lifecycle.FINISHED}},
        stages={Lifecycle.INITIALIZED: ask},
    )


async def run_stored(body: Callable[[], Awaitable[str]], **options: Any) -> tuple[Any, str]:
    """Run ``body`` as a session's one stage; its result and all the store keeps of it."""
    async with AgentSystem(backoff=Backoff(base=0, cap=0), **options) as system:
        result = await system.run(one_stage(body), Chat(), session_id="s")
        history = await system.stored(one_stage(body), "s").history()
    return result, repr(history) + repr(result)
