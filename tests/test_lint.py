"""The test command also checks types and lint, so CI and users run one command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_ruff_is_clean() -> None:
    result = _run("ruff", "check", "src", "tests")
    if result.returncode != 0:
        pytest.fail(result.stdout[-5000:] + result.stderr[-2000:])


def test_mypy_strict_is_clean() -> None:
    result = _run("mypy", "--no-error-summary", "src/cronwheel")
    if result.returncode != 0:
        pytest.fail(result.stdout[-5000:] + result.stderr[-2000:])
