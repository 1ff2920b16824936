"""Results of operations that both the store and the API's clients hand back."""

from __future__ import annotations

from dataclasses import dataclass

from cronwheel.domain.models import Firing

CANCEL_OUTCOMES = ("cancelled", "cancel_requested", "already_final")


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelResult:
    outcome: str  # "cancelled" | "cancel_requested" | "already_final"
    firing: Firing
