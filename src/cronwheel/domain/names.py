"""What a job's name, its namespace and its task name may be."""

from __future__ import annotations

import re

from cronwheel.errors import ValidationError

NAME_MAX = 200
NAMESPACE_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
TASK_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NAME_REFUSED = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


def validate_name(name: object, field_name: str = "name") -> str:
    """Job names are free text (stored byte-exactly) but bounded and printable."""
    if not isinstance(name, str):
        raise ValidationError("must be a string", field=field_name)
    if not name or not name.strip():
        raise ValidationError("must not be empty", field=field_name)
    if len(name) > NAME_MAX:
        raise ValidationError(f"must be at most {NAME_MAX} characters", field=field_name)
    bad = _NAME_REFUSED.search(name)  # one scan in C (a batch names thousands of jobs)
    if bad is not None and _CONTROL.search(name):
        raise ValidationError("must not contain control characters", field=field_name)
    if bad is not None:
        raise ValidationError("must not contain lone surrogates", field=field_name)
    return name


def validate_namespace(namespace: object) -> str:
    if not isinstance(namespace, str) or not NAMESPACE_RE.match(namespace):
        raise ValidationError(
            "must be 1-63 characters of a-z, 0-9, '_', '.', '-' starting with a letter or digit",
            field="namespace",
        )
    return namespace


def validate_task(task: object) -> str:
    if not isinstance(task, str) or not TASK_RE.match(task):
        raise ValidationError(
            "must be a task name: a letter or '_' then letters, digits, '_', '.', ':' or '-'",
            field="task",
        )
    return task
