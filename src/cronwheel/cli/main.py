"""The ``cronwheel`` command line: thin — parse, call, print.

Errors a user caused (bad flags, bad schedules, unknown jobs) print exactly one
line on stderr, ``cronwheel: error: <field>: <reason>``, and exit with code 2;
nothing is written to the store. Each sub-command lives in its own module and
is imported lazily so ``cronwheel next`` starts fast.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

import click

from cronwheel.errors import CronwheelError, NotFoundError

# command name -> "module:attribute" (lazy: importing the store or the worker
# costs start-up time that `cronwheel next` should not pay)
_COMMANDS: dict[str, str] = {
    "next": "cronwheel.cli.next_cmd:next_command",
    "serve": "cronwheel.cli.run_cmds:serve_command",
    "scheduler": "cronwheel.cli.run_cmds:scheduler_command",
    "worker": "cronwheel.cli.run_cmds:worker_command",
    "migrate": "cronwheel.cli.run_cmds:migrate_command",
    "status": "cronwheel.cli.status_cmd:status_command",
    "bench": "cronwheel.cli.bench_cmd:bench_command",
    "jobs": "cronwheel.cli.jobs_cmd:jobs_group",
    "firings": "cronwheel.cli.firings_cmd:firings_group",
    "api": "cronwheel.cli.api_cmd:api_command",
    "tokens": "cronwheel.cli.tokens_cmd:tokens_group",
    "quota": "cronwheel.cli.quota_cmd:quota_group",
    "history": "cronwheel.cli.history_cmd:history_group",
    "calendars": "cronwheel.cli.calendars_cmd:calendars_group",
    "simulate": "cronwheel.cli.simulate_cmd:simulate_command",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command


def fail(message: str) -> None:
    """Print one error line and exit 2 (bad input; nothing was changed)."""
    click.echo(f"cronwheel: error: {message}", err=True)
    sys.exit(2)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cronwheel")
def cli() -> None:
    """cronwheel — a distributed task scheduler that keeps its promises."""


def main(argv: list[str] | None = None) -> Any:
    import signal

    # A child of `serve` inherits its parent's blocked stop signals: undo that.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    # psycopg's pool logs every failed connection attempt through stdlib logging; a
    # one-shot command reports the failure itself, in one line (long-running roles
    # turn these logs back on in cronwheel.observability.logs.configure).
    logging.getLogger("psycopg").setLevel(logging.CRITICAL)
    try:
        return cli.main(args=argv, prog_name="cronwheel", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("cronwheel: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        # One line, naming the parameter, instead of click's multi-line usage block.
        fail(exc.format_message().replace("\n", " "))
    except click.ClickException as exc:
        fail(exc.format_message().replace("\n", " "))
    except NotFoundError as exc:
        fail(str(exc))
    except CronwheelError as exc:
        fail(str(exc))
    return None
