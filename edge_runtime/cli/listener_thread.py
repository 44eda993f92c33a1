"""What the service's local-socket side servers share (the submit hand-off, tasks' messages).

Each is a ``SideServer`` of ``serve``: one thread with its own connection to the database, taking
one connection at a time from a listener (``edge_runtime.local.handoff.HandoffListener``,
``edge_runtime.local.notify_handoff.TaskMessageListener``). A subclass says how it listens and what
one connection gets; the thread's life is here: start, the accept loop, and a stop that never
closes the store under a request still running.

Imported by the client end of ``submit`` too (it defines the service end beside it), so nothing is
imported at module level: ``threading`` and ``time`` only when a service starts one.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the client end stays lean)
if TYPE_CHECKING:
    from collections.abc import Callable

#: The pause after a failed ``accept`` (out of descriptors, most likely) before the next.
ACCEPT_RETRY_S = 1.0


class ListenerThread:
    """A thread of ``serve`` serving one listener, one connection at a time.

    Subclasses set the class attributes and implement ``_listen`` and ``_take``.
    """

    #: The thread's name.
    thread_name: str
    #: The journal's event names: ``<events>.listening`` with the address, and the warnings
    #: ``<events>.stop_timed_out``; per connection ``<connection_events>.accept_failed``,
    #: ``<connection_events>.connection_failed``, ``<connection_events>.peer_refused``.
    events: str
    connection_events: str
    #: How long one request may take (the listener's timeout on its connection).
    request_timeout_s: float

    def __init__(self, *, open_store: Callable[[], object], journal) -> None:
        self._open_store = open_store
        self._journal = journal
        self._listener = None
        self._store = None
        self._thread = None

    def _listen(self):
        """The bound listener (``accept``, ``stopping``, ``shutdown``, ``close``).

        Raises:
            EdgeRuntimeError: it cannot be bound (the service says why and goes on without it).
        """
        raise NotImplementedError

    def _address(self) -> str:
        """Where it listens, as the journal names it."""
        raise NotImplementedError

    def _take(self, conn) -> None:
        """Read one request from ``conn``, answer it.

        Raises:
            OSError: the client went away or sent nothing in time (logged; the next one is taken).
        """
        raise NotImplementedError

    def start(self) -> None:
        import threading

        self._store = self._open_store()
        try:
            self._listener = self._listen()
        except BaseException:
            self._store.close()
            self._store = None
            raise
        self._thread = threading.Thread(target=self._serve, name=self.thread_name, daemon=True)
        self._thread.start()
        self._journal.info(f"{self.events}.listening", socket=self._address())

    def stop(self) -> None:
        listener, thread = self._listener, self._thread
        if listener is not None:
            listener.shutdown()
        if thread is not None:
            thread.join(timeout=self.request_timeout_s + 5)
        if listener is not None:
            listener.close()
        if thread is not None and thread.is_alive():
            # Still inside a request (a long wait for the database's lock): its connection is left
            # to it (the thread is a daemon and ends with the process), never closed under it.
            self._journal.warning(f"{self.events}.stop_timed_out")
        elif self._store is not None:
            self._store.close()
        self._listener = self._thread = self._store = None

    def _serve(self) -> None:
        import time

        while True:
            try:
                conn = self._listener.accept()
            except OSError as exc:
                if self._listener.stopping:
                    return  # stop()
                # Out of descriptors, most likely: the clients are told to try again or fall back.
                self._journal.warning(f"{self.connection_events}.accept_failed", detail=str(exc))
                time.sleep(ACCEPT_RETRY_S)
                continue
            if conn is None:  # a peer the listener does not trust, closed unread
                self._journal.warning(f"{self.connection_events}.peer_refused")
                continue
            with conn:
                try:
                    self._take(conn)
                except OSError as exc:  # the client went away or sent nothing in time
                    self._journal.warning(f"{self.connection_events}.connection_failed", detail=str(exc))
