"""How `PostgresStore` runs its SQL in few round trips: deferred writes, pipelines, snapshots.

Scripts (`arkhon_rheo.store._postgres_sql`) run on a real connection to the test
run's throwaway server (skipped, saying why, where there are no PostgreSQL binaries).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from arkhon_rheo import StoreError
from arkhon_rheo.store._postgres_conn import run_now
from arkhon_rheo.store._postgres_sql import consistent, later, sql, transaction

if TYPE_CHECKING:
    from collections.abc import Iterator

    from arkhon_rheo.store._driver import Rows, Script

IDLE = psycopg.pq.TransactionStatus.IDLE


@pytest.fixture
def connection(postgres_url: str) -> Iterator[Any]:
    with psycopg.connect(postgres_url, autocommit=True) as made:
        made.execute("CREATE TABLE t (k integer PRIMARY KEY)")
        yield made


def _count(connection: Any) -> int:
    found: int = connection.execute("SELECT count(*) FROM t").fetchone()[0]
    return found


def test_deferred_writes_ride_with_the_next_statement_and_the_commit(connection: Any) -> None:
    def body() -> Script[Rows]:
        yield later("INSERT INTO t VALUES (%s)", (1,))
        seen: Rows = yield sql("SELECT k FROM t ORDER BY k")  # sent after the insert
        yield later("INSERT INTO t VALUES (%s)", (2,))  # sent with the COMMIT
        return seen

    assert run_now(connection, transaction(body()), "here") == [(1,)]
    assert _count(connection) == 2
    assert connection.info.transaction_status == IDLE


def test_a_deferred_write_that_fails_rolls_the_whole_transaction_back(connection: Any) -> None:
    def body() -> Script[None]:
        yield later("INSERT INTO t VALUES (%s)", (1,))
        yield sql("SELECT 1")
        yield later("INSERT INTO t VALUES (%s)", (1,))  # a duplicate: refused at the COMMIT

    with pytest.raises(StoreError) as caught:
        run_now(connection, transaction(body()), "here")
    assert caught.value.sqlstate == "23505"  # type: ignore[attr-defined]
    assert caught.value.__cause__ is None  # psycopg's error is never chained
    assert _count(connection) == 0
    assert connection.info.transaction_status == IDLE


def test_consistent_reads_return_each_statements_rows_and_leave_no_transaction(
    connection: Any,
) -> None:
    connection.execute("INSERT INTO t VALUES (1), (2)")
    reads = consistent(sql("SELECT k FROM t ORDER BY k"), sql("SELECT count(*) FROM t"))
    assert run_now(connection, reads, "here") == [[(1,), (2,)], [(2,)]]
    assert connection.info.transaction_status == IDLE
    with pytest.raises(StoreError, match="nowhere"):
        run_now(connection, consistent(sql("SELECT 1"), sql("SELECT * FROM nowhere")), "here")
    assert connection.info.transaction_status == IDLE  # rolled back, not left failed
