"""Applying an import plan: the scripts first (a schedule's script is there before it can fire),
then the envs, then the schedules, then the subscriptions (each with its pull schedule), each
row in its own short transaction (the same ``Store`` port operations ``schedule add``, ``env
set`` and ``subscription add`` use), a progress line every :data:`PROGRESS_EVERY` rows.

A row that fails is marked ``failed`` with the reason and the others go on; what was created
stays created. Running the same import again creates only what is still missing (the identity
rules of :mod:`edge_runtime.qinglong.import_plan`), so an import that stopped part-way is
finished by running it again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from edge_runtime import operations
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.qinglong.data_folder import MAX_SCRIPT_BYTES, QingLongSource
from edge_runtime.qinglong.errors import ScriptsDirectoryError
from edge_runtime.qinglong.import_plan import Action, EnvTarget, ImportPlan, PlanItem
from edge_runtime.qinglong.script_files import FileWriter

#: A progress line every this many rows applied.
PROGRESS_EVERY = 100
#: Free space left on the scripts directory's filesystem after the copy, at least.
SPARE_BYTES = 4 * 1024 * 1024


def check_space(plan: ImportPlan, scripts_fd: int) -> None:
    """Refuse before anything is written when the scripts would not fit.

    Raises:
        ScriptsDirectoryError: naming what is needed and what is free.
    """
    needed = plan.script_bytes_to_create()
    if not needed:
        return
    info = os.fstatvfs(scripts_fd)
    free = info.f_bavail * info.f_frsize
    if needed + SPARE_BYTES > free:
        raise ScriptsDirectoryError(
            f"the scripts need {needed // 1024} KiB and {plan.scripts_dir} has {free // 1024} KiB free (keeping "
            f"{SPARE_BYTES // (1024 * 1024)} MiB spare): nothing imported; free some space or give --scripts-dir "
            f"on a larger filesystem")


def apply_plan(plan: ImportPlan, source: QingLongSource, store: Any, envs: EnvTarget, scripts_fd: int,
               progress: Callable[[str], object]) -> None:
    """Create every ``create`` row of ``plan`` (each becomes ``created`` or ``failed``)."""
    total = len(plan.scripts) + len(plan.envs) + len(plan.schedules) + len(plan.subscriptions)
    done = [0]

    def step() -> None:
        done[0] += 1
        if done[0] % PROGRESS_EVERY == 0:
            progress(f"applied {done[0]} of {total}")

    check_space(plan, scripts_fd)
    rows = {file.path: item for item, file in plan.scripts}
    writer = FileWriter(scripts_fd)
    try:
        files = iter(source.stream(file for _, file in plan.scripts))
        while True:
            try:
                file, chunks = next(files)
            except StopIteration:
                break
            except (OSError, EdgeRuntimeError) as exc:
                # The source failed as a whole (the archive became unreadable): the rest fail too.
                for item in rows.values():
                    _failed(item, f"the source cannot be read: {exc}")
                break
            item = rows.pop(file.path)
            try:
                written = writer.write(file.path, chunks, sha256=file.sha256, limit=MAX_SCRIPT_BYTES,
                                       executable=file.executable)
                item.action = Action.CREATED if written else Action.EXISTS
                if not written:
                    item.reason = "the same file is here already"
            except (OSError, EdgeRuntimeError) as exc:
                _failed(item, exc)
            step()
        for item in rows.values():  # listed, but gone from the source by now
            if item.action is Action.CREATE:
                _failed(item, "no longer in the source")
    finally:
        writer.close()
    for item, payload in plan.envs:
        try:
            envs.apply(payload)
            item.action = Action.CREATED
        except EdgeRuntimeError as exc:
            _failed(item, exc)
        step()
    for item, command in plan.schedules:
        try:
            record = store.schedules.add(command)
            item.action = Action.CREATED
            item.detail["id"] = record.id
        except EdgeRuntimeError as exc:
            _failed(item, exc)
        step()
    subscriptions = getattr(store, "subscriptions", None)
    for item, command in plan.subscriptions:
        if subscriptions is None:
            _failed(item, "this store keeps no subscriptions (the Local store's alone)")
            continue
        try:
            record = subscriptions.add(command)
            item.action = Action.CREATED
            item.detail["id"] = record.id
        except EdgeRuntimeError as exc:
            _failed(item, exc)
        step()
    if plan.schedules or plan.subscriptions:
        operations.wake_schedules(store)


def _failed(item: PlanItem, reason: object) -> None:
    item.action = Action.FAILED
    item.reason = str(reason)
