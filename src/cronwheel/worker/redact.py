"""Secrets out of recorded errors: the worker redacts before anything is written.

A :class:`Redactor` replaces each secret value, and the forms a remote server or a
command may echo it in (percent-encoded, form-encoded, JSON-escaped), with
``[redacted]``. The store never sees the secret: redacting there would be too late
(the worker's logs, and the error on its way, would hold it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

REDACTED = "[redacted]"
MIN_SECRET = 4  # shorter values would redact ordinary words: refused or not redacted


def _forms(secret: str) -> set[str]:
    return {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]}


class Redactor:
    """Replaces the given secrets (values of at least ``MIN_SECRET`` characters) in text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms = {f for s in secrets if len(s) >= MIN_SECRET for f in _forms(s)}
        self.secrets = frozenset(s for s in secrets if len(s) >= MIN_SECRET)
        ordered = sorted(forms, key=len, reverse=True)  # a longer form before its prefixes
        self._re = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        # text cut to a tail may start inside a secret: read this much more, redact, then cut
        self.margin = max((len(f.encode()) for f in forms), default=0)

    def __bool__(self) -> bool:
        return self._re is not None

    def __call__(self, text: str) -> str:
        return text if self._re is None else self._re.sub(REDACTED, text)

    def excerpt(self, raw: bytes, *, size: int, head: bool, cut: bool) -> str:
        """At most ``size`` bytes of ``raw`` redacted: its head, or its tail, where ``raw``
        holds ``margin`` bytes more than those. ``cut``: ``raw`` was cut out of a longer
        text on that far side (the end for a head, the start for a tail), so a secret may
        lie there cut in two, unrecognisable: those ``margin`` characters are dropped."""
        text = self(raw.decode("utf-8", "replace"))
        if cut and self.margin:  # a cut secret is untouched there: drop it
            text = text[: -self.margin] if head else text[self.margin :]
        data = text.encode()
        data = data[:size] if head else data[len(data) - size :] if len(data) > size else data
        return data.decode("utf-8", "ignore")

    def __repr__(self) -> str:
        return f"Redactor({len(self.secrets)} secrets)"  # never the values

    def union(self, other: Redactor) -> Redactor:
        return Redactor(self.secrets | other.secrets)
