"""The sandbox's promises, each against a tool that tries to break it (issue 28, items 9-10).

Every test that a plain subprocess can keep runs twice: inside bubblewrap
(``isolation="require"``; skipped where bubblewrap is missing or cannot make
namespaces) and as a plain subprocess (``isolation="none"``). The promises only
namespaces keep run inside bubblewrap only.

Whether a process is dead is read from a FIFO it holds open for writing: the
reader sees the end of the FIFO once every writer is gone, and not before.
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import pytest
from structlog.testing import capture_logs

from arkhon_rheo import ConfigurationError
from arkhon_rheo.errors import ToolTimeout
from arkhon_rheo.protocols import ToolCall
from arkhon_rheo.tools import IsolationUnavailable, Sandbox, Toolbox, tool
from tests.support.sandbox_tools import (
    connect,
    forge,
    forge_through_proc,
    fork_bomb,
    hang_with_helpers,
    leave_behind,
    returns_early,
    spy,
    trespass,
    write_file,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from arkhon_rheo.tools import Tool

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox's runner forks (POSIX)"),
]

#: How long a test waits at most for killed processes to be gone: a bound, not a delay.
BOUND = 60.0
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
# The tools, each trying to break the sandbox, are in tests/support/sandbox_tools.py.


# --- Helpers and fixtures --------------------------------------------------------


def call(name: str, arguments: Any = None) -> ToolCall:
    return ToolCall(id="c", name=name, arguments=json.dumps(arguments or {}))


def sandboxed(fn: Callable[..., Any], timeout: float = 120, **options: Any) -> Tool[..., Any]:
    return tool(sandbox=Sandbox(**options), timeout=timeout)(fn)


def _bubblewrap() -> str:
    found = Sandbox().enforcement()
    if found.backend != "bubblewrap":
        pytest.skip(f"bubblewrap is not usable here: {found.note}")
    return "require"


@pytest.fixture(params=["bubblewrap", "process"])
def isolation(request: pytest.FixtureRequest) -> str:
    """Each promise on both backends: ``"require"`` (bubblewrap) and ``"none"``."""
    return "none" if request.param == "process" else _bubblewrap()


@pytest.fixture
def bubblewrap() -> str:
    """Only bubblewrap: the promises a plain subprocess cannot keep (see docs/how-to/tools.md)."""
    return _bubblewrap()


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A directory the tool may write (read_write=...), open to nobody (root's tools)."""
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o777)
    return directory


