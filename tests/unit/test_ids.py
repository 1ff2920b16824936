"""The ids users see (``domain/ids.py``): a keyed permutation of the store's ids."""

from __future__ import annotations

import itertools
import random

import pytest

from cronwheel.domain.ids import MAX_ID, IdCodec

KEY = bytes(range(32))


def test_round_trips_and_stays_in_range() -> None:
    codec = IdCodec(KEY)
    rng = random.Random(5)
    samples = [1, 2, 3, MAX_ID - 1, MAX_ID, *(rng.randint(1, MAX_ID) for _ in range(2000))]
    for internal in samples:
        shown = codec.encode("firing", internal)
        assert 1 <= shown <= MAX_ID and codec.decode("firing", shown) == internal


def test_is_a_bijection_over_consecutive_ids() -> None:
    codec = IdCodec(KEY)
    shown = [codec.encode("firing", i) for i in range(1, 20_001)]
    assert len(set(shown)) == len(shown)
    assert shown != sorted(shown)
    # consecutive store ids land far apart: no difference counts anything
    assert sum(1 for a, b in itertools.pairwise(shown) if abs(a - b) < 2**32) < 20


def test_the_key_decides_everything() -> None:
    a, b = IdCodec(KEY), IdCodec(bytes(reversed(KEY)))
    assert [a.encode("firing", i) for i in range(1, 50)] != [
        b.encode("firing", i) for i in range(1, 50)
    ]
    assert a.encode("firing", 7) == IdCodec(KEY).encode("firing", 7)  # stable for one key


@pytest.mark.parametrize("shown", [0, -1, MAX_ID + 1, 2**63 - 1])
def test_out_of_range_decodes_to_nothing(shown: int) -> None:
    assert IdCodec(KEY).decode("firing", shown) is None


def test_refuses_what_it_cannot_encode_and_short_keys() -> None:
    with pytest.raises(ValueError, match="outside"):
        IdCodec(KEY).encode("firing", 0)
    with pytest.raises(ValueError, match="16 bytes"):
        IdCodec(b"short")


def test_jobs_and_firings_have_permutations_of_their_own() -> None:
    codec = IdCodec(KEY)
    assert all(codec.encode("job", i) != codec.encode("firing", i) for i in range(1, 200))
    assert codec.decode("job", codec.encode("job", 42)) == 42


def test_the_round_function_is_hmac_sha256_of_the_round_key() -> None:
    """The precomputed HMAC states give exactly RFC 2104's HMAC-SHA256: the shown ids
    are the ones a plain ``hmac.digest`` Feistel network gives (ids stay stable)."""
    import hmac

    from cronwheel.domain import ids

    key = bytes(range(32))

    def reference(kind: str, internal: int) -> int:
        x = internal - 1
        left, right = x >> 26, x & (2**26 - 1)
        for i in range(ids.ROUNDS):
            k = hmac.digest(key, f"cronwheel-{kind}-id-round-{i}".encode(), "sha256")
            f = int.from_bytes(hmac.digest(k, right.to_bytes(4, "big"), "sha256")[:4], "big")
            left, right = right, left ^ (f & (2**26 - 1))
        return ((left << 26) | right) + 1

    codec = ids.IdCodec(key)
    for internal in (1, 2, 3, 1000, 2**40 + 7, 2**52):
        assert codec.encode("job", internal) == reference("job", internal)
        assert codec.encode("firing", internal) == reference("firing", internal)
