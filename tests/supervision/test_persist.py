"""Persistence.write, then accept: a session's digest moves on only once the store has the event."""

from __future__ import annotations

import pytest

from arkhon_rheo.core._compiled import compiled
from arkhon_rheo.store import MemoryStore
from arkhon_rheo.supervision._persist import Persistence
from arkhon_rheo.testing import ReferenceState, reference_machine


def test_accept_without_a_write_before_it_is_refused_and_moves_nothing() -> None:
    machine = compiled(reference_machine())
    state = ReferenceState()
    persistence = Persistence(MemoryStore(), machine.codec, "s", digest=machine.hasher.start(state))
    before = persistence.digest.value
    with pytest.raises(RuntimeError, match=r"accept\(\) without a write\(\)"):
        persistence.accept()
    assert persistence.digest.value == before == machine.hasher.of(state)
