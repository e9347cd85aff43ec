"""Small actors shared by the tests."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo.actors import Actor, Termination
from tests.conftest import VIRTUAL_CLOCK

#: Run an anyio test once, on trio's virtual clock (ask for the ``autojump_clock``
#: fixture to read or move it); a module's ``pytestmark = pytest.mark.anyio`` applies.
on_virtual_clock = pytest.mark.parametrize(
    "anyio_backend", [pytest.param(VIRTUAL_CLOCK, id="trio-virtual-clock")], indirect=True
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    import anyio

#: Run a bench as ``python bench/<script>`` runs it, with some of its values replaced
#: (``-c`` this, the script's path, the replacements' repr, then its own arguments).
_SMALLER = """
import ast, importlib.util, sys
path, smaller = sys.argv[1], ast.literal_eval(sys.argv[2])
sys.path[0] = path.rsplit("/", 1)[0]
spec = importlib.util.spec_from_file_location("__bench__", path)
module = importlib.util.module_from_spec(spec)
sys.modules["__bench__"] = module
spec.loader.exec_module(module)
for name, expression in smaller.items():
    assert hasattr(module, name), f"the bench has no {name} to make smaller"
    setattr(module, name, eval(expression, vars(module)))
sys.argv = [path, *sys.argv[3:]]
module.main(sys.argv[1:])
"""


class Recorder(Actor[object, object]):
    """Records every message; answers an ask with the message itself."""

    def __init__(self) -> None:
        self.seen: list[object] = []

    async def receive(self, message: object) -> object:
        self.seen.append(message)
        return message


class Gate(Actor[str, str]):
    """Blocks in its handler until released; tells the test when it has started."""

    def __init__(self, entered: anyio.Event, release: anyio.Event) -> None:
        self.entered = entered
        self.release = release
        self.handled: list[str] = []

    async def receive(self, message: str) -> str:
        if message == "block":
            self.entered.set()
            await self.release.wait()
        self.handled.append(message)
        return message.upper()


class Boom(Exception):
    pass


class Crasher(Actor[str, str]):
    """Raises `Boom` on "crash", echoes otherwise."""

    starts = 0

    async def on_start(self) -> None:
        type(self).starts += 1

    async def receive(self, message: str) -> str:
        if message == "crash":
            raise Boom("asked to crash")
        return message


class Watcher(Actor[object, object]):
    """Watches the refs it is told about and records their terminations."""

    def __init__(self, notices: list[Termination], arrived: anyio.Event) -> None:
        self.notices = notices
        self.arrived = arrived

    async def receive(self, message: object) -> object:
        from arkhon_rheo.actors import ActorRef

        assert isinstance(message, ActorRef)
        self.context.watch(message)
        return None

    async def on_terminated(self, notice: Termination) -> None:
        self.notices.append(notice)
        self.arrived.set()


def run_bench_quick(
    script: str,
    *,
    timeout: float,
    extra: tuple[str, ...] = (),
    smaller: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Run ``bench/<script> --quick`` (and ``extra`` options) and return its output per backend.

    ``smaller`` names module-level values of the bench to set before its
    ``main()`` runs, each an expression evaluated in the bench's namespace
    (``{"QUICK": "Sizes(live=2, ...)"}``): the smoke test runs the bench's code
    on sizes smaller than its ``--quick`` ones. The run must succeed with
    nothing on stderr (unclosed resources are errors), log no dead letter, and
    print exactly an asyncio and a trio section.
    """
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench" / script
    command = [str(bench)]
    if smaller:
        command = ["-c", _SMALLER, str(bench), repr(dict(smaller))]
    result = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", *command, "--quick", *extra],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        check=True,
    )
    assert result.stderr == "", result.stderr
    out = result.stdout
    assert "dead_letter" not in out
    sections = out.split("backend: ")[1:]
    backends = {section.split("\n", 1)[0].strip(): section for section in sections}
    assert list(backends) == ["asyncio", "trio"], out
    return backends


def cyclic_garbage_of(*kinds: str) -> list[str]:
    """Collect, and name the objects of ``kinds`` (type names) the collector found.

    Only the kinds a test's own actors or sessions are made of count: objects
    that earlier tests left may become garbage during a test too (an LRU cache
    letting go of an old machine's parts, say) and be collected with them.
    """
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = [type(obj).__qualname__ for obj in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return sorted(kind for kind in found if kind in kinds)
