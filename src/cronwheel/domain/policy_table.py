"""The job policies, one row each: the single table every interface is generated from.

``App.schedule(..., **policies)`` and ``build_policies`` take these names; the CLI's
``jobs add`` flags (``--<name-with-dashes>``), the HTTP API's ``policies`` fields and
the dashboard's new-job form fields are made from :data:`POLICY_TABLE`, so a policy
exists in all of them or in none (``tests/unit/test_policy_table.py``), and the
README's policy table is checked against it.

Every row but ``retries`` is a field of :class:`~cronwheel.domain.models.JobPolicies`
(its default is that field's default); ``retries`` is the friendly spelling of
``max_attempts`` (``retries=3`` is 4 attempts; giving both is an error).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from cronwheel.domain.models import JobPolicies
from cronwheel.domain.numbers import MAX_ID, parse_decimal, parse_number
from cronwheel.domain.overlap import OverlapPolicy
from cronwheel.domain.policies import MisfirePolicy
from cronwheel.errors import ValidationError

Kind = Literal["int", "number", "duration", "choice"]
_MAX_SECONDS = 100 * 365.25 * 86400


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """One job policy: its name (keyword, API field; ``--name-with-dashes`` on the CLI),
    value kind, bounds or choices, unit and help text."""

    name: str
    kind: Kind
    help: str
    low: float | None = None  # int/number bounds, inclusive
    high: float | None = None
    choices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        numeric = self.kind in ("int", "number")
        if numeric != (self.low is not None and self.high is not None):
            raise TypeError(f"policy {self.name}: bounds are for int and number policies")
        if (self.kind == "choice") != bool(self.choices):
            raise TypeError(f"policy {self.name}: choices are for choice policies")

    @property
    def flag(self) -> str:
        """The CLI option of ``jobs add``."""
        return "--" + self.name.replace("_", "-")

    @property
    def unit(self) -> str:
        """What a value is, for help texts and the README."""
        if self.kind == "duration":
            return "seconds or text (30s, 5m, 1h30m)"
        if self.kind == "choice":
            return " / ".join(self.choices)
        return f"{'integer' if self.kind == 'int' else 'number'} {self.low:g}-{self.high:g}"

    @property
    def default(self) -> Any:
        """The default as a plain value (seconds for durations; None: no limit)."""
        if self.name == "retries":
            return JobPolicies().max_attempts - 1
        value = getattr(JobPolicies(), self.name)
        if isinstance(value, timedelta):
            return value.total_seconds()
        return value.value if isinstance(value, MisfirePolicy | OverlapPolicy) else value

    @property
    def shown_default(self) -> str:
        """The default as the README and help texts show it."""
        value = self.default
        if value is None:
            return "none"
        return f"{value:g}" if isinstance(value, float) else str(value)

    def parse_text(self, text: str) -> Any:
        """A value typed as text (a CLI flag, a form field) as ``build_policies`` takes
        it; ValidationError naming this policy when it is not one."""
        text = text.strip()
        if self.kind == "duration":
            return parse_seconds_or_duration(text, self.name)
        if self.kind == "choice":
            if text not in self.choices:
                raise ValidationError(f"must be one of {', '.join(self.choices)}", field=self.name)
            return text
        # ASCII digits only (int() and float() take '١٢', '+1', ' 1', '1_000', 'nan'):
        # the number parser of every id, limit and form number; bounds by check()
        value: float = (
            parse_number(text, self.name, high=MAX_ID)
            if self.kind == "int"
            else parse_decimal(text, self.name)
        )
        return self.check(value)

    def check(self, value: float) -> float:
        """A number within this policy's bounds, or ValidationError naming it."""
        if not math.isfinite(value) or (
            (self.low is not None and value < self.low)
            or (self.high is not None and value > self.high)
        ):
            raise ValidationError(f"must be from {self.low:g} to {self.high:g}", field=self.name)
        return value


