"""Benchmarks of durable sessions: cycles per second through `SQLiteStore`, and bytes on disk.

In one process and one run, against files in a temporary directory, it measures:

(1) one session: a looping machine THINKING -> ACTING -> OBSERVING -> THINKING ...
    with trivial stages (no model), each commit durable in the store (3 commits a
    cycle), for N cycles; us per cycle and cycles/s in ``sync`` and ``batched``
    mode, on both drivers (``auto``, which is the thread driver, and
    ``"aiosqlite"``, an optional extra: its lines are skipped with a note
    without it), next to (a) one transaction per commit (``batch_max=1``: no
    group commit) and (b) LangGraph's SQLite checkpointer (``AsyncSqliteSaver``)
    running the same three-node graph for as many cycles, with its
    ``durability="sync"`` (each checkpoint written before the next step, as our
    ``sync``) and with its default ``"async"``. Target: ours in ``sync`` at least
    7x faster per cycle than LangGraph's checkpointer. Next to ours in ``sync``:
    the floor, the same event rows written by plain `sqlite3` (WAL,
    ``synchronous=FULL``, the session's row updated in each) in as many
    transactions as ours committed, on the same file system. Target: within 1.3x.
    Two lines below it give a thread writer's own floor: the floor plus one
    loop -> thread -> loop hand-off per transaction (measured alone), and that
    plus the runtime with no store. No design that writes on another thread
    can beat the second; a baseline's ``sync`` line divided by it is the most
    any such design could gain over that baseline on this machine.
(2) sessions: N concurrent sessions x 10 cycles, N = 100 and 1,000 (``--quick``:
    10 and 100), in ``sync`` and ``batched`` mode, against (a) and (b) doing the
    same. All N are started first and park at a gate in their first stage (the
    session's record, lease and first checkpoint written); the clock runs from
    opening the gate until every result is in. At N = 1,000 (``--quick``: 100)
    the two references run 3 cycles per session (they take ~1-3 ms per
    transaction: 10 cycles would cost minutes); cycles/s are comparable, the
    header says how many cycles they ran. ``write tx`` counts the write
    transactions of the timed phase, lease releases and status writes included
    (they ride in the group-commit batches); ``largest batch``, the most events one
    transaction carried.
    Target: >= 5,000 cycles/s at 1,000 sessions in ``batched``.
(3) disk: one session whose state grows by one step per cycle, after 10 and
    1,000 cycles (``--quick``: 10 and 200): the bytes of the database file plus its
    ``-wal`` and ``-shm`` files after the store (or LangGraph's saver) is closed,
    ours (default ``snapshot_every``) vs LangGraph. Target: <= 1 MB after 1,000.
(4) the interpreter lock: plain `sqlite3` in a thread, one transaction updating
    500 rows (``executemany``, as a writer thread does for 500 sessions' rows),
    with the main thread idle and then running Python the whole time, as the
    event loop does while 1,000 sessions step; and the same rows in one
    multi-row statement. Every time the thread gives the lock up (SQLite runs
    each row without it) it must wait for the busy thread to hand it back,
    which the interpreter forces only every ``sys.getswitchinterval()``. This is
    why a writer thread cannot overlap a busy loop: it is the floor under the
    1,000-session ``batched`` line.

(5) where a durable commit's time goes: the largest crowd of (2) run again with
    no store, with `MemoryStore` (every commit persisted: encoded, digested,
    handed to a store, the session suspended until it is stored, but no SQL and
    no thread) and with ours ``batched``; for each, cycles/s, the event loop's
    own CPU time per commit (``time.thread_time``), the other threads' (the
    SQLite writer's: SQL, commit) and the cyclic GC's share of the loop's (with
    its collections of generations 0/1/2 on the loop's thread). The
    CPU times are the figures to compare on a busy machine: the gap between no
    store and `MemoryStore` is the runtime's persistence path (encoding, digest,
    suspension, the GC walking what a waiting commit keeps alive), the gap from
    `MemoryStore` to SQLite is the SQLite store's own. ``--only-cpu`` runs (5) alone.

The same lines of ours run under trio too (``--backend both``, the default; the
store uses its thread driver there); (a) and (b) run on asyncio only, as LangGraph
does. LangGraph is a reference, not a dependency: ``pip install -e .[bench]``;
without it its lines are skipped with a note.

At each N, ours batched also runs once with ``gc.set_threshold(50_000, 20, 100)``
("tuned GC"), the tuning a service running thousands of sessions might choose (the
library itself never touches the GC).

Timings use ``time.perf_counter()``, the cyclic GC on (as deployed); the one-session
lines are the best of 2, the rest run once. Nothing is asserted on timing: the
targets printed are goals, not checks. structlog is set to drop records below
WARNING before anything is timed. The default run takes about two minutes.

Run it from the repository root::

    python bench/store.py                     # asyncio, then trio (minutes)
    python bench/store.py --backend asyncio   # one backend only
    python bench/store.py --quick             # smaller sizes (seconds)
    python bench/store.py --profile           # also profile ours under cProfile
    python bench/store.py --only-cpu          # (5) alone
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import gc
import importlib
import io
import itertools
import logging
import math
import operator
import platform
import pstats
import queue
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import anyio
import structlog
from _loop import SESSION_CYCLES, Gate, build_machine, check_finished

from arkhon_rheo import (
    AgentSystem,
    Lifecycle,
)
from arkhon_rheo.protocols import Durability
from arkhon_rheo.store import MemoryStore, SQLiteStore
from arkhon_rheo.testing import ReferenceState

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterator

    from arkhon_rheo import SessionHandle
    from arkhon_rheo.store._driver import DriverName

BACKENDS = ("asyncio", "trio")
L = Lifecycle
SYNC, BATCHED = Durability.SYNC, Durability.BATCHED
#: Cycles each session of the references runs in (2) from `Sizes.reference_crowd` sessions on.
REFERENCE_CYCLES = 3
MISSING = "langgraph not installed: pip install -e .[bench]"
NO_AIOSQLITE = "aiosqlite not installed (an optional extra): pip install -e .[aiosqlite]"


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each measurement does."""

    #: Cycles of the one session in (1).
    cycles: int
    #: Session counts of (2).
    sessions: tuple[int, ...]
    #: Cycles of the two runs of (3).
    disk: tuple[int, int]
    #: Best of how many runs, for (1).
    repeat: int
    #: From this many sessions on, the references run `REFERENCE_CYCLES` per session in (2).
    reference_crowd: int
    #: Transactions of each case of (4).
    gil_transactions: int = 10


