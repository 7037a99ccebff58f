"""What every command shares: exit codes, the setup errors that are usage errors, the console summary.

    sys.exit(exit_code(results, strict=False))     # 0 every host checked and passed, 1 otherwise
"""

from __future__ import annotations

import enum
import os
import sys
import threading
from pathlib import Path

import click

from healthcheck.cli.console import summary_lines
from healthcheck.core.profiles import ProfileError
from healthcheck.core.verdicts import run_exit_status
from healthcheck.inventory.hosts import InventoryError
from healthcheck.store.results import RunResults
from healthcheck.store.rundir import RunDirError


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2


INTERRUPTED = 130  # like a shell after SIGINT (143 after SIGTERM)
SETUP_ERRORS = (InventoryError, ProfileError, RunDirError, FileNotFoundError, ValueError, KeyError)


def exit_code(results: RunResults, strict: bool) -> ExitCode:
    """0 only if hosts were selected and every one was checked and passed (``healthcheck.core.verdicts``)."""
    return ExitCode(run_exit_status(results, strict))




def print_summary(results: RunResults, run_dir: Path, verbose: bool = False) -> None:
    """The folded console summary (``healthcheck.cli.console``); ``verbose`` also lists hosts."""
    for line in summary_lines(results, run_dir, verbose):
        click.echo(line)


def exit_now(code: int) -> None:
    """Exit after an interrupt or a stop: host threads still waiting on a node must not hold the
    process until their deadline (results and reports are written by now)."""
    if any(t.name.startswith("hc-host") and t.is_alive() for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))
    sys.exit(code)
