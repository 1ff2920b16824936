"""The ids users see: a keyed permutation of the store's sequential ids.

The store numbers jobs and firings 1, 2, 3, ... in one sequence for every namespace,
and its SQL orders and pages by those numbers. Shown as they are, two ids of one
namespace would tell how many jobs or firings every other namespace created between
them. So every id crosses the boundary (API bodies, paths and cursors, the dashboard,
the CLI) through :class:`IdCodec`: a Feistel network of ``ROUNDS`` rounds over 52 bits
(two 26-bit halves), each round function HMAC-SHA256 keyed by the cluster's secret
(created by ``migrate``, kept in the store), with round keys of their own for job ids
and for firing ids (a job and a firing never share a shown id by construction of
their sequences). It is a bijection of ``1..2**52`` onto
itself: every internal id has exactly one shown id and back, and without the key the
shown ids of consecutive objects look like independent random numbers below 2**52
(within JavaScript's exact integers). Internal order, SQL and indexes stay as they are.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from typing import Any, Literal

from cronwheel.domain.models import Firing, FiringId, Job, JobId
from cronwheel.domain.skips import SkipResult

BITS = 52
MAX_ID = 2**BITS  # shown and internal ids are 1..MAX_ID
ROUNDS = 8
_HALF = BITS // 2
_MASK = (1 << _HALF) - 1

Kind = Literal["job", "firing"]
KINDS: tuple[Kind, ...] = ("job", "firing")


_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


def _hmac_states(key: bytes) -> tuple[Any, Any]:
    """HMAC-SHA256's inner and outer hash states after the padded key (RFC 2104)."""
    if len(key) > 64:
        key = hashlib.sha256(key).digest()
    block = key.ljust(64, b"\0")
    return hashlib.sha256(block.translate(_IPAD)), hashlib.sha256(block.translate(_OPAD))


class IdCodec:
    """Internal id <-> shown id of a job or a firing, under one cluster secret (``key``,
    at least 16 bytes)."""

    __slots__ = ("_keys", "_memo")

    MEMO_MAX = 65_536  # (kind, direction, id) answers remembered: 8 HMACs each

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("the id key must be at least 16 bytes")
        self._keys: dict[str, tuple[tuple[Any, Any], ...]] = {
            kind: tuple(
                _hmac_states(hmac.digest(key, f"cronwheel-{kind}-id-round-{i}".encode(), "sha256"))
                for i in range(ROUNDS)
            )
            for kind in KINDS
        }
        self._memo: dict[tuple[str, bool, int], int] = {}

    def _f(self, states: tuple[Any, Any], half: int) -> int:
        """HMAC-SHA256(round key, half) from the key's precomputed inner and outer
        states (RFC 2104): the same digest as ``hmac.digest``, at a quarter of its cost
        (a batch of 1,000 jobs encodes 8,000 of these)."""
        inner, outer = states[0].copy(), states[1].copy()
        inner.update(half.to_bytes(4, "big"))
        outer.update(inner.digest())
        return int.from_bytes(outer.digest()[:4], "big") & _MASK

    def _permute(self, kind: Kind, x: int) -> int:
        left, right = x >> _HALF, x & _MASK
        for k in self._keys[kind]:
            left, right = right, left ^ self._f(k, right)
        return (left << _HALF) | right

    def _unpermute(self, kind: Kind, y: int) -> int:
        left, right = y >> _HALF, y & _MASK
        for k in reversed(self._keys[kind]):
            left, right = right ^ self._f(k, left), left
        return (left << _HALF) | right

    def encode(self, kind: Kind, internal: int) -> int:
        """The shown id of the job or firing whose store id is ``internal`` (1..MAX_ID)."""
        if not 1 <= internal <= MAX_ID:
            raise ValueError(f"id {internal} is outside 1..2**{BITS}")
        key = (kind, True, internal)
        shown = self._memo.get(key)
        if shown is None:
            shown = self._remember(key, self._permute(kind, internal - 1) + 1)
        return shown

    def decode(self, kind: Kind, shown: int) -> int | None:
        """The store's id of a shown job or firing id; None when ``shown`` cannot be one
        (out of range)."""
        if not 1 <= shown <= MAX_ID:
            return None
        key = (kind, False, shown)
        internal = self._memo.get(key)
        if internal is None:
            internal = self._remember(key, self._unpermute(kind, shown - 1) + 1)
        return internal

    def _remember(self, key: tuple[str, bool, int], value: int) -> int:
        if len(self._memo) >= self.MEMO_MAX:
            self._memo.clear()
        self._memo[key] = value
        return value

    def job(self, job: Job) -> Job:
        """The job as users see it (its shown id)."""
        return dataclasses.replace(job, id=JobId(self.encode("job", job.id)))

    def firing(self, firing: Firing) -> Firing:
        """The firing as users see it: its id and its job's id shown (so its
        ``idempotency_key`` names the shown job id too)."""
        return dataclasses.replace(
            firing,
            id=FiringId(self.encode("firing", firing.id)),
            job_id=JobId(self.encode("job", firing.job_id)),
        )

    def skip(self, result: SkipResult) -> SkipResult:
        """A skip's result as users see it (its firing's shown id)."""
        if result.firing_id is None:
            return result
        return dataclasses.replace(result, firing_id=self.encode("firing", result.firing_id))