FULL = Sizes(cycles=300, sessions=(100, 1_000), disk=(10, 1_000), repeat=2, reference_crowd=1_000)
QUICK = Sizes(
    cycles=40, sessions=(10, 100), disk=(10, 200), repeat=1, reference_crowd=100, gil_transactions=2
)


# -- the machine (ours) -----------------------------------------------------------------


# -- measuring ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    """One timed run: N sessions x ``cycles`` from the gate to the last result."""

    sessions: int
    cycles: int
    seconds: float
    #: Write transactions (lease and status writes included) and events appended
    #: during the timed phase, and the most events one transaction carried (ours only).
    transactions: int = 0
    appended: int = 0
    largest: int = 0
    #: Bytes of the database, ``-wal`` and ``-shm`` files once closed.
    size: int = 0
    #: With ``capture``: the event rows ours wrote, and the events table's SQL.
    rows: tuple[tuple[Any, ...], ...] = ()
    schema: str = ""

    @property
    def total(self) -> int:
        return self.sessions * self.cycles

    @property
    def rate(self) -> float:
        """Cycles per second."""
        return self.total / self.seconds

    @property
    def us(self) -> float:
        """Microseconds per cycle (of the whole crowd)."""
        return self.seconds / self.total * 1e6


def file_bytes(directory: Path) -> int:
    """The bytes of every file in ``directory`` (the database and its -wal, -shm files)."""
    return sum(entry.stat().st_size for entry in directory.iterdir() if entry.is_file())


async def start_all(
    count: int, start: Callable[[int], Coroutine[Any, Any, None]], gate: Gate
) -> None:
    """Start ``count`` sessions concurrently, and wait until all are parked at the gate."""
    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(start, index)
    await gate.all_in.wait()


async def crowd(
    system: AgentSystem,
    count: int,
    cycles: int,
    gate: Gate,
    at_gate: Callable[[], object] = lambda: None,
) -> float:
    """Start ``count`` sessions at the gate, open it, and return the seconds until all end.

    ``at_gate`` is called once every session is parked, just before the clock starts.
    """
    machine = build_machine(gate, name="bench-store-loop")
    handles: list[SessionHandle[ReferenceState]] = []

    async def start(index: int) -> None:
        handles.append(await system.start(machine, ReferenceState(cycles=cycles)))

    await start_all(count, start, gate)
    at_gate()
    started = time.perf_counter()
    gate.open.set()
    for handle in handles:
        result = await handle.result()
        check_finished(result.state, result.exit_reason, cycles)
    return time.perf_counter() - started