def parse_seconds_or_duration(text: str, field: str) -> timedelta:
    """``"90"`` / ``"1.5"`` (seconds, 0 allowed) or duration text such as ``"5m"``."""
    from cronwheel.domain.schedules import parse_duration

    if text.isascii() and text[-1:].isalpha():  # a unit: "5m", "1h30m"
        return parse_duration(text, field=field)
    try:
        seconds = parse_decimal(text, field, high=_MAX_SECONDS)
    except ValidationError as exc:
        raise ValidationError(
            f"must be a number of seconds from 0 to 100 years or a duration such as 5m: "
            f"{exc.message}",
            field=field,
        ) from None
    return timedelta(seconds=seconds)


POLICY_TABLE: tuple[Policy, ...] = (
    Policy(name="retries", kind="int", low=0, high=999, help="Retries after a failed attempt."),
    Policy(
        name="max_attempts",
        kind="int",
        low=1,
        high=1000,
        help="Attempts in all (instead of retries).",
    ),
    Policy(name="retry_backoff", kind="duration", help="First retry delay (doubles, jittered)."),
    Policy(name="retry_backoff_max", kind="duration", help="Longest retry delay."),
    Policy(name="visibility_timeout", kind="duration", help="Claim lease a heartbeat renews."),
    Policy(name="timeout", kind="duration", help="Handler time limit."),
    Policy(
        name="misfire",
        kind="choice",
        choices=tuple(p.value for p in MisfirePolicy),
        help="What missed instants do after an outage.",
    ),
    Policy(
        name="misfire_grace",
        kind="duration",
        help="Lateness that is still a plain late firing, not a misfire.",
    ),
    Policy(name="catchup_window", kind="duration", help="How far back fire_all catches up."),
    Policy(
        name="max_catchup",
        kind="int",
        low=1,
        high=10_000,
        help="Most catch-up firings of fire_all.",
    ),
    Policy(name="priority", kind="number", low=0.01, high=1000, help="Claim weight."),
    Policy(
        name="max_concurrency",
        kind="int",
        low=1,
        high=10_000,
        help="Firings of the job running at once (1 for recurring jobs when unset).",
    ),
    Policy(
        name="overlap",
        kind="choice",
        choices=tuple(p.value for p in OverlapPolicy),
        help="When a firing is due while the job is at its cap.",
    ),
    Policy(name="max_buffer", kind="int", low=1, high=10_000, help="Bound of buffer_all."),
    Policy(name="cancel_grace", kind="duration", help="Cooperative-cancel deadline."),
    Policy(
        name="start_deadline",
        kind="duration",
        help="A firing not started within this is recorded MISSED.",
    ),
    Policy(name="jitter", kind="duration", help="Spread starts by up to this delay (0-1 day)."),
    Policy(
        name="lateness_objective",
        kind="duration",
        help="The p99 start lateness the job must meet (status flags breaches).",
    ),
    Policy(
        name="keep_for",
        kind="duration",
        help="Keep finished firings this long (none: the namespace's retention, 7 days).",
    ),
    Policy(
        name="keep_last",
        kind="int",
        low=0,
        high=1000,
        help="Keep the last N firings per outcome (none: the namespace's retention, 1).",
    ),
)

POLICIES_BY_NAME = {p.name: p for p in POLICY_TABLE}
POLICY_NAMES = tuple(POLICIES_BY_NAME)


def policies_from_text(values: dict[str, str]) -> dict[str, Any]:
    """Keyword arguments for ``build_policies`` from texts keyed by policy name (empty
    and missing texts are left out); ValidationError naming the first bad one."""
    out: dict[str, Any] = {}
    for name, text in values.items():
        policy = POLICIES_BY_NAME.get(name)
        if policy is None:
            raise ValidationError("is not a job policy", field=name)
        if text is not None and text.strip():
            out[name] = policy.parse_text(text)
    return out


def markdown_table() -> str:
    """The README's policy table (``tests/unit/test_policy_table.py`` compares them)."""
    lines = [
        "| policy | CLI flag | default | value | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for p in POLICY_TABLE:
        lines.append(f"| `{p.name}` | `{p.flag}` | {p.shown_default} | {p.unit} | {p.help} |")
    return "\n".join(lines)
