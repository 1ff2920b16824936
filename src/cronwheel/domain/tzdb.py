"""The tz database zones are loaded from: one, chosen explicitly, for every zone.

:mod:`zoneinfo` on its own reads the host's system zone files before the ``tzdata``
package (its TZPATH), so two hosts with different system packages map the same wall
time to different instants. Here the database is a choice (:func:`use_tz_database`):

- ``bundled`` (the default): the ``tzdata`` package's files, version
  ``tzdata.IANA_VERSION``;
- ``system``: ``/usr/share/zoneinfo``, its version read from the ``# version`` line
  of the ``tzdata.zi`` installed with it;
- a directory of compiled zones (zic's output) holding such a ``tzdata.zi``: tests,
  or pinning a version.

Without a choice, the environment variable ``CRONWHEEL_TZDATA`` decides, else
``bundled``. :func:`load_zone` reads a zone with ``ZoneInfo.from_file`` from the
chosen directory, cached per (directory, name). :mod:`cronwheel.domain.tz`
re-exports these names; every module of the package loads zones through it.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

from cronwheel.errors import UnknownTimezoneError, ValidationError

__all__ = [
    "SYSTEM_TZDIR",
    "TZDATA_ENV",
    "TzDatabase",
    "load_zone",
    "open_tz_database",
    "tz_database",
    "use_tz_database",
    "zone_digests",
    "zone_files",
    "zone_from_bytes",
    "zone_names",
]

# Names a zoneinfo directory may hold that are not zones of the tz database:
# `localtime` is a host's zone (never a default here), `Factory` a placeholder.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})
# Subdirectories of a system zoneinfo directory that repeat its zones (leap-second
# `right/` variants and `posix/` copies): not names a job may use.
_NOT_ZONE_DIRS = ("posix/", "right/")

TZDATA_ENV = "CRONWHEEL_TZDATA"
SYSTEM_TZDIR = "/usr/share/zoneinfo"


@dataclass(frozen=True, slots=True)
class TzDatabase:
    """One tz database: where it came from (``bundled``, ``system`` or a directory),
    its IANA version (``2025b``) and the directory its compiled zones are read from."""

    source: str
    version: str
    root: str

    def describe(self) -> str:
        return f"{self.version} ({self.source})"


def _bad(field: str, message: str) -> ValidationError:
    return ValidationError(message, field=field)


def _zi_version(root: Path) -> str | None:
    """The ``# version`` line heading a directory's ``tzdata.zi`` (zic's own input)."""
    try:
        with (root / "tzdata.zi").open(encoding="utf-8") as f:
            for _, line in zip(range(5), f, strict=False):
                if line.startswith("# version "):
                    return line.split(None, 2)[2].strip() or None
    except OSError:
        return None
    return None


def open_tz_database(source: str, *, field: str = "tzdata") -> TzDatabase:
    """The tz database ``source`` names: ``bundled``, ``system`` or a directory path.

    Raises :class:`ValidationError` naming ``field`` when the ``tzdata`` package is
    missing, the directory does not exist, or its version cannot be read (a directory
    must hold the ``tzdata.zi`` that zic was given, whose first line is ``# version``).
    """
    if not isinstance(source, str) or not source.strip():
        raise _bad(field, "give 'bundled', 'system' or a directory of compiled zones")
    source = source.strip()
    if source == "bundled":
        try:
            import tzdata  # type: ignore[import-untyped]
        except ImportError:
            raise _bad(field, "the 'tzdata' package is not installed") from None
        root = Path(tzdata.__file__).parent / "zoneinfo"
        return TzDatabase("bundled", str(tzdata.IANA_VERSION), str(root))
    path = Path(SYSTEM_TZDIR if source == "system" else source)
    if not path.is_dir():
        raise _bad(field, f"{str(path)!r} is not a directory of compiled zones")
    version = _zi_version(path)
    if version is None:
        raise _bad(
            field,
            f"cannot tell the version of the tz database in {str(path)!r}: "
            "it has no tzdata.zi starting with a '# version' line",
        )
    return TzDatabase(source, version, str(path.resolve()))


