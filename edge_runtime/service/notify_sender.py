"""Delivering the notification outbox (docs/notifications.md): one thread of ``serve``.

Each pass claims the due rows in one short transaction (their lease: this sender's owner name,
an expiry past one send's timeout, tries + 1), then, outside any transaction, composes each
message (the Run as the store has it, the end of its log masked and cut), sends it and records the
verdict in one short transaction fenced by the owner and the try: ``sent``; ``pending`` again
after the backoff; or ``given_up`` with the reason. A sender killed during a send leaves its
lease to expire; the next sender sends the row again under the same idempotency key (a provider
that takes one drops the repeat).

The thread sleeps until the next row is due or the service's loop wakes it (a pass of the loop
follows every Run's end and every ``notify send``, which pokes the service).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from edge_runtime.contract.backoff import worth_logging
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.notifications import (
    LOG_TAIL_BYTES,
    NotifySendError,
    Channel,
    ClaimedMessage,
    OutboxStatus,
    Outcome,
)
from edge_runtime.contract.notify_channels import MessageText, build_request, fit, judge, run_message
from edge_runtime.contract.redaction import Redactor, store_redactor
from edge_runtime.service.journal import Journal
from edge_runtime.service.notify_transport import Transports, send

#: The longest sleep between two looks at the outbox when nothing wakes the sender.
IDLE_LOOK_S = 300.0
#: After a failed pass (the database busy), the next look.
FAILED_PASS_S = 5.0


def read_log_tail(path: str, redactor: Redactor, limit: int = LOG_TAIL_BYTES) -> str:
    """The end of an Attempt's log, masked before it is cut (a secret across the cut is masked
    too: the masker treats the start as a cut); '' when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - 4 * limit)
        os.lseek(fd, start, os.SEEK_SET)
        data = os.read(fd, size - start)
    except OSError:
        return ""
    finally:
        os.close(fd)
    masker = redactor.log(cut_at_start=start > 0)
    masked = masker.feed(data) + masker.flush()
    text = masked.decode("utf-8", "replace")
    return text[-limit:]


def compose(store: Any, message: ClaimedMessage, redactor: Redactor) -> MessageText:
    """The message of an outbox row: ``notify send``'s own title and body (a task's is its Run's
    too, without an outcome), or a Run's end."""
    if message.outcome is None:
        return MessageText(title=redactor.text(message.title or ""), head=redactor.text(message.body or ""))
    detail = store.runs.detail(message.run_id)
    attempts = sorted(detail.attempts, key=lambda a: a.attempt)
    last = attempts[-1] if attempts else None
    task = detail.name if isinstance(detail.name, str) else " ".join(detail.command or []) or detail.id
    exit_code = last.exit_code if last is not None and isinstance(last.exit_code, int) else None
    started = next((a.started_at_ms for a in attempts if isinstance(a.started_at_ms, int)), None)
    finished = detail.finished_at_ms if isinstance(detail.finished_at_ms, int) else None
    duration = finished - started if started is not None and finished is not None else None
    log_path = last.log_path if last is not None and isinstance(last.log_path, str) else None
    tail = read_log_tail(log_path, redactor) if log_path else ""
    text = run_message(task=task, outcome=message.outcome or Outcome.FAILED, exit_code=exit_code,
                       duration_ms=duration, run_id=detail.id, log_tail=tail, coalesced=message.coalesced,
                       since_ms=message.since_ms)
    return MessageText(title=redactor.text(text.title), head=redactor.text(text.head), log_tail=text.log_tail)


def send_message(transports: Transports, channel: Channel, text: MessageText, *, key: str, now_ms: int,
                 status: str = "", run_id: str = "") -> None:
    """Send one message through ``channel``.

    Raises:
        NotifySendError: it was not taken (``retryable`` says whether a later try may be).
    """
    title, body = fit(text, channel.kind)
    request = build_request(channel, title, body, key=key, now_ms=now_ms, status=status, run_id=run_id)
    code, answer = send(transports, request, ca_file=channel.param("ca_file"))
    verdict = judge(channel.kind, code, answer)
    if not verdict.ok:
        raise NotifySendError(verdict.reason, retryable=verdict.retryable)


