"""The command a subscription's pull schedule runs: this program's own ``subscription pull``,
with the database it was added to (``subscription add`` and ``import qinglong`` both make it)."""

from __future__ import annotations

import argparse
import os
import sys


def this_program() -> list[str]:
    """The argv that runs this program again: the built executable, the installed console
    script, or this Python with ``-m edge_runtime``.

    Raises:
        InvalidSubscriptionError: that program is in a place another user can change (root's
            service would run it at every pull).
    """
    from edge_runtime.contract.subscriptions import InvalidSubscriptionError
    from edge_runtime.service.trusted_paths import directory_problem

    if getattr(sys, "frozen", False):
        argv = [sys.executable]
    elif os.path.basename(sys.argv[0]) == "edge-runtime" and os.path.isfile(sys.argv[0]):
        argv = [os.path.abspath(sys.argv[0])]
    else:
        argv = [os.path.abspath(sys.executable), "-m", "edge_runtime"]
    program = argv[0]
    problem = directory_problem(os.path.dirname(program), sticky_ok=True)
    if problem is None:
        info = os.stat(program)
        if info.st_uid not in (0, os.geteuid()) or info.st_mode & 0o022:
            problem = f"{program} is owned by uid {info.st_uid} or writable by others"
    if problem is not None:
        raise InvalidSubscriptionError(f"refusing to schedule pulls by {program}: {problem}; the service would run it "
                                       f"at every pull (install edge-runtime, or run it from a directory only root "
                                       f"can change)")
    return argv


def pull_command(args: argparse.Namespace) -> list[str]:
    """The pull schedule's command, before the subscription's id."""
    return [*this_program(), "--db", os.path.abspath(args.db), "subscription", "pull"]
