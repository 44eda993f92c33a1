"""What each script of a folder would be scheduled as: its header read
(:mod:`edge_runtime.qinglong.script_headers`), its expression checked by the cron parser, its
command made (``task <path>``). ``scripts scan`` prints it and adds the schedules; subscriptions
read their new scripts the same way (:func:`scanned_script`).

A script without a schedule in its header gets none, unless a seed is given: then a daily time
drawn from the seed and its path (:func:`~edge_runtime.qinglong.script_headers.random_daily_expression`),
the same at every scan. An expression the cron parser refuses is shown with its reason, and
never scheduled.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import msgspec

from edge_runtime.contract.cron import InvalidCronExpressionError, parse_schedule
from edge_runtime.qinglong.script_files import open_file_at, read_chunks, walk
from edge_runtime.qinglong.script_headers import random_daily_expression, read_header

#: The files read as scripts: the ones ``task`` runs (node, python3, bash, a TypeScript runner).
SCRIPT_SUFFIXES = (".js", ".mjs", ".cjs", ".ts", ".py", ".sh")
#: Bytes of a script read for its header (a header is at the top; a bundle can be megabytes).
MAX_HEADER_BYTES = 1024 * 1024


class ScannedScript(msgspec.Struct, rename="camel", kw_only=True):
    """One script: its name, the command that runs it, and the schedule its header asks for
    (``expression``, canonical; ``rule`` and ``line`` say where it came from), or ``problem``."""

    path: str
    name: str
    name_rule: str
    command: list[str]
    expression: str | None = None
    rule: str | None = None
    line: int | None = None
    problem: str | None = None
    #: With ``--add``: ``created``, ``exists`` (the same name, command and expression), ``failed``.
    action: str | None = None
    reason: str | None = None
    schedule_id: str | None = None


class SkippedScript(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    path: str
    reason: str


def scanned_script(text: str, path: str, command: list[str], *, random_seed: str | None = None) -> ScannedScript:
    """The scan of one script whose text is ``text`` at ``path`` (rule 1 of the header looks for
    its file name), run by ``command``."""
    header = read_header(text, path)
    found = header.schedule
    script = ScannedScript(path=path, name=header.name, name_rule=header.name_rule, command=command)
    if found is not None:
        try:
            script.expression = parse_schedule(found.expression).text
            script.rule, script.line = found.rule, found.line
        except InvalidCronExpressionError as exc:
            script.problem = f"its header's expression {found.expression!r} ({found.rule}, line {found.line}) " \
                             f"is not valid: {exc}"
        return script
    if random_seed is not None:
        script.expression, script.rule = random_daily_expression(random_seed, path), "random"
    else:
        script.problem = "no schedule in its header"
    return script


def scan_folder(top_fd: int, command: Callable[[str], list[str]], *, random_seed: str | None = None,
                progress: Callable[[str], object] = lambda _: None) -> tuple[list[ScannedScript], list[SkippedScript]]:
    """Every script below the folder open as ``top_fd`` (by :data:`SCRIPT_SUFFIXES`), and the
    script-named entries not read (links, unreadable, odd names)."""
    scanned: list[ScannedScript] = []
    skipped: list[SkippedScript] = []
    for entry in walk(top_fd):
        if not entry.path.endswith(SCRIPT_SUFFIXES):
            continue
        if entry.skipped is not None:
            skipped.append(SkippedScript(path=entry.path, reason=entry.skipped))
            continue
        try:
            fd = open_file_at(top_fd, entry.path)
        except OSError as exc:
            skipped.append(SkippedScript(path=entry.path, reason=f"cannot be read: {exc.strerror or exc}"))
            continue
        try:
            data = b"".join(read_chunks(fd, MAX_HEADER_BYTES))
        finally:
            os.close(fd)
        scanned.append(scanned_script(data.decode("utf-8", "replace"), entry.path, command(entry.path),
                                      random_seed=random_seed))
        if len(scanned) % 100 == 0:
            progress(f"read {len(scanned)} scripts")
    return scanned, skipped
