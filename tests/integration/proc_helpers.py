"""A handler defined away from any App: ``proc_tasks`` registers it (``borrowed``)."""

from __future__ import annotations

import json
import os

from cronwheel import Context


def borrowed(ctx: Context, out: str) -> None:
    with open(out, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "key": ctx.idempotency_key}) + "\n")
