"""Prints the API's requests/s (slow; never asserts timings)."""

from __future__ import annotations

import pytest

from tests.api.bench_api import measure


@pytest.mark.slow
def test_api_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    results = measure(400)
    with capsys.disabled():
        for name, rate in results.items():
            print(f"\n{name:16} {rate:8.0f} req/s", end="")
    assert set(results) == {"create_job x1", "create_job x8", "get_firing x1", "get_firing x8"}
