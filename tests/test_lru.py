import pytest

from arkhon_rheo._lru import LRU


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "b" is now the least recently used
    cache.put("c", 3)
    assert cache.get("b") is None
    assert (cache.get("a"), cache.get("c"), len(cache)) == (1, 3, 2)
    cache.put("a", 10)  # an update refreshes and replaces
    cache.put("d", 4)
    assert (cache.get("a"), cache.get("c"), cache.get("d")) == (10, None, 4)
    cache.clear()
    assert len(cache) == 0


def test_an_lru_keeps_at_least_one_entry() -> None:
    with pytest.raises(ValueError, match="at least one"):
        LRU[str, int](0)