async def ours(
    count: int,
    cycles: int,
    durability: Durability,
    *,
    driver: DriverName = "auto",
    batch_max: int = 1024,
    capture: bool = False,
) -> Run:
    """N of our sessions x ``cycles``, each commit durable in a fresh `SQLiteStore`.

    With ``capture``, the run also returns the event rows it wrote (for `floor`).
    """
    gate = Gate(count)
    with tempfile.TemporaryDirectory(prefix="arkhon-bench-") as tmp:
        directory = Path(tmp)
        store = SQLiteStore(
            directory / "sessions.db", durability=durability, driver=driver, batch_max=batch_max
        )
        async with store, AgentSystem(store=store, max_steps=3 * cycles + 10) as system:
            statistics = [store.statistics()]
            elapsed = await crowd(
                system, count, cycles, gate, lambda: statistics.append(store.statistics())
            )
            before, after = statistics[-1], store.statistics()
        size = file_bytes(directory)
        rows, schema = read_events(directory / "sessions.db") if capture else ((), "")
    return Run(
        count,
        cycles,
        elapsed,
        transactions=after.transactions - before.transactions,
        appended=after.appended - before.appended,
        largest=after.largest_batch,
        size=size,
        rows=rows,
        schema=schema,
    )


def read_events(path: Path) -> tuple[tuple[tuple[Any, ...], ...], str]:
    """The event rows of the store file at ``path``, and its events table's SQL."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        (schema,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()
        rows = tuple(db.execute("SELECT * FROM events ORDER BY 1, 2"))
    return rows, schema


def floor(run: Run) -> Run:
    """The same event rows as ``run``, written by plain `sqlite3` in as many fsynced transactions.

    WAL and ``synchronous=FULL`` (as ours in ``sync``), in a new file in the same
    temporary directory (the same file system); each transaction inserts its
    share of the rows (in order) and updates the session's row, as ours does.
    """
    count = max(run.transactions, 1)
    rows = run.rows
    with (
        tempfile.TemporaryDirectory(prefix="arkhon-bench-floor-") as tmp,
        contextlib.closing(sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)) as db,
    ):
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute(run.schema)
        db.execute("CREATE TABLE sessions (id INTEGER PRIMARY KEY, last_seq INTEGER, updated REAL)")
        db.execute("INSERT INTO sessions VALUES (1, 0, 0.0)")
        insert = f"INSERT INTO events VALUES ({', '.join('?' * len(rows[0]))})"
        bounds = [len(rows) * i // count for i in range(count + 1)]
        started = time.perf_counter()
        for start, end in itertools.pairwise(bounds):
            db.execute("BEGIN IMMEDIATE")
            for row in rows[start:end]:
                db.execute(insert, row)
            db.execute(
                "UPDATE sessions SET last_seq = ?, updated = ? WHERE id = 1",
                (end, time.time()),
            )
            db.execute("COMMIT")
        seconds = time.perf_counter() - started
    largest = max(b - a for a, b in itertools.pairwise(bounds))
    return Run(
        run.sessions, run.cycles, seconds, transactions=count, appended=len(rows), largest=largest
    )


async def in_memory(count: int, cycles: int) -> Run:
    """The same sessions with no store at all (``path=None``): the ceiling of the runtime."""
    async with AgentSystem(path=None, max_steps=3 * cycles + 10) as system:
        elapsed = await crowd(system, count, cycles, Gate(count))
    return Run(count, cycles, elapsed)


# -- LangGraph (the reference) --------------------------------------------------------


class GraphState(TypedDict):
    """LangGraph's state for the same loop: the same fields, ``steps`` appended to."""

    user_input: str
    cycles: int
    iteration: int
    thought: str | None
    observation: str | None
    steps: Annotated[list[list[Any]], operator.add]


def langgraph_modules() -> tuple[Any, Any] | None:
    """``(langgraph.graph, langgraph.checkpoint.sqlite.aio)``, or None if not installed."""
    try:
        graph = importlib.import_module("langgraph.graph")
        saver = importlib.import_module("langgraph.checkpoint.sqlite.aio")
    except ImportError:
        return None
    return graph, saver


