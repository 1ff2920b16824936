"""The tz database is a choice (domain/tzdb.py): bundled by default, the system's or a
directory by opt-in, never wherever zoneinfo's TZPATH points; a bad choice is refused
with an error naming the field."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import tzdata as tzdata_package

from cronwheel import App
from cronwheel.domain.schedules import cron
from cronwheel.domain.tzdb import (
    SYSTEM_TZDIR,
    TZDATA_ENV,
    TzDatabase,
    load_zone,
    open_tz_database,
    tz_database,
    use_tz_database,
    zone_digests,
    zone_names,
)
from cronwheel.errors import UnknownTimezoneError, ValidationError
from tests.contract.test_tzdata import build_tzdb


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    before = tz_database()
    yield
    use_tz_database(before.source)


def test_bundled_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TZDATA_ENV, raising=False)
    db = use_tz_database()
    assert db.source == "bundled"
    assert db.version == tzdata_package.IANA_VERSION
    assert "Europe/Berlin" in zone_names()
    assert load_zone("Europe/Berlin").key == "Europe/Berlin"


def test_the_environment_chooses_and_a_bad_value_names_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db = build_tzdb(tmp_path / "v", "2099a", "lastSun")
    monkeypatch.setenv(TZDATA_ENV, db.source)
    assert use_tz_database() == db
    monkeypatch.setenv(TZDATA_ENV, str(tmp_path / "missing"))
    with pytest.raises(ValidationError) as err:
        use_tz_database()
    assert err.value.field == TZDATA_ENV
    assert "is not a directory" in err.value.message
    assert tz_database() == db  # a refused choice changes nothing


@pytest.mark.skipif(
    not Path(SYSTEM_TZDIR, "tzdata.zi").is_file(), reason="no system tzdata.zi on this host"
)
def test_system_is_read_from_usr_share_zoneinfo() -> None:
    db = open_tz_database("system")
    first = Path(SYSTEM_TZDIR, "tzdata.zi").read_text(encoding="utf-8").splitlines()[0]
    assert first == f"# version {db.version}"
    use_tz_database("system")
    assert "posix/Europe/Berlin" not in zone_names()  # a copy, not a name jobs use
    assert load_zone("Europe/Berlin").utcoffset(datetime(2026, 7, 1)) is not None


def test_a_directory_without_a_version_is_refused(tmp_path: Path) -> None:
    for bad, words in (
        (str(tmp_path), "cannot tell the version"),
        (str(tmp_path / "nope"), "is not a directory"),
        ("  ", "give 'bundled', 'system' or a directory"),
    ):
        with pytest.raises(ValidationError) as err:
            open_tz_database(bad, field="tzdata")
        assert err.value.field == "tzdata"
        assert words in err.value.message
    with pytest.raises(ValidationError) as err:
        App("memory://", tzdata=str(tmp_path))
    assert err.value.field == "tzdata"


def test_zones_come_from_the_chosen_database_only(tmp_path: Path) -> None:
    a = build_tzdb(tmp_path / "a", "2099a", "lastSun")
    b = build_tzdb(tmp_path / "b", "2099b", "Sun>=8")
    use_tz_database(a.source)
    assert zone_names() == {"Test/Zone", "Test/Other", "Etc/UTC", "UTC"}
    with pytest.raises(UnknownTimezoneError):
        load_zone("Europe/Berlin")  # not in this database, whatever the host has
    # one schedule object computes with whichever database is the process's
    schedule = cron("30 9 20 3 *", "Test/Zone")
    after = datetime(2030, 1, 1, tzinfo=UTC)
    assert schedule.next_after(after) == datetime(2030, 3, 20, 8, 30, tzinfo=UTC)
    use_tz_database(b.source)
    assert schedule.next_after(after) == datetime(2030, 3, 20, 7, 30, tzinfo=UTC)
    # only the zone whose rules changed has another digest
    da, db = zone_digests(a), zone_digests(b)
    assert [z for z in da if da[z] != db[z]] == ["Test/Zone"]


def test_describe(tmp_path: Path) -> None:
    db = TzDatabase("bundled", "2025b", "/x")
    assert db.describe() == "2025b (bundled)"


def test_the_cli_option_refuses_a_bad_value_and_hands_a_good_one_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from cronwheel.cli.main import cli

    store = f"sqlite:///{tmp_path / 'x.db'}"
    result = CliRunner().invoke(cli, ["scheduler", "--store", store, "--tzdata", "/nope"])
    assert result.exit_code == 2
    assert "--tzdata" in result.output and "is not a directory" in result.output
    monkeypatch.setenv(TZDATA_ENV, str(tmp_path))
    result = CliRunner().invoke(cli, ["worker", "--store", store])
    assert result.exit_code == 2
    assert "CRONWHEEL_TZDATA" in result.output and "cannot tell the version" in result.output
    # a good value becomes the process's and the environment of the processes it starts
    db = build_tzdb(tmp_path / "v", "2099a", "lastSun")
    monkeypatch.delenv(TZDATA_ENV)
    result = CliRunner().invoke(cli, ["api", "--tzdata", db.source, "--port", "99999"])
    assert result.exit_code == 2  # the bad port, checked after the eager --tzdata
    assert tz_database() == db
    assert os.environ[TZDATA_ENV] == db.source
    monkeypatch.delenv(TZDATA_ENV)
