"""`StoreConformance`: the behaviour every `Store` must have, as a pytest class to subclass.

The suite needs pytest and anyio's pytest plugin (installed with anyio); it
runs each test on asyncio and on trio by itself. Its groups, one class each:

* sessions: creating, records, listing oldest first, a duplicate id refused;
* appends: events read back equal, numbers refused (nothing written), loading
  (latest snapshot plus later events), ``snapshot_at``, history, counters;
* inbox: posts (idempotent, bounded), pending order, applying in an append,
  timers, parking (refused while a message is due; releases the lease), waking;
* leases: one owner, renewal, release, taking over a dead owner, expiry;
* fencing: a stale holder's append refused (nothing written), the new holder's
  committed, a lease that ran out untaken still its owner's, across instances;
* work queue (a `WorkQueue` only): claiming sessions with something to do,
  never one to two claimers, waking on a post of an accepted kind, waiting;
* effects: intents committed once, outcomes stored once, retries, order;
* failures: a store not open, unknown sessions, values that are not JSON;
* shared storage: reopening, closing commits what was acknowledged, leases and
  ledgers seen by a second store on the same storage;
* upgrades: storage an older version wrote (when the subclass gives one).
"""

from __future__ import annotations

from ._conformance_failures import FailureConformance
from ._conformance_fencing import FencingConformance
from ._conformance_inbox import InboxConformance
from ._conformance_leases import EffectConformance, LeaseConformance
from ._conformance_log import AppendConformance, SessionConformance
from ._conformance_queue import QueueConformance
from ._conformance_shared import SharedStorageConformance, UpgradeConformance

__all__ = ["StoreConformance"]


class StoreConformance(
    SessionConformance,
    AppendConformance,
    InboxConformance,
    LeaseConformance,
    FencingConformance,
    QueueConformance,
    EffectConformance,
    FailureConformance,
    SharedStorageConformance,
    UpgradeConformance,
):
    """The store conformance suite: subclass it in a test module, with a ``new_store`` fixture.

    ::

        import pytest
        from arkhon_rheo.testing import StoreConformance


        class TestMyStore(StoreConformance):
            @pytest.fixture
            def new_store(self, tmp_path):
                return lambda: MyStore(tmp_path / "sessions.db")

    ``new_store`` returns a callable that makes a new store, not entered yet;
    every store one test makes lives on that test's own storage, which the
    stores share (a file, a database): a store opened after another closed
    reads what it wrote, and two open at once see each other's leases. A store
    that keeps nothing between instances (in memory) sets ``shared_storage =
    False``: the tests that need a second instance skip, saying why. A store
    that runs on one backend only names it: ``backends = ("asyncio",)``. A
    store that acknowledges plain appends before they commit (an ``ASYNC``
    durability mode), and so reports a fencing refusal at the session's next
    append, sets ``deferred_refusals = True``. The work queue tests run on a
    store that is a `WorkQueue` and skip on others; one whose ``wait_for_work``
    wakes on another instance's post sets ``notifies_across_instances = True``.

    To run the schema upgrade tests, override ``old_store_factory`` (a callable
    that makes a store on a copy of storage an older version wrote, each call
    the same copy) and ``old_store_histories`` (its sessions, oldest first, each
    with its events as that version read them back, as JSON data).

    Each test is a method of this class: deselect one with ``-k``, or override
    it in the subclass (with a reason) where a store differs on purpose.
    """