def build_graph(graph: Any, gate: Gate) -> Any:
    """think -> act -> observe -> think ... -> END after ``cycles`` cycles (uncompiled)."""

    async def think(state: GraphState) -> dict[str, Any]:
        await gate.wait()
        return {"thought": "use the calculator"}

    async def act(state: GraphState) -> dict[str, Any]:
        return {"steps": [[state["iteration"], "calc", "42"]]}

    async def observe(state: GraphState) -> dict[str, Any]:
        return {"observation": state["steps"][-1][2], "iteration": state["iteration"] + 1}

    def route(state: GraphState) -> str:
        return str(graph.END) if state["iteration"] >= state["cycles"] else "think"

    builder = graph.StateGraph(GraphState)
    builder.add_node("think", think)
    builder.add_node("act", act)
    builder.add_node("observe", observe)
    builder.add_edge(graph.START, "think")
    builder.add_edge("think", "act")
    builder.add_edge("act", "observe")
    builder.add_conditional_edges("observe", route, ["think", graph.END])
    return builder


async def langgraph(modules: tuple[Any, Any], count: int, cycles: int, durability: str) -> Run:
    """N LangGraph threads x ``cycles``, checkpointed by ``AsyncSqliteSaver`` to one file."""
    graph, saver_module = modules
    gate = Gate(count)
    builder = build_graph(graph, gate)
    with tempfile.TemporaryDirectory(prefix="arkhon-bench-lg-") as tmp:
        directory = Path(tmp)
        async with saver_module.AsyncSqliteSaver.from_conn_string(
            str(directory / "checkpoints.db")
        ) as saver:
            await saver.setup()
            app = builder.compile(checkpointer=saver)

            async def start(index: int) -> None:
                group.start_soon(invoke, index)

            async def invoke(index: int) -> None:
                state: GraphState = {
                    "user_input": "what is 6 times 7?",
                    "cycles": cycles,
                    "iteration": 0,
                    "thought": None,
                    "observation": None,
                    "steps": [],
                }
                config = {
                    "configurable": {"thread_id": f"session-{index}"},
                    "recursion_limit": 3 * cycles + 10,
                }
                result = await app.ainvoke(state, config, durability=durability)
                if len(result["steps"]) != cycles:
                    raise RuntimeError(f"langgraph ran {len(result['steps'])} of {cycles} cycles")

            async with anyio.create_task_group() as group:
                await start_all(count, start, gate)
                started = time.perf_counter()
                gate.open.set()
            elapsed = time.perf_counter() - started
        size = file_bytes(directory)
    return Run(count, cycles, elapsed, size=size)


# -- the report -----------------------------------------------------------------------


async def best(
    repeat: int, measure: Callable[..., Coroutine[Any, Any, Run]], *args: Any, **kwargs: Any
) -> Run:
    """The fastest of ``repeat`` runs of ``measure(*args, **kwargs)``."""
    runs = [await measure(*args, **kwargs) for _ in range(repeat)]
    return min(runs, key=lambda run: run.seconds)


def seconds_of(run: Run) -> float:
    return run.seconds


def per_tx(run: Run) -> str:
    if not run.transactions:
        return ""
    return f"   {run.transactions:>6,} write tx, largest batch {run.largest:>5,} events"


async def handoff_us(rounds: int) -> float:
    """Microseconds for the loop to wake a waiting thread and be woken back by it.

    Every durable commit makes this round trip (the writer thread owns the
    connection): it is part of the floor of a thread writer, on top of the
    fsynced transaction itself. Best of two runs of ``rounds`` round trips.
    """
    token = anyio.lowlevel.current_token()
    call_soon, native = token.backend_class.run_sync_soon, token.native_token
    inbox: queue.SimpleQueue[anyio.Event | None] = queue.SimpleQueue()

    def worker() -> None:
        while (event := inbox.get()) is not None:
            call_soon(event.set, (), native)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    best_us = float("inf")
    try:
        for _ in range(2):
            started = time.perf_counter()
            for _ in range(rounds):
                event = anyio.Event()
                inbox.put(event)
                await event.wait()
            best_us = min(best_us, (time.perf_counter() - started) / rounds * 1e6)
    finally:
        inbox.put(None)
        thread.join()
    return best_us


