"""Numbers typed as text (ids, limits, counts in a path, query, header or form field).

One parser for all of them, so none takes what Python's ``int``/``float`` take beyond
plain ASCII: ``int("١٢")`` is 12, ``int(" 1")``, ``int("+1")`` and ``int("1_000")``
are numbers too, and ``str.isdigit`` is true for ``"²"``, which ``int`` refuses (a
500 where it was trusted). :func:`parse_number` accepts ASCII digits only, with an
optional ASCII fraction where a decimal is wanted, of bounded length, and raises
:class:`~cronwheel.errors.ValidationError` naming the field and the reason.
"""

from __future__ import annotations

import re

from cronwheel.errors import ValidationError

__all__ = ["MAX_DIGITS", "MAX_ID", "parse_decimal", "parse_number"]

MAX_ID = 2**63 - 1  # ids are signed 64-bit integers in both stores
MAX_DIGITS = 19  # len(str(MAX_ID))
_WHOLE = re.compile(r"[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)


def _ascii(text: object, field: str, pattern: re.Pattern[str], max_length: int) -> str:
    if not isinstance(text, str):
        raise ValidationError("must be a number written in ASCII digits", field=field)
    if not text:
        raise ValidationError("must not be empty: write a number in ASCII digits", field=field)
    if len(text) > max_length:
        raise ValidationError(f"is longer than {max_length} characters", field=field)
    if not text.isascii() or pattern.fullmatch(text) is None:
        what = "ASCII digits 0-9" if pattern is _WHOLE else "ASCII digits and one '.'"
        raise ValidationError(
            f"must be written in {what} only (no sign, blank, underscore or other digits)",
            field=field,
        )
    return text


def _within(value: float, field: str, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ValidationError(f"must be from {low:g} to {high:g}", field=field)


def parse_number(
    text: object, field: str, *, low: int = 0, high: int = MAX_ID, max_length: int = MAX_DIGITS
) -> int:
    """The whole number ``text`` writes in ASCII digits, within ``[low, high]``: no sign,
    blank, underscore, exponent or other script's digits; at most ``max_length``
    characters (so ``int`` never parses a huge text)."""
    value = int(_ascii(text, field, _WHOLE, max_length))
    _within(value, field, low, high)
    return value


def parse_decimal(
    text: object, field: str, *, low: float = 0, high: float = MAX_ID, max_length: int = 32
) -> float:
    """As :func:`parse_number`, with an optional ASCII fraction (``"0.5"``)."""
    value = float(_ascii(text, field, _DECIMAL, max_length))
    _within(value, field, low, high)
    return value
