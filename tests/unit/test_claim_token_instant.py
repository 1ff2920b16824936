"""The instant a PostgreSQL claim token carries (store/postgres/params.py
token_instant): read exactly when the token is a claim's, None for anything else, so
a statement falls back to every partition rather than failing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronwheel.store.postgres.params import claim_instants, token_instant

AT = datetime(2026, 3, 29, 1, 30, 0, 123456, tzinfo=UTC)
US = int((AT - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 1_000_000 + 123456


def test_a_claims_token_gives_its_instant_to_the_microsecond() -> None:
    token = f"{US:x}.{'ab' * 16}"
    assert token_instant(token) == AT
    assert claim_instants([token, token]) == [AT, AT]


@pytest.mark.parametrize(
    "token",
    [
        "0123456789abcdef0123456789abcdef",  # before migration 18: no instant
        "",
        ".",
        "xyz.abc",  # not hexadecimal
        f"{'f' * 16}.{'0' * 32}",  # a negative epoch as to_hex writes it (64 bits)
        f"{'f' * 15}.{'0' * 32}",  # past datetime's range
        "-5.abc",
        " 5.abc",
    ],
)
def test_anything_else_carries_none(token: str) -> None:
    assert token_instant(token) is None
    # one such token in a batch: the batch's statement probes every partition
    assert claim_instants([f"{US:x}.{'0' * 32}", token]) is None
