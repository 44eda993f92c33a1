"""The local process controller: signal an Attempt's process group, but only if it is still ours.

Every signal is preceded by an identity check against what was recorded durably when the Attempt
started (pid, process group, start time, boot id). The order of the checks is the contract:

1. recorded on another boot, or neither the pid nor any member of its group is alive ->
   ``already_exited`` (a leader that exited and left children in the group still gets them
   signalled: the kernel does not reuse a pid that is still a live group's id);
2. a process has the pid but a different start time: the kernel reused the number for someone
   else -> ``identity_mismatch``, and that process is never signalled;
3. same process, but it left its process group -> ``pid_mismatch`` (we would signal a group that
   is not the Attempt's);
4. otherwise SIGTERM to the whole group -> ``termination_requested``; the group vanishing in
   between is ``already_exited``; EPERM or any other OS error is ``dispatch_error`` (retryable).

Residual race, stated honestly: between the check and ``killpg`` the process could exit and its
pid be reused as a new group leader. The window is microseconds and needs a full pid wrap-around;
``pidfd_send_signal`` would close it for one process, but there is no pidfd for a group.
"""

from __future__ import annotations

import enum
import os
import signal
from collections.abc import Callable

from edge_runtime.contract.cancellation_dispatch import DispatchResult
from edge_runtime.service.errors import ProcfsUnavailableError
from edge_runtime.service.process_identity import (
    BOOT_ID_PATH,
    PROC_ROOT,
    ProcessIdentity,
    escaped_descendants,
    group_members,
    read_boot_id,
    read_stat,
)


class KillOutcome(enum.StrEnum):
    """What a SIGKILL at the end of the grace period did."""

    KILLED = "killed"
    ALREADY_EXITED = "already_exited"
    IDENTITY_MISMATCH = "identity_mismatch"
    ERROR = "error"


class LocalProcessController:
    """Identity-checked signals to the process groups of local Attempts.

    Args:
        proc_root, boot_id_path: where to read process identities (tests point them elsewhere).
        killpg: the group-signal primitive (tests inject failures such as EPERM).
    """

    __slots__ = ("_proc_root", "_boot_id_path", "_killpg")

    def __init__(
        self,
        *,
        proc_root: str = PROC_ROOT,
        boot_id_path: str = BOOT_ID_PATH,
        killpg: Callable[[int, int], None] = os.killpg,
    ) -> None:
        self._proc_root = proc_root
        self._boot_id_path = boot_id_path
        self._killpg = killpg

    def request_termination(self, expected: ProcessIdentity | None) -> DispatchResult:
        """Send SIGTERM to the Attempt's process group if the recorded identity still holds."""
        if expected is None:
            return DispatchResult.HANDLE_MISSING  # not started yet: no identity recorded
        try:
            verdict = self._check(expected)
        except ProcfsUnavailableError:
            return DispatchResult.DISPATCH_ERROR
        if verdict is not None:
            return verdict
        try:
            self._killpg(expected.pgid, signal.SIGTERM)
        except ProcessLookupError:
            return DispatchResult.ALREADY_EXITED
        except OSError:  # EPERM and anything else: the signal was not delivered; retry later
            return DispatchResult.DISPATCH_ERROR
        return DispatchResult.TERMINATION_REQUESTED

    def force_kill(self, expected: ProcessIdentity) -> KillOutcome:
        """SIGKILL the group at the end of the grace period, if anything of it is left.

        The leader may already be gone while children it left behind still hold the group; the
        kernel does not reuse a pid that is still some live group's id, so a group with members
        and a vanished leader is still the Attempt's.
        """
        try:
            if read_boot_id(self._boot_id_path) != expected.boot_id:
                return KillOutcome.ALREADY_EXITED
            stat = read_stat(expected.pid, self._proc_root)
            if stat is not None and stat.start_ticks != expected.start_ticks:
                return KillOutcome.IDENTITY_MISMATCH
            leader_alive = stat is not None and not stat.is_zombie and stat.pgid == expected.pgid
            if not leader_alive and not self.group_alive(expected):
                return KillOutcome.ALREADY_EXITED
        except ProcfsUnavailableError:
            return KillOutcome.ERROR
        try:
            self._killpg(expected.pgid, signal.SIGKILL)
        except ProcessLookupError:
            return KillOutcome.ALREADY_EXITED
        except OSError:
            return KillOutcome.ERROR
        return KillOutcome.KILLED

    def leader_alive(self, expected: ProcessIdentity) -> bool:
        """Whether the recorded leader process still runs (a zombie counts as exited).

        Raises:
            ProcfsUnavailableError: ``/proc`` cannot be read.
        """
        if read_boot_id(self._boot_id_path) != expected.boot_id:
            return False
        stat = read_stat(expected.pid, self._proc_root)
        return stat is not None and not stat.is_zombie and stat.start_ticks == expected.start_ticks

    def group_alive(self, expected: ProcessIdentity) -> bool:
        """Whether any live process is still in the Attempt's process group and session.

        Raises:
            ProcfsUnavailableError: ``/proc`` cannot be listed.
        """
        for _ in group_members(expected.pgid, session=expected.pgid, proc_root=self._proc_root):
            return True
        return False

    def escaped_descendants(self, expected: ProcessIdentity) -> list[int]:
        """Pids of live descendants of the Attempt's group outside it: signals to the group miss them.

        Raises:
            ProcfsUnavailableError: ``/proc`` cannot be listed.
        """
        return escaped_descendants(expected, self._proc_root)

    def _check(self, expected: ProcessIdentity) -> DispatchResult | None:
        if read_boot_id(self._boot_id_path) != expected.boot_id:
            return DispatchResult.ALREADY_EXITED
        stat = read_stat(expected.pid, self._proc_root)
        if stat is None:
            # The leader is gone; children it left in the group are still the Attempt's tree.
            return None if self.group_alive(expected) else DispatchResult.ALREADY_EXITED
        if stat.start_ticks != expected.start_ticks:
            return DispatchResult.IDENTITY_MISMATCH
        if stat.pgid != expected.pgid:
            return DispatchResult.PID_MISMATCH
        return None
