"""Per-namespace virtual clocks of one transaction (domain.policies.fair_deadline)."""

from __future__ import annotations

from cronwheel.domain.policies import fair_deadline


class FairClocks:
    """The transaction first learns each namespace's stored clock (:meth:`seen`, from a
    row it locked or read under the writer lock); every firing's virtual deadline is
    then computed here, in insertion order; the caller writes :attr:`clocks` back with
    its inserts (the SQL keeps the greater of the stored and the new value)."""

    __slots__ = ("clocks",)

    def __init__(self) -> None:
        self.clocks: dict[str, int] = {}

    def seen(self, namespace: str, vclock: int) -> None:
        self.clocks.setdefault(namespace, int(vclock))

    def deadline(self, namespace: str, priority: float, due_us: int) -> int:
        vdeadline, self.clocks[namespace] = fair_deadline(self.clocks[namespace], due_us, priority)
        return vdeadline
