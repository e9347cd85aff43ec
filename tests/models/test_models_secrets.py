"""No secret the model client is given reaches an error, its chain, a record, the store or a log.

Each test gives the library a key of its own (the registry of secrets is
process-wide, so a key another test registered would hide a missing
registration), against a real loopback server that echoes it back.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import structlog.testing

from arkhon_rheo import (
    ConfigurationError,
    Fatal,
    Recoverable,
    Transient,
    record_call,
    record_stream,
)
from arkhon_rheo._redact import ScrubbedError, StreamScrubber, register_secret, scrub_secrets
from arkhon_rheo.models import OpenAIChatClient
from arkhon_rheo.protocols import ModelReply, ReplyDelta
from arkhon_rheo.supervision import RestartIntensity
from tests.support.chat_server import Canned, Received, open_chat_server, text_chunks
from tests.support.model_clients import (
    HELLO,
    exception_texts,
    failure_of,
    leaks,
    long_page,
    run_stored,
)

pytestmark = pytest.mark.anyio


def bearer(request: Received) -> str:
    """The key a request carried (what an echoing server sends back)."""
    return request.headers["authorization"].removeprefix("Bearer ")


@pytest.mark.parametrize(
    "padded",
    ["{}\n", "{}\r\n", "{} ", " {}", "\t{}\n"],
    ids=["newline", "crlf", "space", "leading-space", "tab-newline"],
)
async def test_a_key_with_surrounding_whitespace_is_sent_stripped(padded: str) -> None:
    key = "key-read-from-a-file-0123456789"
    async with open_chat_server() as server:
        server.add(Canned.completion("ok"), Canned(events=text_chunks("ok")))
        client = OpenAIChatClient("m", api_key=padded.format(key), base_url=server.url)
        async with client:
            assert (await client.complete(HELLO)).text == "ok"
            chunks = [c async for c in client.stream(HELLO)]
            assert isinstance(chunks[-1], ModelReply)
            assert chunks[-1].text == "ok"
    assert [r.headers["authorization"] for r in server.requests] == [f"Bearer {key}"] * 2


async def test_a_key_read_from_the_environment_with_its_newline_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = "env-key-with-newline-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key + "\n")
    async with open_chat_server() as server, OpenAIChatClient("m", base_url=server.url) as client:
        server.add(Canned.completion("ok"))
        await client.complete(HELLO)
    assert server.requests[0].headers["authorization"] == f"Bearer {key}"


@pytest.mark.parametrize(
    "bad",
    [
        "k3y-inner\nlf-0123456789",
        "k3y-inner-n\x00l-0123456789",
        "k3y-inner s-0123456789",
        "k3y-inner-d\x7fl-0123456789",
        "k3y-non-as-é-0123456789",
        "ключ-0123456789-abcdefgh",
        "k3y-zero-w\u200b-0123456789",
        " \r\n",
    ],
    ids=["newline", "nul", "space", "del", "accent", "cyrillic", "zero-width", "blank"],
)
def test_a_key_no_header_can_carry_is_refused_up_front(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigurationError, match="API key") as caught:
        OpenAIChatClient("m", api_key=bad, base_url="http://127.0.0.1:9/v1")
    assert "api_key" in str(caught.value)
    refused = [caught.value]
    if "\x00" not in bad:  # no environment variable can hold a NUL
        monkeypatch.setenv("OPENAI_API_KEY", bad)
        with pytest.raises(ConfigurationError, match="OPENAI_API_KEY") as from_env:
            OpenAIChatClient("m", base_url="http://127.0.0.1:9/v1")
        refused.append(from_env.value)
    for exc in refused:
        assert exc.__cause__ is None
        assert exc.__context__ is None
        if bad.strip():
            assert not leaks(bad.strip(), *exception_texts(exc), size=6)


async def test_a_header_that_cannot_be_sent_is_fatal_and_shows_no_key() -> None:
    # What the issue saw: httpx refuses the header, and its error carries it whole.
    key = "key-in-an-illegal-header-0123456789"

    async def newline(request: httpx.Request) -> None:
        request.headers["Authorization"] = f"Bearer {key}\n"

    async with (
        open_chat_server() as server,
        httpx.AsyncClient(event_hooks={"request": [newline]}) as http,
    ):
        client = OpenAIChatClient("m", api_key=key, base_url=server.url, http_client=http)
        failures = [
            await failure_of(lambda: client.complete(HELLO)),
            await failure_of(lambda: anext(aiter(client.stream(HELLO)))),
        ]
    assert not server.requests
    for failure in failures:
        assert isinstance(failure, Fatal), repr(failure)  # never retried: it cannot succeed
        assert not isinstance(failure, Transient)
        assert "could not be sent" in str(failure)
        assert not leaks(key, *exception_texts(failure))


# --- 2. No error escaping a request carries a key; the recorder stores none ------------------


def unicode_failure(key: str) -> UnicodeEncodeError:
    """The error a non-ASCII key makes: its ``args`` hold the whole header."""
    header = f"Bearer {key}é"
    return UnicodeEncodeError("ascii", header, len(header) - 1, len(header), "not in range")


@pytest.mark.parametrize("raised", ["unicode", "chained", "classified", "os", "chained-os"])
async def test_no_error_escaping_a_request_carries_the_key_in_its_args_or_chain(
    raised: str,
) -> None:
    key = f"key-in-a-hooks-error-{raised}-0123456789"

    def cause() -> Exception:
        if raised.endswith("os"):  # its message is not its args: it cannot be scrubbed in place
            return FileNotFoundError(2, "no such file", f"/keys/{key}")
        return unicode_failure(key)  # what a non-ASCII key made httpx raise

    async def hook(request: httpx.Request) -> None:
        if raised in ("unicode", "os"):
            raise cause()
        try:
            raise cause()
        except (OSError, UnicodeEncodeError) as exc:
            error = Transient if raised == "classified" else RuntimeError
            raise error(f"could not send {request.headers['authorization']}") from exc

    async with (
        open_chat_server() as server,
        httpx.AsyncClient(event_hooks={"request": [hook]}) as http,
    ):
        client = OpenAIChatClient("m", api_key=key, base_url=server.url, http_client=http)
        failures = [
            await failure_of(lambda: client.complete(HELLO)),
            await failure_of(lambda: anext(aiter(client.stream(HELLO)))),
        ]
    for failure in failures:
        if raised in ("unicode", "os"):  # classified, chained to the error scrubbed
            assert isinstance(failure, Fatal), repr(failure)
            assert type(cause()).__name__ in str(failure)
            if raised == "unicode":  # it can never be sent: not retried
                assert "character HTTP cannot carry" in str(failure)
        else:  # the hook's own error, its class kept for the session's classifier
            assert type(failure) is (Transient if raised == "classified" else RuntimeError)
            assert str(failure) == "could not send Bearer [REDACTED]"
        shown = failure.__cause__
        if raised.endswith("os"):
            assert isinstance(shown, ScrubbedError)
            assert (
                str(shown)
                == "builtins.FileNotFoundError: [Errno 2] no such file: '/keys/[REDACTED]'"
            )
        else:
            assert isinstance(shown, UnicodeEncodeError)
        assert not leaks(key, *exception_texts(failure))


async def test_the_recorder_stores_no_secret_from_a_failed_call() -> None:
    key = "key-in-a-recorded-failure-0123456789"
    OpenAIChatClient("m", api_key=key)  # the library is given the key

    async def fails() -> str:
        raise unicode_failure(key)

    async def streams() -> Any:
        yield "a piece"
        raise unicode_failure(key)

    async def stage_goes_on() -> str:
        seen: list[str] = []
        try:
            await record_call("model", {"ask": 1}, fails)
        except UnicodeEncodeError as exc:
            seen.append(repr(exc.args))
        try:
            async for _ in record_stream("model", {"ask": 2}, streams):
                pass
        except UnicodeEncodeError as exc:
            seen.append(repr(exc.args))
        return " ".join(seen)  # committed: the stage sees what a replay will

    result, stored = await run_stored(stage_goes_on)
    assert result.ok, result.failure
    assert result.state.answer.count("Bearer [REDACTED]") == 2
    assert '"ask": 2' in stored or "'ask': 2" in stored  # the calls were recorded
    assert not leaks(key, stored)


# --- 3. A key echoed in a long body that is not JSON ----------------------------------------


@pytest.mark.parametrize(
    ("status", "pad"), [(200, 50), (502, 470), (400, 470)], ids=["reply", "5xx", "4xx"]
)
async def test_a_key_echoed_in_a_long_non_json_body_leaves_no_piece(status: int, pad: int) -> None:
    key = f"key-echoed-in-a-long-body-{status}-0123456789"
    async with (
        open_chat_server() as server,
        OpenAIChatClient("m", api_key=key, base_url=server.url) as client,
    ):
        render = lambda request: long_page(bearer(request), pad)  # noqa: E731
        server.add(Canned(status=status, render=render), Canned(status=status, render=render))
        failures = [
            await failure_of(lambda: client.complete(HELLO)),
            await failure_of(lambda: anext(aiter(client.stream(HELLO)))),
        ]
    for failure in failures:
        assert isinstance(failure, Transient | Fatal | Recoverable), repr(failure)
        assert not leaks(key, *exception_texts(failure))


async def test_a_key_echoed_in_a_stream_event_leaves_no_piece() -> None:
    key = "key-echoed-in-a-stream-event-0123456789"
    async with (
        open_chat_server() as server,
        OpenAIChatClient("m", api_key=key, base_url=server.url) as client,
    ):
        server.add(Canned(events=[long_page(key, 50)]))
        failure = await failure_of(lambda: anext(aiter(client.stream(HELLO))))
    assert isinstance(failure, Recoverable)
    assert "stream event" in str(failure)
    assert not leaks(key, *exception_texts(failure))


async def test_a_key_echoed_in_a_non_json_reply_is_not_stored_with_the_failure() -> None:
    key = "key-echoed-then-stored-0123456789"
    async with (
        open_chat_server() as server,
        OpenAIChatClient("m", api_key=key, base_url=server.url) as client,
    ):
        for _ in range(3):
            server.add(Canned(render=lambda request: long_page(bearer(request), 50)))

        async def ask() -> str:
            return (await client.complete(HELLO)).text or ""

        result, stored = await run_stored(
            ask, restart_intensity=RestartIntensity(max_restarts=2, within=60)
        )
    assert not result.ok
    assert "not in the expected format" in stored
    assert not leaks(key, stored)


# --- 4. Replies, a password in the base URL, a key in the http client's headers -------------


async def test_a_reply_quoting_the_key_is_scrubbed_before_it_is_recorded() -> None:
    key = "key-quoted-by-the-model-0123456789"

    def quoting(request: Received) -> Any:
        said = f"Your key is {bearer(request)}."
        args = json.dumps({"key": bearer(request)})
        return Canned.completion(said, tool_calls=[("c1", "use", args)]).body

    async with (
        open_chat_server() as server,
        OpenAIChatClient("m", api_key=key, base_url=server.url) as client,
    ):
        server.add(Canned(render=quoting))
        pieces = ["Your key is key-quo", "ted-by-the-mo", "del-0123456789 and ", "more"]
        server.add(Canned(events=text_chunks(*pieces)))
        got: list[Any] = []

        async def ask() -> str:
            reply = await record_call(
                "model",
                client.request_body(HELLO),
                lambda: client.complete(HELLO),
                returns=ModelReply,
            )
            got.append(reply)
            got.extend(
                [
                    chunk
                    async for chunk in record_stream(
                        "model",
                        client.request_body(HELLO, stream=True),
                        lambda: client.stream(HELLO),
                        returns=ReplyDelta | ModelReply,
                    )
                ]
            )
            return f"{reply.text} {reply.tool_calls[0].arguments}"

        result, stored = await run_stored(ask)
    assert result.ok, result.failure
    assert result.state.answer == 'Your key is [REDACTED]. {"key": "[REDACTED]"}'
    assert got[-1].text == "Your key is [REDACTED] and more"
    assert "".join(c.text for c in got if isinstance(c, ReplyDelta)) == got[-1].text
    assert not leaks(key, stored, repr(got))


def test_a_secret_split_across_streamed_pieces_is_masked_wherever_it_is_cut() -> None:
    key = "key-cut-into-pieces-0123456789"
    register_secret(key)
    text = f"Your key is {key}, and {key}: more text to follow"
    for first in range(len(text)):
        for second in range(first, len(text)):
            scrubber = StreamScrubber()
            pieces = [text[:first], text[first:second], text[second:]]
            passed = [scrubber.feed(piece) for piece in pieces] + [scrubber.flush()]
            joined = "".join(passed)
            assert not leaks(key, joined, size=4), pieces
            assert joined.endswith(": more text to follow"), pieces
    plain = StreamScrubber()
    assert [plain.feed(p) for p in ("Hel", "lo, k", "ey-cut")] == ["Hel", "lo, k", ""]
    assert plain.flush() == "[REDACTED]"  # a stream that ends inside a secret


@pytest.mark.parametrize(
    ("password", "written"),
    [
        ("url-pw-0123456789-abcdef", "url-pw-0123456789-abcdef"),
        ("p@ss:w/rd-42x", "p%40ss%3Aw%2Frd-42x"),
    ],
    ids=["plain", "percent-encoded"],
)
async def test_a_password_in_the_base_url_is_never_shown(password: str, written: str) -> None:
    with structlog.testing.capture_logs() as logs:
        async with open_chat_server() as server:
            url = server.url.replace("http://", f"http://user:{written}@")
            server.add(
                Canned.completion("ok"),
                Canned.error(404, "no such model"),
                Canned.error(503, f"password {password} is wrong"),
                Canned(body=f"<html>{password}</html>"),
            )
            async with OpenAIChatClient("m", base_url=url) as client:
                shown = [repr(client), client.base_url, client.url]
                assert (await client.complete(HELLO)).text == "ok"
                failures = [await failure_of(lambda: client.complete(HELLO)) for _ in range(3)]
        async with OpenAIChatClient("m", base_url=url) as gone:
            failures.append(await failure_of(lambda: gone.complete(HELLO)))
    assert server.requests[0].headers["authorization"].startswith("Basic ")  # still sent
    assert "user:[REDACTED]@127.0.0.1" in client.base_url
    assert [type(f) for f in failures] == [Fatal, Transient, Recoverable, Transient]
    assert "user:[REDACTED]@127.0.0.1" in str(failures[0])
    texts = [*shown, repr(logs)] + [t for f in failures for t in exception_texts(f)]
    assert any("user:[REDACTED]@127.0.0.1" in str(entry.get("url")) for entry in logs)
    for secret in {password, written}:
        assert not leaks(secret, *texts, size=min(8, len(secret)))


def test_a_token_alone_in_the_base_url_is_masked_too() -> None:
    token = "tok0123456789abcdefXYZ"
    client = OpenAIChatClient("m", base_url=f"https://{token}@example.test/v1")
    assert client.base_url == "https://[REDACTED]@example.test/v1"
    assert token not in repr(client)
    assert scrub_secrets(f"echoed {token}") == "echoed [REDACTED]"
    named = OpenAIChatClient("m", base_url="https://alice@example.test/v1")
    assert named.base_url == "https://[REDACTED]@example.test/v1"
    assert scrub_secrets("alice") == "alice"  # a name is not masked in every text


def test_a_key_in_the_base_urls_query_is_masked_and_registered() -> None:
    key = "qk-0123456789abcdefQRS"
    client = OpenAIChatClient("m", base_url=f"https://example.test/v1?api-key={key}&v=2")
    assert client.base_url == "https://example.test/v1?api-key=[REDACTED]&v=2"
    for text in (repr(client), client.base_url, client.url):
        assert key not in text
    assert scrub_secrets(f"echoed {key}") == "echoed [REDACTED]"
    plain = OpenAIChatClient("m", base_url="https://example.test/v1?version=2024-10")
    assert plain.base_url == "https://example.test/v1?version=2024-10"  # not a credential


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("Authorization", "Bearer {}"),
        ("api-key", "{}"),
        ("X-API-Key", "{}"),
    ],
)
async def test_a_key_in_the_http_clients_headers_is_scrubbed(header: str, value: str) -> None:
    key = f"azure-{header.lower()}-0123456789abcdef"
    async with (
        open_chat_server() as server,
        httpx.AsyncClient(headers={header: value.format(key)}) as http,
    ):
        client = OpenAIChatClient("m", base_url=server.url, http_client=http)
        assert not leaks(key, repr(client))
        server.add(
            Canned.error(401, f"Incorrect API key provided: {key}"),
            Canned.completion(f"the key was {key}"),
        )
        failure = await failure_of(lambda: client.complete(HELLO))
        reply = await client.complete(HELLO)
    assert isinstance(failure, Fatal)
    assert server.requests[0].headers[header.lower()] == value.format(key)
    assert reply.text == "the key was [REDACTED]"
    assert not leaks(key, *exception_texts(failure))


def test_a_key_in_the_http_clients_headers_that_no_header_can_carry_is_refused() -> None:
    http = httpx.AsyncClient(headers={"Authorization": "Bearer key-with-newline-0123456789\n"})
    with pytest.raises(ConfigurationError, match="Authorization") as caught:
        OpenAIChatClient("m", base_url="http://127.0.0.1:9/v1", http_client=http)
    assert not leaks("key-with-newline-0123456789", *exception_texts(caught.value))


async def test_a_stage_error_quoting_a_secret_is_stored_scrubbed() -> None:
    key = "key-in-a-stage-error-0123456789"
    OpenAIChatClient("m", api_key=key)

    async def fails() -> str:
        raise Fatal(f"the server said: unknown key {key}")

    result, stored = await run_stored(fails)
    assert not result.ok
    assert "unknown key [REDACTED]" in result.failure.message
    assert not leaks(key, stored)