_active: list[TzDatabase] = []  # this process's tz database, once chosen
_active_lock = threading.Lock()


def use_tz_database(source: str | None = None, *, field: str = "tzdata") -> TzDatabase:
    """Make ``source`` (see :func:`open_tz_database`) this process's tz database and
    return it; ``None``: the environment variable ``CRONWHEEL_TZDATA``, else ``bundled``.
    Zones loaded afterwards come from it (schedules look their zone up when used)."""
    if source is None:
        env = os.environ.get(TZDATA_ENV)
        chosen = open_tz_database(env, field=TZDATA_ENV) if env else open_tz_database("bundled")
    else:
        chosen = open_tz_database(source, field=field)
    with _active_lock:
        _active[:] = [chosen]
    return chosen


def tz_database() -> TzDatabase:
    """This process's tz database (chosen by :func:`use_tz_database`, on first use by
    the environment)."""
    active = _active
    return active[0] if active else use_tz_database()


@functools.cache
def _names(root: str) -> frozenset[str]:
    base = Path(root)
    listed = base.parent / "zones" if base.name == "zoneinfo" else None
    if listed is not None and listed.is_file():  # the tzdata package lists its zones
        names = set(listed.read_text(encoding="utf-8").split())
    else:
        names = set()
        for directory, _, files in os.walk(base):
            for file in files:
                path = Path(directory, file)
                name = path.relative_to(base).as_posix()
                if name.startswith(_NOT_ZONE_DIRS):
                    continue
                try:
                    with path.open("rb") as f:
                        if f.read(4) == b"TZif":
                            names.add(name)
                except OSError:
                    continue
    return frozenset(names - _NOT_ZONES)


def zone_names(database: TzDatabase | None = None) -> frozenset[str]:
    """The zone (and link) names of ``database`` (default: this process's)."""
    return _names((database or tz_database()).root)


@functools.cache
def _load(root: str, name: str) -> ZoneInfo:
    with Path(root, name).open("rb") as f:
        return ZoneInfo.from_file(f, key=name)


def load_zone(name: str) -> ZoneInfo:
    """Load the IANA zone ``name`` (``UTC``, ``Europe/Berlin``, links like ``US/Eastern``)
    from this process's tz database (cached per database and name).

    Only names listed by the tz database are accepted, so paths, offsets such as
    ``UTC+5``, blanks and control characters are all rejected with
    :class:`UnknownTimezoneError` (field ``tz``).
    """
    database = tz_database()
    if not isinstance(name, str) or name not in _names(database.root):
        shown = repr(name)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        raise UnknownTimezoneError(
            f"unknown time zone {shown}: use an IANA name such as 'Europe/Berlin' or 'UTC'",
            field="tz",
        )
    return _load(database.root, name)


@functools.cache
def _files(root: str) -> dict[str, bytes]:
    return {name: Path(root, name).read_bytes() for name in sorted(_names(root))}


def zone_files(database: TzDatabase | None = None) -> dict[str, bytes]:
    """Each zone's compiled file (TZif bytes) of ``database`` (default: this process's),
    read once: what a leader keeps in the store so that the next version's leader has
    the old rules (:func:`zone_from_bytes`)."""
    return dict(_files((database or tz_database()).root))


def zone_from_bytes(name: str, data: bytes) -> ZoneInfo:
    """A zone from a compiled file's bytes (another tz database's rules)."""
    return ZoneInfo.from_file(io.BytesIO(data), key=name)


@functools.cache
def _digests(root: str) -> dict[str, str]:
    return {
        name: hashlib.blake2b(data, digest_size=8).hexdigest()
        for name, data in _files(root).items()
    }


def zone_digests(database: TzDatabase | None = None) -> dict[str, str]:
    """A short digest of each zone's compiled file: a zone whose digest differs between
    two databases may map wall times to other instants (one that is equal cannot)."""
    return dict(_digests((database or tz_database()).root))