def gil_cost(rows: int = 500, transactions: int = 10) -> tuple[float, float, float]:
    """Milliseconds per transaction of ``rows`` updates in a thread: idle main, busy main, bulk.

    The third figure is the busy case with the rows in one multi-row statement
    (``UPDATE ... FROM (VALUES ...)``, SQLite 3.33 and later; ``nan`` before).
    """
    with tempfile.TemporaryDirectory(prefix="arkhon-bench-gil-") as tmp:
        db = sqlite3.connect(Path(tmp) / "gil.db", isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("CREATE TABLE s (id TEXT PRIMARY KEY, last_seq INTEGER, at REAL)")
            ids = [f"session-{i}" for i in range(rows)]
            db.executemany("INSERT INTO s VALUES (?, 0, 0.0)", [(i,) for i in ids])
            bulk = (
                "UPDATE s SET last_seq = last_seq + 1, at = v.column2 FROM (VALUES "
                + ",".join(["(?, ?)"] * rows)
                + ") AS v WHERE s.id = v.column1"
            )

            def many() -> None:
                db.executemany(
                    "UPDATE s SET last_seq = last_seq + 1, at = ? WHERE id = ?",
                    [(1.0, i) for i in ids],
                )

            def one() -> None:
                db.execute(bulk, [value for i in ids for value in (i, 1.0)])

            def timed(body: Callable[[], None], busy: bool) -> float:
                seconds: list[float] = []
                stop = threading.Event()

                def writer() -> None:
                    for _ in range(transactions):
                        started = time.perf_counter()
                        db.execute("BEGIN IMMEDIATE")
                        body()
                        db.execute("COMMIT")
                        seconds.append(time.perf_counter() - started)
                    stop.set()

                thread = threading.Thread(target=writer)
                thread.start()
                if busy:
                    spins = 0
                    while not stop.is_set():
                        spins += 1  # Python on this thread, as a busy event loop runs
                thread.join()
                return sum(seconds) / len(seconds) * 1e3

            idle = timed(many, busy=False)
            busy = timed(many, busy=True)
            single = timed(one, busy=True) if sqlite3.sqlite_version_info >= (3, 33) else math.nan
        finally:
            db.close()
    return idle, busy, single


def report_gil(transactions: int) -> None:
    idle, busy, single = gil_cost(transactions=transactions)
    interval = sys.getswitchinterval() * 1e3
    print(
        f"  (4) the interpreter lock: a 500-row update in a thread, {idle:6.2f} ms a transaction "
        f"with the main thread idle, {busy:8.2f} ms with it running Python "
        f"({busy / idle:,.0f}x; switch interval {interval:g} ms); in one statement, busy: "
        f"{single:6.2f} ms",
        flush=True,
    )


def line(label: str, run: Run, extra: str = "") -> None:
    print(
        f"      {label:<44} {run.us:8.0f} us/cycle {run.rate:8,.0f} cycles/s{per_tx(run)}{extra}",
        flush=True,
    )


async def report_one(sizes: Sizes, backend: str, modules: tuple[Any, Any] | None) -> None:
    cycles = sizes.cycles
    print(
        f"  (1) one session, {cycles:,} cycles (3 durable commits each; best of {sizes.repeat}):",
        flush=True,
    )
    with_aiosqlite = backend == "asyncio" and package_version("aiosqlite") is not None
    drivers: tuple[DriverName, ...] = ("auto", "aiosqlite") if with_aiosqlite else ("auto",)
    if backend == "asyncio" and not with_aiosqlite:
        print(f"      driver=aiosqlite: {NO_AIOSQLITE}", flush=True)
    runs: dict[tuple[Durability, str], Run] = {}
    writer_floor = 0.0
    for durability in (SYNC, BATCHED):
        for driver in drivers:
            run = await best(sizes.repeat, ours, 1, cycles, durability, driver=driver)
            runs[durability, driver] = run
            name = "aiosqlite" if driver == "aiosqlite" else "threads"
            extra = ""
            if driver == "aiosqlite":
                speed = run.seconds / runs[durability, "auto"].seconds
                extra = f"   auto/aiosqlite speed {speed:4.2f}x"
            line(f"ours {durability.value:<7} driver={driver} ({name})", run, extra)
            if durability is SYNC and driver == "auto":
                captured = await ours(1, cycles, SYNC, capture=True)
                bottom = min((floor(captured) for _ in range(sizes.repeat)), key=seconds_of)
                line(
                    "floor: plain sqlite3, same rows and fsynced tx",
                    bottom,
                    f"   ours sync/floor {run.us / bottom.us:5.2f}x   (target <= 1.3x)",
                )
                # The thread writer's own floor: the fsynced transactions plus one
                # loop -> thread -> loop hand-off per transaction.
                hop = await handoff_us(2_000 if cycles >= 100 else 200)
                per_tx = bottom.seconds / max(bottom.transactions, 1) * 1e6
                with_hop = (per_tx + hop) / per_tx
                print(
                    f"      {'floor + one thread hand-off per tx':<44} "
                    f"{bottom.us * with_hop:8.0f} us/cycle   hand-off {hop:5.1f} us per tx "
                    f"= {with_hop:4.2f}x the floor before any work of ours",
                    flush=True,
                )
                writer_floor = bottom.us * with_hop
    memory = await best(sizes.repeat, in_memory, 1, cycles)
    line("ours, no store (runtime alone)", memory)
    # A thread writer can do no better than the fsynced transactions, one hand-off
    # each and the runtime's own work: compare a baseline's `sync` line with this.
    ideal = writer_floor + memory.us
    print(
        f"      {'floor + hand-off + runtime alone':<44} {ideal:8.0f} us/cycle   "
        f"ours sync is {runs[SYNC, 'auto'].us / ideal:4.2f}x it: a thread writer's floor",
        flush=True,
    )
    if backend != "asyncio":
        return
    ours_sync = runs[SYNC, "auto"]
    baseline = await best(sizes.repeat, ours, 1, cycles, SYNC, batch_max=1)
    line("(a) one tx per commit, sync", baseline)
    if modules is None:
        print(f"      (b) {MISSING}", flush=True)
        return
    for mode in ("sync", "async"):
        run = await best(sizes.repeat, langgraph, modules, 1, cycles, mode)
        default = ", its default" if mode == "async" else ""
        line(f"(b) langgraph durability={mode}{default}", run)
        if mode == "sync":
            fastest = min((runs[SYNC, driver] for driver in drivers), key=lambda r: r.seconds)
            print(
                f"          langgraph sync / ours sync: {run.us / ours_sync.us:5.2f}x (auto), "
                f"{run.us / fastest.us:5.2f}x (fastest driver)   (target >= 7x)",
                flush=True,
            )


#: The GC thresholds a service running thousands of sessions might set (docs: Performance).
TUNED_GC = (50_000, 20, 100)


@contextlib.contextmanager
def gc_threshold(thresholds: tuple[int, int, int]) -> Iterator[None]:
    """Run the block with other cyclic-GC thresholds (collecting first)."""
    before = gc.get_threshold()
    gc.collect()
    gc.set_threshold(*thresholds)
    try:
        yield
    finally:
        gc.set_threshold(*before)


async def report_crowds(sizes: Sizes, backend: str, modules: tuple[Any, Any] | None) -> None:
    for count in sizes.sessions:
        reference_cycles = REFERENCE_CYCLES if count >= sizes.reference_crowd else SESSION_CYCLES
        print(
            f"  (2) sessions N={count:,}, {SESSION_CYCLES} cycles each"
            + (
                f" (references: {reference_cycles} each)"
                if reference_cycles != SESSION_CYCLES and backend == "asyncio"
                else ""
            )
            + ", run once:",
            flush=True,
        )
        mine: dict[Durability, Run] = {}
        for durability in (SYNC, BATCHED):
            run = mine[durability] = await ours(count, SESSION_CYCLES, durability)
            target = (
                "   (target >= 5,000 cycles/s)" if count == 1_000 and durability is BATCHED else ""
            )
            line(f"ours {durability.value}", run, target)
        with gc_threshold(TUNED_GC):
            tuned = await ours(count, SESSION_CYCLES, BATCHED)
        line(
            "ours batched, tuned GC",
            tuned,
            f"   {tuned.rate / mine[BATCHED].rate:4.2f}x the default GC",
        )
        memory = await in_memory(count, SESSION_CYCLES)
        line(
            "ours, no store (runtime alone)",
            memory,
            f"   ours batched takes {mine[BATCHED].us / memory.us:4.2f}x its time",
        )
        if backend != "asyncio":
            continue
        for durability in (SYNC, BATCHED):
            run = await ours(count, reference_cycles, durability, batch_max=1)
            ratio = mine[durability].rate / run.rate
            line(f"(a) one tx per commit, {durability.value}", run, f"   ours/(a) {ratio:5.2f}x")
        if modules is None:
            print(f"      (b) {MISSING}", flush=True)
            continue
        run = await langgraph(modules, count, reference_cycles, "sync")
        line(
            "(b) langgraph durability=sync",
            run,
            f"   ours sync/(b) {mine[SYNC].rate / run.rate:5.2f}x   "
            f"ours batched/(b) {mine[BATCHED].rate / run.rate:5.2f}x",
        )


async def report_disk(sizes: Sizes, modules: tuple[Any, Any] | None) -> None:
    print(
        "  (3) bytes on disk, one session, state growing by one step a cycle "
        "(db + -wal + -shm, after close):",
        flush=True,
    )
    for cycles in sizes.disk:
        run = await ours(1, cycles, SYNC)
        text = f"      after {cycles:>5,} cycles: ours {run.size / 1e6:7.3f} MB"
        if modules is not None:
            reference = await langgraph(modules, 1, cycles, "sync")
            text += (
                f"   langgraph {reference.size / 1e6:8.3f} MB   "
                f"langgraph/ours {reference.size / run.size:6.1f}x"
            )
        if cycles == 1_000:
            text += "   (target <= 1 MB)"
        print(text, flush=True)
    if modules is None:
        print(f"      {MISSING}", flush=True)


class CpuMeter:
    """The loop thread's CPU, the process's, and the cyclic GC's on the loop thread."""

    def __init__(self) -> None:
        self.gc = 0.0
        #: Collections of each generation on the loop thread.
        self.collections = [0, 0, 0]
        self._gc_started = 0.0
        self._loop = threading.get_ident()

    def _collecting(self, phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != self._loop:
            return
        if phase == "start":
            self._gc_started = time.thread_time()
        else:
            self.gc += time.thread_time() - self._gc_started
            self.collections[info["generation"]] += 1

    async def measure(
        self, run: Callable[[], Coroutine[Any, Any, Run]]
    ) -> tuple[Run, float, float, float]:
        """``run()``, and the seconds of CPU of its loop thread, other threads and the GC."""
        self.gc = 0.0
        self.collections = [0, 0, 0]
        gc.callbacks.append(self._collecting)
        try:
            loop, process = time.thread_time(), time.process_time()
            result = await run()
            loop, process = time.thread_time() - loop, time.process_time() - process
        finally:
            gc.callbacks.remove(self._collecting)
        return result, loop, process - loop, self.gc


async def in_memory_store(count: int, cycles: int) -> Run:
    """The same sessions persisted to a `MemoryStore`: the persistence path without SQL."""
    gate = Gate(count)
    async with (
        MemoryStore() as store,
        AgentSystem(store=store, max_steps=3 * cycles + 10) as system,
    ):
        elapsed = await crowd(system, count, cycles, gate)
    return Run(count, cycles, elapsed)


async def report_cpu(sizes: Sizes) -> None:
    count = max(sizes.sessions)
    commits = count * SESSION_CYCLES * 3
    print(
        f"  (5) where a durable commit's time goes, N={count:,} (CPU per commit, "
        "whole run: start and the timed cycles):",
        flush=True,
    )
    meter = CpuMeter()
    cases = (
        ("no store (runtime alone)", functools.partial(in_memory, count, SESSION_CYCLES)),
        ("MemoryStore", functools.partial(in_memory_store, count, SESSION_CYCLES)),
        ("ours batched", functools.partial(ours, count, SESSION_CYCLES, BATCHED)),
    )
    base_rate = base_cpu = 0.0
    for label, run in cases:
        result, loop, other, collecting = await meter.measure(run)
        other = max(other, 0.0)  # the two clocks tick apart: no thread of its own reads ~0
        total = loop + other
        if not base_rate:
            base_rate, base_cpu = result.rate, total
        print(
            f"      {label:<26} {result.rate:8,.0f} cycles/s ({result.rate / base_rate:6.1%})   "
            f"loop {loop / commits * 1e6:6.1f} us (GC {collecting / commits * 1e6:5.1f}, "
            f"collections {'/'.join(map(str, meter.collections))})  "
            f"other threads {other / commits * 1e6:5.1f} us per commit   "
            f"no store / this, CPU {base_cpu / total:6.1%}",
            flush=True,
        )


async def run_backend(sizes: Sizes, backend: str, only_cpu: bool = False) -> None:
    if only_cpu:
        await report_cpu(sizes)
        return
    modules = langgraph_modules() if backend == "asyncio" else None
    await report_one(sizes, backend, modules)
    await report_crowds(sizes, backend, modules)
    await report_cpu(sizes)
    if backend == "asyncio":
        await report_disk(sizes, modules)
        report_gil(sizes.gil_transactions)


# -- profile --------------------------------------------------------------------------


#: Where a profiled function belongs: the first pattern found in "path:function".
LAYERS = (
    ("select.epoll", "waiting in the event loop (the SQLite thread: SQL, fsync)"),
    ("epoll", "waiting in the event loop (the SQLite thread: SQL, fsync)"),
    ("arkhon_rheo/store", "arkhon store: encode, queue, writer, plan"),
    ("arkhon_rheo/supervision", "arkhon supervision: step, commit, validation"),
    ("arkhon_rheo/core", "arkhon supervision: step, commit, validation"),
    ("arkhon_rheo/system", "arkhon supervision: step, commit, validation"),
    ("arkhon_rheo/actors", "arkhon actors: mailbox, cell, ask"),
    ("arkhon_rheo/protocols", "arkhon protocols: Patch, StateView, History, Machine"),
    ("aiosqlite", "aiosqlite: queue, futures"),
    ("sqlite3", "sqlite3 calls on this thread"),
    ("json", "json encode/decode"),
    ("/anyio/", "anyio: threads, checkpoints, Event, cancel scopes"),
    ("sniffio", "anyio: threads, checkpoints, Event, cancel scopes"),
    ("threading.py", "threading, queue: hand-offs to the SQLite thread"),
    ("queue.py", "threading, queue: hand-offs to the SQLite thread"),
    ("lock", "threading, queue: hand-offs to the SQLite thread"),
    ("/asyncio/", "asyncio: event loop, handles, futures"),
    ("selectors.py", "asyncio: event loop, handles, futures"),
    ("_asyncio.", "asyncio: event loop, handles, futures"),
    ("contextvars", "asyncio: event loop, handles, futures"),
    ("/trio/", "trio: scheduler"),
    ("pydantic", "pydantic: model_copy, validation, dump"),
    ("copy.py", "pydantic: model_copy, validation, dump"),
    ("bench/store.py", "the bench's own trivial stages"),
)
BUILTINS = "builtins called from every layer (dict.get, len, ...)"


def profile(backend: str, label: str, count: int, cycles: int, durability: Durability) -> None:
    """Run one of our measurements under cProfile; print own time by layer and the top."""
    profiler = cProfile.Profile()
    profiler.enable()
    run = anyio.run(functools.partial(ours, count, cycles, durability), backend=backend)
    profiler.disable()
    print(
        f"profile of {label} on {backend}: N={count:,} x {cycles:,} cycles, "
        f"{run.us:,.0f} us/cycle, {run.rate:,.0f} cycles/s under the profiler "
        "(main thread only, start phase included)",
        flush=True,
    )
    layers: dict[str, float] = {}
    for entry in profiler.getstats():
        code = entry.code
        where = code if isinstance(code, str) else f"{code.co_filename}:{code.co_name}"
        layer = next((name for pattern, name in LAYERS if pattern in where), BUILTINS)
        layers[layer] = layers.get(layer, 0.0) + entry.inlinetime
    total = sum(layers.values())
    print("  own time by layer:", flush=True)
    for layer, seconds in sorted(layers.items(), key=lambda item: -item[1]):
        print(f"    {seconds / total:6.1%}  {layer}", flush=True)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(15)
    lines = out.getvalue().splitlines()
    start = next((i for i, text in enumerate(lines) if "ncalls" in text), 0)
    print("  by tottime:", flush=True)
    for text in lines[start:]:
        if text.strip():
            print(f"    {text}", flush=True)


# -- the run --------------------------------------------------------------------------


def package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    parser.add_argument(
        "--profile", action="store_true", help="also profile ours (one session sync, crowd batched)"
    )
    parser.add_argument(
        "--only-cpu",
        action="store_true",
        help="run only (5), where a durable commit's time goes (CPU per commit)",
    )
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    sizes = QUICK if args.quick else FULL
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    versions = (
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"anyio {version('anyio')}, aiosqlite {package_version('aiosqlite') or 'not installed'}"
    )
    if "trio" in backends:
        versions += f", trio {version('trio')}"
    for name in ("langgraph", "langgraph-checkpoint-sqlite"):
        if (found := package_version(name)) is not None:
            versions += f", {name} {found}"
    print(
        f"arkhon_rheo store bench ({versions}){', quick' if args.quick else ''}: one session "
        f"x {sizes.cycles:,} cycles, sessions {', '.join(f'{n:,}' for n in sizes.sessions)} "
        f"x {SESSION_CYCLES} cycles, disk after {' and '.join(f'{n:,}' for n in sizes.disk)} "
        f"cycles; files in {tempfile.gettempdir()}",
        flush=True,
    )
    for backend in backends:
        print(f"backend: {backend}", flush=True)
        started = time.perf_counter()
        anyio.run(run_backend, sizes, backend, args.only_cpu, backend=backend)
        print(f"  ({time.perf_counter() - started:.1f} s)", flush=True)
    if args.profile:
        for backend in backends:
            profile(backend, "(1) ours sync", 1, sizes.cycles, SYNC)
            crowd = max(sizes.sessions)
            profile(backend, f"(2) ours batched N={crowd:,}", crowd, SESSION_CYCLES, BATCHED)


if __name__ == "__main__":
    main(sys.argv[1:])