class Watch:
    """A FIFO that the tool's helpers hold open: its end means they are all dead."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "alive"
        os.mkfifo(self.path)
        self.path.chmod(0o666)
        self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)

    def close(self) -> None:
        os.close(self.fd)

    async def until_all_dead(self) -> bytes:
        """What the helpers wrote, once none holds the FIFO (within `BOUND` seconds)."""
        return await anyio.to_thread.run_sync(self._read_to_end, abandon_on_cancel=True)

    async def until_started(self, count: int) -> None:
        """Wait until ``count`` helpers wrote their mark."""
        self.seen = b""
        while len(self.seen) < count:
            await anyio.wait_readable(self.fd)
            self.seen += os.read(self.fd, 64)

    def _read_to_end(self) -> bytes:
        data = getattr(self, "seen", b"")
        deadline = time.monotonic() + BOUND
        while (left := deadline - time.monotonic()) > 0:
            if select.select([self.fd], [], [], left)[0]:
                chunk = os.read(self.fd, 64)
                if not chunk:
                    return data
                data += chunk
        raise AssertionError(f"the tool's helpers still hold {self.path} after {BOUND} s")


@pytest.fixture
def watch(shared: Path) -> Iterator[Watch]:
    watching = Watch(shared)
    yield watching
    watching.close()


# --- Item 9: a call that ends leaves nothing behind; a returned tool is not timed out --


async def test_a_tool_that_returned_is_not_timed_out_and_its_helper_is_killed(
    isolation: str, shared: Path, watch: Watch
) -> None:
    box = Toolbox(sandboxed(returns_early, read_write=[shared], isolation=isolation))
    answer = await box.call(call("returns_early", {"fifo": str(watch.path)}))
    assert (answer.is_error, answer.content) == (False, "done")
    assert await watch.until_all_dead() == b"+"


async def test_a_timeout_kills_every_descendant(isolation: str, shared: Path, watch: Watch) -> None:
    hang = sandboxed(hang_with_helpers, timeout=4, read_write=[shared], isolation=isolation)
    with pytest.raises(ToolTimeout, match="did not finish within 4 s"):
        await Toolbox(hang).call(call("hang_with_helpers", {"fifo": str(watch.path)}))
    # On a loaded machine the tool may not have started its helpers in 4 s; those it
    # started are dead (the cancelled call below waits for all three to start).
    assert set(await watch.until_all_dead()) <= {ord("+")}


async def test_a_cancelled_call_kills_every_descendant(
    isolation: str, shared: Path, watch: Watch
) -> None:
    box = Toolbox(sandboxed(hang_with_helpers, read_write=[shared], isolation=isolation))
    async with anyio.create_task_group() as group:
        group.start_soon(box.call, call("hang_with_helpers", {"fifo": str(watch.path)}))
        await watch.until_started(3)
        group.cancel_scope.cancel()
    assert await watch.until_all_dead() == b"+++"


# --- Item 10: each promise against a tool that tries to break it -----------------


async def test_helpers_left_after_returning_are_killed_setsid_ones_too(
    isolation: str, shared: Path, watch: Watch
) -> None:
    box = Toolbox(sandboxed(leave_behind, read_write=[shared], isolation=isolation))
    answer = await box.call(call("leave_behind", {"fifo": str(watch.path)}))
    assert (answer.is_error, answer.content) == (False, "left 3")
    assert await watch.until_all_dead() == b"+++"


async def test_the_tool_cannot_see_the_callers_process_or_secrets(
    bubblewrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARKHON_TEST_SECRET", "hunter2-secret")
    assert await anyio.Path(f"/proc/{os.getpid()}/environ").read_bytes()  # something to steal
    box = Toolbox(sandboxed(spy, isolation=bubblewrap))
    answer = await box.call(call("spy", {"caller": os.getpid(), "secret": "hunter2-secret"}))
    assert not answer.is_error, answer.content
    seen = json.loads(answer.content)
    assert seen["env"] is False
    assert seen["environ"] == seen["mem"] == seen["cmdline"] == "ENOENT"
    assert seen["signal"] == "ESRCH"
    assert seen["found"] == []
    assert os.getpid() not in seen["pids"]
    assert len(seen["pids"]) <= 3  # its runner (PID 1), itself and what runs `ls`, if any


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the caller's, outside the sandbox, that anyone may read and write."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the caller's data")
    victim.chmod(0o666)
    tmp_path.chmod(0o777)
    return victim


async def test_the_tool_cannot_read_or_write_the_callers_files(
    bubblewrap: str, victim: Path, shared: Path
) -> None:
    readable = victim.with_name("readable.txt")
    await anyio.Path(readable).write_text("you may read this")
    await anyio.Path(readable).chmod(0o666)
    box = Toolbox(
        sandboxed(trespass, read_write=[shared], read_only=[readable], isolation=bubblewrap)
    )
    arguments = {
        "victim": str(victim),
        "shared": str(shared),
        "readable": str(readable),
        "install": sys.prefix,
    }
    answer = await box.call(call("trespass", arguments))
    assert not answer.is_error, answer.content
    seen = json.loads(answer.content)
    assert seen.pop("write install") in {"EROFS", "EACCES"}  # read-only, and not its own
    assert seen == {
        "read victim": "ENOENT",  # the caller's directories are empty...
        "write victim": "EROFS",  # ...read-only (a file cannot be made there)...
        "create beside victim": "EROFS",
        "victim's dir holds": "readable.txt shared",  # ...and hold only what it was given
        "read shadow": "ENOENT",  # /etc holds only what programs need
        "write own dir": "ok",
        "write shared": "ok",
        "read readable": "ok",
        "write readable": "EROFS",
    }
    assert await anyio.Path(victim).read_text() == "the caller's data"
    assert await anyio.Path(readable).read_text() == "you may read this"
    assert sorted([p.name async for p in anyio.Path(victim.parent).iterdir()]) == [
        "readable.txt",
        "shared",
        "victim.txt",
    ]
    assert await anyio.Path(shared / "from-tool.txt").read_text() == "hello"


async def test_the_tool_has_no_network_unless_allowed(bubblewrap: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        port = server.getsockname()[1]
        closed = Toolbox(sandboxed(connect, isolation=bubblewrap))
        answer = await closed.call(call("connect", {"port": port}))
        assert answer.content.startswith("refused: "), answer.content
        with pytest.raises(BlockingIOError):
            server.accept()  # a connection would wait here, accepted or not
        opened = Toolbox(sandboxed(connect, isolation=bubblewrap, network=True))
        assert (await opened.call(call("connect", {"port": port}))).content == "connected"
        connection, _ = server.accept()
        with connection:
            connection.setblocking(True)
            assert connection.recv(2) == b"hi"


async def test_a_fork_bomb_hits_the_process_limit_and_fails_cleanly(
    isolation: str, shared: Path, watch: Watch
) -> None:
    if isolation == "none" and ROOT:
        pytest.skip("the kernel exempts root from RLIMIT_NPROC (bubblewrap runs it as nobody)")
    box = Toolbox(sandboxed(fork_bomb, max_processes=8, isolation=isolation))
    answer = await box.call(call("fork_bomb", {"attempts": 500}))
    assert answer.is_error
    assert answer.content.startswith("BlockingIOError: [Errno 11]"), answer.content
    assert "its process limit is 8" in answer.content


async def test_a_file_past_the_size_limit_cannot_be_written(isolation: str) -> None:
    box = Toolbox(sandboxed(write_file, max_file_bytes=1000, isolation=isolation))
    assert (await box.call(call("write_file", {"size": 1000}))).content == "1000"
    answer = await box.call(call("write_file", {"size": 1001}))
    assert answer.is_error
    assert answer.content.startswith("OSError: [Errno 27] File too large"), answer.content
    assert "(its file-size limit is 1000 bytes)" in answer.content


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("return", "genuine"),
        ("raise", "ValueError: genuine failure"),
        ("exit", "tool 'forge' ended without a valid result"),
    ],
)
async def test_the_tool_cannot_forge_its_result(isolation: str, mode: str, expected: str) -> None:
    answer = await Toolbox(sandboxed(forge, isolation=isolation)).call(
        call("forge", {"mode": mode})
    )
    if mode == "exit":  # its stderr tail, quoted in the message, holds what it wrote
        assert answer.content.startswith(expected), answer.content
    else:
        assert answer.content == expected


async def test_the_tool_cannot_write_into_its_runner_or_caller_through_proc(
    bubblewrap: str,
) -> None:
    box = Toolbox(sandboxed(forge_through_proc, isolation=bubblewrap))
    answer = await box.call(call("forge_through_proc", {"caller": os.getpid()}))
    assert not answer.is_error, answer.content
    seen = json.loads(answer.content)
    assert "written" not in seen.values(), seen
    assert seen["1"] == "EACCES"  # the runner (PID 1) is not dumpable, nor the tool's user's


# --- Strict mode and what each platform gets ---------------------------------------


async def test_strict_mode_refuses_to_run_without_bubblewrap(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-bwrap")
    strict = Sandbox(isolation="require", bwrap=missing)
    with pytest.raises(IsolationUnavailable, match="apt-get install bubblewrap") as info:
        strict.enforcement()
    assert isinstance(info.value, ConfigurationError)
    assert f"bubblewrap (bwrap) was not found at {missing}" in str(info.value)
    box = Toolbox(sandboxed(write_file, isolation="require", bwrap=missing))
    with pytest.raises(IsolationUnavailable, match="requires isolation"):
        await box.call(call("write_file", {"size": 1}))
    assert not (tmp_path / "big").exists()


async def test_auto_mode_runs_without_bubblewrap_and_says_what_it_lacks(tmp_path: Path) -> None:
    degraded = Sandbox(bwrap=str(tmp_path / "no-such-bwrap"))
    found = degraded.enforcement()
    assert (found.backend, found.filesystem, found.network_blocked) == ("process", False, False)
    assert "was not found" in found.note
    box = Toolbox(sandboxed(write_file, bwrap=degraded.bwrap))
    assert (await box.call(call("write_file", {"size": 3}))).content == "3"


async def test_auto_mode_without_bubblewrap_warns_once_that_isolation_is_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH, nor at the path given
    missing = str(tmp_path / "no-such-bwrap")
    box = Toolbox(sandboxed(write_file, bwrap=missing))
    with capture_logs() as logs:
        for size in (1, 2):
            assert (await box.call(call("write_file", {"size": size}))).content == str(size)
    (warned,) = [entry for entry in logs if entry["event"] == "sandbox_not_isolated"]
    assert warned["log_level"] == "warning"
    assert f"bubblewrap (bwrap) was not found at {missing}" in warned["reason"]
    assert "apt-get install bubblewrap" in warned["reason"]
    assert warned["effect"].startswith("isolation is off")
    assert "Sandbox(isolation='require') refuses" in warned["effect"]
    strict = Toolbox(sandboxed(write_file, isolation="require", bwrap=missing))
    with pytest.raises(IsolationUnavailable, match="apt-get install bubblewrap"):
        await strict.call(call("write_file", {"size": 1}))


def test_enforcement_with_bubblewrap_lists_every_promise() -> None:
    found = Sandbox(cpu_seconds=5, memory_bytes=1 << 30).enforcement()
    if found.backend != "bubblewrap":
        pytest.skip(f"bubblewrap is not usable here: {found.note}")
    assert found.filesystem
    assert found.network_blocked
    assert found.parent_hidden
    assert found.kills_every_descendant
    assert found.limits == {"cpu", "memory", "processes", "file_size"}
    assert found.user == (65534 if ROOT else None)
    assert Sandbox(network=True).enforcement().network_blocked is False


async def test_a_path_given_to_the_sandbox_must_exist(tmp_path: Path) -> None:
    missing = tmp_path / "not-made-yet"
    box = Toolbox(sandboxed(write_file, read_write=[missing]))
    with pytest.raises(ConfigurationError, match=r"not-made-yet' .* does not exist; create it"):
        await box.call(call("write_file", {"size": 1}))


def test_bad_isolation_options_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="isolation must be one of 'auto', 'require'"):
        Sandbox(isolation="strict")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="read_write takes absolute paths"):
        Sandbox(read_write=["data"])
    with pytest.raises(ConfigurationError, match="max_processes must be a positive int"):
        Sandbox(max_processes=0)
    with pytest.raises(ConfigurationError, match="max_file_bytes must be a positive int"):
        Sandbox(max_file_bytes=True)