class NotifySender:
    """The outbox's sender: a side server of ``serve`` (``start`` / ``stop``), woken by ``wake``."""

    def __init__(self, *, open_store: Callable[[], Any], journal: Journal, owner: str,
                 transports: Transports | None = None, detect: Callable[[], Transports] | None = None) -> None:
        self._open_store = open_store
        self._journal = journal
        self.owner = owner
        self._transports = transports
        self._detect = detect
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._failures = 0

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        """Find the transports and open the sender's own connection here, in the service's thread,
        so that once ``notify.transports`` is logged the sender holds all it will hold at rest."""
        if self._transports is None:
            from edge_runtime.service.notify_transport import detect

            self._transports = (self._detect or detect)()
        store = self._open_store()
        self._journal.info("notify.transports", available=self._transports.describe())
        self._thread = threading.Thread(target=self._serve, args=(store,), name="notify-sender", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            # A send in flight finishes or times out (its row's lease covers a restart meanwhile).
            self._thread.join(timeout=5)

    def _serve(self, store: Any) -> None:
        try:
            while not self._stopping:
                try:
                    wait_s = self._pass(store)
                except Exception as exc:  # noqa: BLE001  (the sender thread's boundary: a bug is logged, retried)
                    self._failures += 1
                    if worth_logging(self._failures):
                        self._journal.error("notify.sender_failed", error=type(exc).__name__, detail=str(exc),
                                            failures=self._failures)
                    wait_s = FAILED_PASS_S
                self._wake.wait(wait_s)
                self._wake.clear()
        finally:
            store.close()

    def _pass(self, store: Any) -> float:
        """Deliver what is due; the seconds until the next look."""
        try:
            outbox = store.notifications
            # A read first: a wake-up with nothing due (most passes of the loop) writes nothing.
            due, now = outbox.next_due_at_ms(), store.now_ms()
            while not self._stopping and due is not None and due <= now:
                for message in outbox.claim_due(self.owner):
                    self.deliver(store, message)
                due, now = outbox.next_due_at_ms(), store.now_ms()
        except EdgeRuntimeError as exc:
            self._failures += 1
            if worth_logging(self._failures):
                self._journal.error("notify.pass_failed", error=exc.code, detail=str(exc), failures=self._failures)
            return FAILED_PASS_S
        self._failures = 0
        if due is None:
            return IDLE_LOOK_S
        return min(IDLE_LOOK_S, max(0.05, (due - now) / 1000))

    def deliver(self, store: Any, message: ClaimedMessage) -> OutboxStatus | None:
        """Send one claimed row and record the verdict; the row's new status (None: the lease was
        lost meanwhile, nothing recorded)."""
        outbox = store.notifications
        redactor = store_redactor(store)
        channel = outbox.channel_by_id(message.channel_id)
        if channel is None:
            return outbox.record_failure(message, self.owner, f"channel {message.channel_name} was removed",
                                         retryable=False)
        try:
            text = compose(store, message, redactor)
            send_message(self._transports, channel, text, key=message.idempotency_key, now_ms=store.now_ms(),
                         status="" if message.outcome is None else message.outcome.value,
                         run_id=message.run_id or "")
        except EdgeRuntimeError as exc:
            reason = redactor.text(str(exc))
            status = outbox.record_failure(message, self.owner, reason,
                                           retryable=exc.retryable)
            self._journal.warning("notify.failed", outbox=message.id, channel=message.channel_name,
                                  tries=message.tries, error=exc.code, detail=reason,
                                  status=None if status is None else status.value)
            return status
        sent = outbox.record_sent(message, self.owner)
        self._journal.info("notify.sent", outbox=message.id, channel=message.channel_name, tries=message.tries,
                           recorded=sent)
        return OutboxStatus.SENT if sent else None


class NotifyWakeHook:
    """The service loop's hook (``TickHook``) that wakes the senders on each pass; it does nothing
    else and is never due. ``senders`` fills once the side servers started."""

    def __init__(self, senders: list[NotifySender]) -> None:
        self._senders = senders

    def tick(self) -> bool:
        for sender in self._senders:
            sender.wake()
        return False

    def next_due_at_ms(self) -> None:
        return None
