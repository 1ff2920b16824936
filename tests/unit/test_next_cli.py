"""``cronwheel next``: output formats, DST notes, and one-line errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from cronwheel.cli.main import cli, main


def run_json(*args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(cli, ["next", *args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert isinstance(data, list)
    return data


def test_json_berlin_spring_forward() -> None:
    rows = run_json(
        "30 2 * * *", "--tz", "Europe/Berlin", "--after", "2026-03-28T12:00:00Z", "--count", "2"
    )
    assert [r["utc"] for r in rows] == ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    assert [r["local"] for r in rows] == ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]
    assert rows[0]["note"].startswith("dst_gap:next_valid")
    assert rows[1]["note"] is None
    assert rows[0]["abbrev"] == "CEST"


def test_json_policies_are_applied() -> None:
    rows = run_json(
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--after",
        "2026-03-28T12:00:00Z",
        "--count",
        "1",
        "--dst-gap",
        "shift",
    )
    assert rows[0]["utc"] == "2026-03-29T01:30:00Z"
    assert rows[0]["local"] == "2026-03-29T03:30:00+02:00"
    rows = run_json(
        "30 1 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2026-10-31T12:00:00Z",
        "--count",
        "3",
        "--dst-overlap",
        "twice",
    )
    assert [r["local"] for r in rows] == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:30:00-05:00",
        "2026-11-02T01:30:00-05:00",
    ]
    assert [r["note"].split(" ")[0] if r["note"] else None for r in rows] == [
        "dst_overlap:first",
        "dst_overlap:second",
        None,
    ]


def test_default_count_and_zone() -> None:
    rows = run_json("0 * * * *", "--after", "2026-01-01T00:00:00Z")
    assert len(rows) == 5
    assert rows[0] == {
        "utc": "2026-01-01T01:00:00Z",
        "local": "2026-01-01T01:00:00+00:00",
        "abbrev": "UTC",
        "note": None,
    }


def test_after_with_offset() -> None:
    rows = run_json(
        "0 9 * * *", "--tz", "Europe/Berlin", "--after", "2026-01-01T09:00:00+01:00", "--count", "1"
    )
    assert rows[0]["utc"] == "2026-01-02T08:00:00Z"


def test_max_count() -> None:
    rows = run_json("* * * * *", "--after", "2026-01-01T00:00:00Z", "--count", "1000")
    assert len(rows) == 1000
    assert rows[-1]["utc"] == "2026-01-01T16:40:00Z"


def test_default_after_is_now(monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime

    from cronwheel.cli import next_cmd
    from cronwheel.domain.clock import FakeClock

    clock = FakeClock(datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC))
    monkeypatch.setattr(next_cmd, "SystemClock", lambda: clock)
    rows = run_json("* * * * *", "--count", "1")
    assert rows[0]["utc"] == "2026-01-01T00:01:00Z"
    result = CliRunner().invoke(cli, ["next", "*/10 * * * *", "--count", "2"])
    assert "in 9m 30s" in result.stdout
    assert "(now)" in result.stdout


def test_table_output() -> None:
    result = CliRunner().invoke(
        cli,
        [
            "next",
            "30 2 * * *",
            "--tz",
            "Europe/Berlin",
            "--after",
            "2026-03-28T00:00:00Z",
            "--count",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "30 2 * * *" in out
    assert "Europe/Berlin" in out
    assert "next_valid (default)" in out
    assert "once (default)" in out
    assert "Sat 2026-03-28 02:30:00 CET" in out
    assert "Sun 2026-03-29 03:00:00 CEST" in out
    assert "2026-03-29T01:00:00Z" in out
    assert "dst_gap:next_valid" in out
    assert "+23h 30m" in out


def test_table_says_which_policies_are_explicit() -> None:
    result = CliRunner().invoke(
        cli, ["next", "*/15 * * * *", "--after", "2026-01-01T00:00:00Z", "--dst-gap", "shift"]
    )
    assert result.exit_code == 0, result.output
    assert "shift (explicit)" in result.stdout
    assert "twice (default)" in result.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        pytest.param(["61 * * * *"], "cron: minute field: value 61", id="bad-expression"),
        pytest.param(["0 0 30 2 *"], "cron: never fires", id="never-fires"),
        pytest.param(["* * * * *", "--tz", "Mars/Olympus"], "tz: unknown time zone", id="bad-zone"),
        pytest.param(
            ["* * * * *", "--tz", "../etc/passwd"], "tz: unknown time zone", id="path-zone"
        ),
        pytest.param(["* * * * *", "--count", "0"], "--count", id="count-zero"),
        pytest.param(["* * * * *", "--count", "1001"], "--count", id="count-too-big"),
        pytest.param(["* * * * *", "--count", "many"], "--count", id="count-not-int"),
        pytest.param(["* * * * *", "--dst-gap", "later"], "--dst-gap", id="bad-gap"),
        pytest.param(["* * * * *", "--dst-overlap", "thrice"], "--dst-overlap", id="bad-overlap"),
        pytest.param(["* * * * *", "--after", "2026-01-01"], "--after: ", id="after-date-only"),
        pytest.param(
            ["* * * * *", "--after", "2026-01-01T00:00:00"], "--after: ", id="after-naive"
        ),
        pytest.param(["0\n * * * *"], "cron: control character", id="newline-in-expression"),
        pytest.param([], "EXPR", id="missing-expression"),
    ],
)
def test_errors_are_one_line_exit_2(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["next", *args])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("cronwheel: error: ")
    assert needle in lines[0]
    assert "Traceback" not in captured.err


def test_help() -> None:
    result = CliRunner().invoke(cli, ["next", "--help"])
    assert result.exit_code == 0
    assert "--dst-gap [next_valid|skip|shift]" in result.stdout
    assert "--dst-overlap [once|twice]" in result.stdout
