"""The service's end of a task's own message (``edge_runtime.local.notify_handoff``): one thread of
``serve`` with its own connection to the database, like the submit hand-off's.

Each request is checked in this order, and refused with a stable code before anything is queued:
its size and shape (``NOTIFY_INVALID_MESSAGE``), its token against the Attempt it names
(``NOTIFY_TOKEN_INVALID``), the message as ``notify send`` checks it; then the store queues it in
one transaction only while that Attempt runs (``NOTIFY_TOKEN_INVALID`` once it ended) and while
each channel has taken fewer than ``MAX_TASK_MESSAGES`` of it (``NOTIFY_TASK_LIMIT``), as its
Run's (``show RUN`` lists it), and the sender is woken. Every request is logged with the peer's
uid and pid and the Attempt it named; never the token.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from edge_runtime.cli.listener_thread import ListenerThread
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.notifications import (
    NotifyMessageError,
    NotifyServiceUnavailableError,
    NotifyTokenInvalidError,
    check_message,
)
from edge_runtime.contract.redaction import store_redactor
from edge_runtime.local import notify_handoff as wire


class TaskMessageServer(ListenerThread):
    """A ``SideServer`` of ``serve``: takes one task's message at a time."""

    thread_name = "notify-task-messages"
    events = "notify.task_messages"
    connection_events = "notify.task_message"
    request_timeout_s = wire.REQUEST_TIMEOUT_S

    def __init__(self, *, capabilities: wire.TaskCapabilities, open_store: Callable[[], object], journal) -> None:
        super().__init__(open_store=open_store, journal=journal)
        self._capabilities = capabilities

    def _listen(self) -> wire.TaskMessageListener:
        try:
            return wire.TaskMessageListener(self._capabilities.address)
        except OSError as exc:
            # Another service on this database holds it, or another local user bound it first.
            raise NotifyServiceUnavailableError(
                f"the socket {self._capabilities.address} for tasks' messages cannot be bound ({exc.strerror or exc}): "
                f"tasks' `notify send` fails until the service restarts with it free") from None

    def _address(self) -> str:
        return self._capabilities.address

    def _take(self, conn) -> None:
        pid, uid = wire.peer_credentials(conn)
        message = conn.recv(wire.MAX_REQUEST_BYTES + 1)
        verdict, text, code = self._handle(message, pid=pid, uid=uid)
        wire.answer(conn, verdict, text, code)

    def _handle(self, message: bytes, *, pid: int, uid: int) -> tuple[bytes, str, str]:
        request = None if len(message) > wire.MAX_REQUEST_BYTES else wire.TaskMessage.decode(message)
        attempt = None if request is None else request.attempt_id
        try:
            if request is None:
                raise NotifyMessageError(f"not a task's message, or larger than {wire.MAX_REQUEST_BYTES} bytes; "
                                         f"nothing queued")
            if not self._capabilities.opens(request.attempt_id, request.token):
                raise NotifyTokenInvalidError("the token is not this Attempt's; nothing queued")
            check_message(request.title, request.body)
            store = self._store
            records = store.notifications.enqueue_message(request.title, request.body, request.channels or None,
                                                          attempt_id=request.attempt_id)
        except EdgeRuntimeError as exc:
            self._journal.warning("notify.task_message_refused", uid=uid, pid=pid, attempt=attempt, error=exc.code,
                                  detail=str(exc))
            return wire.REFUSED, self._masked(str(exc)), exc.code
        except Exception as exc:  # noqa: BLE001  (this thread's boundary: the task is told, the service goes on)
            self._journal.error("notify.task_message_failed", uid=uid, pid=pid, attempt=attempt,
                                error=type(exc).__name__, detail=str(exc))
            return wire.REFUSED, "the service failed to queue the message; nothing queued", "NOTIFY_STORE_ERROR"
        self._journal.info("notify.task_message_queued", uid=uid, pid=pid, attempt=request.attempt_id,
                           run=records[0].run_id if records else None, outbox=" ".join(r.id for r in records))
        try:
            self._store.wake_workers()  # the service's loop passes, and wakes the sender
        except (EdgeRuntimeError, OSError) as exc:
            self._journal.warning("notify.task_message_wake_failed", detail=str(exc))  # the next pass sends it
        queued = [{"id": r.id, "channel": r.channel} for r in records]
        return wire.OK, msgspec.json.encode(queued).decode(), ""

    def _masked(self, text: str) -> str:
        try:
            return store_redactor(self._store).text(text)
        except EdgeRuntimeError:
            return "refused (the reason could not be masked)"
