"""``submit`` handed to the running service (``edge_runtime.local.handoff``): both ends.

The client end (``try_hand_off``) runs first in every ``submit``, before argparse, msgspec or apsw
are imported; it only finds the database the command means and the service's socket. When no
service takes the request, or the service says it did not store it, ``submit`` runs as it always
did, in this process (so every error is reported by the one ordinary path).

The service end (``SubmitHandoffServer``) is one thread of ``serve`` with its own connection to
the database, like the web panel's; each request is parsed and stored by
``edge_runtime.cli.submit.run_handed_off``: the same parser, contract and store as a ``submit``
in its own process.
"""

from __future__ import annotations

import os
import sys

from edge_runtime.cli.listener_thread import ListenerThread
from edge_runtime.cli.reporting import EXIT_ERROR, report_error, wants_json
from edge_runtime.local import handoff

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the client end stays lean)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


def try_hand_off(argv: Sequence[str]) -> int | None:
    """Give ``edge-runtime ARGV`` (a ``submit``) to a running service: the exit code when it was
    handled there, None when this process must run it (nothing was stored)."""
    db_path = _db_path_of(argv)
    if db_path is None:
        return None
    try:
        request = handoff.HandoffRequest(os.path.abspath(db_path), os.getcwd(), list(argv))
    except OSError:
        return None  # no working directory (removed): the ordinary path reports what it must
    try:
        printed = handoff.hand_off(request)
    except handoff.SubmitUnconfirmedError as exc:
        report_error(wants_json(argv), exc.code,
                     f"{exc}; the Run may or may not be queued: check `edge-runtime list` before submitting again")
        return EXIT_ERROR
    if printed is None:
        return None
    sys.stdout.write(printed)
    return 0


def _db_path_of(argv: Sequence[str]) -> str | None:
    """The database ``argv`` names (``--db PATH`` or ``--db=PATH``, else the default), or None
    when this end cannot be sure of it or should not try: help, a batch (it reads a file or
    stdin, here), or an option it does not know for certain (the parser, in the service or
    here, decides those)."""
    db_path = None
    tokens = iter(argv)
    for token in tokens:
        if token == "--":
            break
        if token == "--db":
            db_path = next(tokens, None)
            if db_path is None:
                return None
        elif token.startswith("--db="):
            db_path = token[len("--db="):]
        elif token in ("-h", "--help") or token.startswith(("--b", "--d")):
            return None  # help; --batch (and its abbreviations); an abbreviation of --db
    if db_path is not None:
        return db_path or None
    from edge_runtime.cli.db_path import DatabasePathError, default_db_path

    try:
        return default_db_path()
    except DatabasePathError:
        return None  # the ordinary path reports it


class SubmitHandoffServer(ListenerThread):
    """The service's end of the hand-off (a ``SideServer`` of ``serve``): a thread that takes one
    request at a time. ``open_store`` gives its own connection; ``db_path`` is the service's
    database (a request for another one is declined)."""

    thread_name = "submit-handoff"
    events = connection_events = "submit_handoff"
    request_timeout_s = handoff.REQUEST_TIMEOUT_S

    def __init__(self, *, db_path: str, open_store: Callable[[], object], journal,
                 scripts_dir: str | None = None) -> None:
        super().__init__(open_store=open_store, journal=journal)
        self._db_path = os.path.abspath(db_path)
        #: This service's scripts directory: a ``task`` command's script is checked there.
        self._scripts_dir = scripts_dir

    def _listen(self) -> handoff.HandoffListener:
        return handoff.HandoffListener(self._db_path)

    def _address(self) -> str:
        return str(self._listener.path)

    def _take(self, conn) -> None:
        message = conn.recv(handoff.MAX_REQUEST_BYTES)
        request = handoff.HandoffRequest.decode(message)
        if request is None:
            self._journal.warning("submit_handoff.request_refused", bytes=len(message))
            handoff.answer(conn, handoff.FALLBACK)
            return
        handoff.answer(conn, *self._handle(request))

    def _handle(self, request: handoff.HandoffRequest) -> tuple[bytes, str]:
        """The answer to one request. Everything up to and including the store's transaction may
        fail into ``fallback`` (nothing is stored then: the client runs the command itself); once
        the Run is stored, the answer is ``ok`` whatever happens after."""
        from edge_runtime import operations
        from edge_runtime.cli.submit import handed_off_command, handed_off_output

        try:
            prepared = handed_off_command(self._db_path, request)
            if prepared is None:
                return handoff.FALLBACK, ""
            command, as_json = prepared
            record = operations.submit(self._store, command, warn=self._warn, scripts_dir=lambda: self._scripts_dir)
        except Exception as exc:  # noqa: BLE001  (this thread's boundary: nothing stored, the client reports it)
            self._journal.info("submit_handoff.declined", error=getattr(exc, "code", type(exc).__name__))
            return handoff.FALLBACK, ""
        try:
            return handoff.OK, handed_off_output(self._store, record, as_json=as_json)
        except Exception as exc:  # noqa: BLE001  (stored: the id is the answer; never a second Run)
            self._journal.error("submit_handoff.output_failed", run_id=record.id, error=type(exc).__name__, detail=str(exc))
            return handoff.OK, record.id + "\n"

    def _warn(self, text: str) -> None:
        self._journal.warning("submit_handoff.wake_failed", detail=text.strip())
