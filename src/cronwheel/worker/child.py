"""The child side of a process-isolated attempt (``isolation="process"``).

The worker starts ``child_main`` in a fresh process (forked from a forkserver that
imported the worker's task modules). It imports the task's module (then, if the task
is not registered there, the app's module: ``MODULE`` of ``cronwheel worker
MODULE:APP``), finds the registry that holds the task by name, builds the handler's
:class:`Context` and calls the handler; what happened goes back over the pipe as a small tuple:

- ``("ok", None)``;
- ``("retry", (seconds or None, reason))`` and ``("cancel", reason)``: the signals;
- ``("error", text)``: any other exception (a CronwheelError as ``Type: message``,
  else its traceback, at most 8000 characters).

The pipe also carries the worker's word: ``"cancel"`` turns ``ctx.cancel_requested``
true (and wakes ``ctx.wait_cancelled``). If the worker goes away (the pipe closes),
the child exits at once: no handler outlives its worker. The child runs in a
process group of its own, so the worker's SIGTERM/SIGKILL reaches what it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import os
import signal
import threading
import traceback
from collections.abc import Sequence
from typing import Any

from cronwheel.domain.models import Firing
from cronwheel.errors import CronwheelError
from cronwheel.signals import Cancel, Retry
from cronwheel.worker.context import Context, make_context
from cronwheel.worker.hooks import ChildEntry
from cronwheel.worker.registry import TaskDef, TaskRegistry

ERROR_MAX = 8000
# exit code of a child whose worker went away (its pipe closed) while it ran
ORPHANED = 70


def find_task(module_names: Sequence[str], task_name: str) -> TaskDef:
    """The task ``task_name`` of a registry found in the first of ``module_names`` that
    has one holding it (a ``TaskRegistry``, or an object with a ``registry`` attribute
    holding one, such as an ``App``): the task's own module, then the app's module."""
    for module_name in module_names:
        module = importlib.import_module(module_name)
        for value in list(vars(module).values()):
            registry: object = value
            if not isinstance(value, TaskRegistry):
                if inspect.ismodule(value) or inspect.isclass(value) or inspect.isroutine(value):
                    continue
                try:
                    registry = getattr(value, "registry", None)
                except Exception:  # an object whose attributes are computed: not an App
                    continue
            if isinstance(registry, TaskRegistry) and task_name in registry:
                return registry.get(task_name)
    raise CronwheelError(
        f"task {task_name!r} is not registered by any App of {', '.join(module_names)} "
        "(a process-isolated task must be defined at the top level of an importable module)"
    )


def _watch(conn: Any, ctx: Context) -> None:
    """The worker's messages; its going away ends this process."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            os._exit(ORPHANED)
        if message == "cancel":
            ctx.request_cancel()


def _outcome(exc: BaseException) -> tuple[str, Any]:
    # bounded: the worker reads the outcome once the child has exited, so it must fit
    # in the pipe's buffer
    if isinstance(exc, Retry):
        after = None if exc.after is None else exc.after.total_seconds()
        return ("retry", (after, str(exc.reason)[:ERROR_MAX]))
    if isinstance(exc, Cancel):
        return ("cancel", str(exc.reason)[:ERROR_MAX])
    if isinstance(exc, CronwheelError):
        return ("error", f"{type(exc).__name__}: {exc}"[-ERROR_MAX:])
    text = "".join(traceback.format_exception(exc))
    return ("error", text[-ERROR_MAX:])


def child_main(
    modules: list[str],
    task_name: str,
    firing: Firing,
    shown: Firing | None,
    claim_token: str,
    worker_id: str,
    conn: Any,
    entry: tuple[ChildEntry, dict[str, str]] | None = None,
) -> None:
    """Run one attempt's handler in this (child) process; report over ``conn``. ``shown``:
    the firing with the ids users see (its context's ids, as in the worker's process);
    ``entry``: the worker's hooks' entry and the context it continues (worker/hooks.py),
    called around the handler."""
    # a fresh signal state: SIGTERM kills (the worker's stop), Ctrl-C in the worker's
    # terminal is the worker's business (it finishes its handlers)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    ctx = make_context(firing, claim_token, worker_id)
    ctx.shown = shown
    threading.Thread(target=_watch, args=(conn, ctx), name="cronwheel-cancel", daemon=True).start()
    outcome: tuple[str, Any] = ("ok", None)
    try:
        task = find_task(modules, task_name)

        def call() -> None:
            if task.is_async:
                asyncio.run(task.fn(ctx, *firing.args, **firing.kwargs))
            else:
                task.fn(ctx, *firing.args, **firing.kwargs)

        if entry is None:
            call()
        else:
            entry[0](entry[1], call)
    except BaseException as exc:  # everything goes back to the worker
        outcome = _outcome(exc)
    conn.send(outcome)
